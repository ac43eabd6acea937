//! The tiles against the canonical row dot (`vec_dot` on the raw blocks, itself checked against candle's
//! dequantisation in each type's tests): bit for bit, on every instruction set this machine has, for every
//! token count, with padding rows and saturating inputs; and the packing against the raw blocks.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{dot_group, pack, tile_bytes};
use crate::engine::cpu::act::{quantize_q8, BlockQ8};
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::kernels::block32::tests::random_block;
use crate::engine::cpu::kernels::block32::{Block32, Quants};
use crate::engine::cpu::kernels::testing::{activations, check_tiled};
use crate::engine::cpu::kernels::WeightKernel;

/// `rows` rows of `nb` blocks: each block from `block`.
fn matrix<B: Block32>(
    rng: &mut StdRng,
    rows: usize,
    nb: usize,
    block: &dyn Fn(&mut StdRng) -> Vec<u8>,
) -> Vec<u8> {
    (0..rows * nb).flat_map(|_| block(rng)).collect()
}

fn check_shapes<B: Block32 + Send + Sync + 'static>(
    rng: &mut StdRng,
    block: &dyn Fn(&mut StdRng) -> Vec<u8>,
    acts: impl Fn(&mut StdRng, usize) -> Vec<Vec<BlockQ8>>,
) {
    for (rows, nb) in [(8, 1), (1, 3), (13, 2), (16, 28), (7, 5)] {
        let raw = matrix::<B>(rng, rows, nb, block);
        let acts = acts(rng, nb);
        check_tiled::<B, _>(&raw, rows, nb, &acts, |w, x| B::vec_dot(Isa::Scalar, w, x));
    }
}

/// Five quantized activation rows of `nb` blocks, with outliers.
fn random_acts(rng: &mut StdRng, nb: usize) -> Vec<Vec<BlockQ8>> {
    (0..5)
        .map(|_| {
            let mut a = vec![BlockQ8::default(); nb];
            quantize_q8(&activations(rng, nb * 32), &mut a);
            a
        })
        .collect()
}

/// Activation rows at the quantizer's limits: all 127, all −127, alternating, and half/half.
fn extreme_acts(_: &mut StdRng, nb: usize) -> Vec<Vec<BlockQ8>> {
    let row = |f: &dyn Fn(usize) -> f32| {
        let x: Vec<f32> = (0..nb * 32).map(f).collect();
        let mut a = vec![BlockQ8::default(); nb];
        quantize_q8(&x, &mut a);
        a
    };
    vec![
        row(&|_| 1.0),
        row(&|_| -1.0),
        row(&|i| if i % 2 == 0 { 1.0 } else { -1.0 }),
        row(&|i| if (i / 16) % 2 == 0 { -1.0 } else { 1.0 }),
    ]
}

/// A block whose quants are all at one extreme (or alternating between them), so that no 16-bit sum of a
/// SIMD path may saturate unnoticed.
fn extreme_block<B: Block32>(rng: &mut StdRng) -> Vec<u8> {
    let mut b = random_block::<B>(rng);
    let top: u8 = match B::QUANTS {
        Quants::Nibbles => 15,
        Quants::Nibbles5 => 31,
        Quants::Bytes => 127,
    };
    let lowest: u8 = if B::QUANTS == Quants::Bytes {
        0x80 // −128
    } else {
        0
    };
    let pick = rng.gen_range(0..3);
    let q: [u8; 32] = std::array::from_fn(|j| match pick {
        0 => top,
        1 => lowest,
        _ => {
            if j % 2 == 0 {
                top
            } else {
                lowest
            }
        }
    });
    super::super::block32::store_quants::<B>(&q, &mut b);
    b
}

/// The whole check for one type (called from each type's tests).
pub fn check_tiles<B: Block32 + Send + Sync + 'static>() {
    let mut rng = StdRng::seed_from_u64(0x7113 ^ B::BYTES as u64);
    check_shapes::<B>(&mut rng, &random_block::<B>, random_acts);
    check_shapes::<B>(&mut rng, &extreme_block::<B>, extreme_acts);
    check_shapes::<B>(&mut rng, &extreme_block::<B>, random_acts);
}

/// ns per (row, token) dot of a 4864-column matrix with every instruction set, `N` = 1 and 4 tokens per
/// tile call: `cargo test --release --lib packed::tests::timing -- --ignored --nocapture`.
#[test]
#[ignore = "timing, run by hand"]
fn timing() {
    use crate::engine::cpu::kernels::{q4_0::Q4_0, q5_0::Q5_0, q8_0::Q8_0};
    fn time<B: Block32 + Send + Sync + 'static>() {
        let mut rng = StdRng::seed_from_u64(9);
        let (rows, nb) = (64, 4864 / 32);
        let raw = matrix::<B>(&mut rng, rows, nb, &random_block::<B>);
        let packed = pack::<B>(&raw, rows, nb);
        let acts = random_acts(&mut rng, nb);
        let gb = nb * tile_bytes::<B>();
        let x4 = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
        for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
            let best = |f: &dyn Fn() -> f32| {
                (0..30)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        std::hint::black_box(f());
                        t.elapsed().as_nanos() as f64
                    })
                    .fold(f64::MAX, f64::min)
            };
            let one = best(&|| {
                packed
                    .chunks_exact(gb)
                    .map(|g| dot_group::<B, 1>(isa, std::hint::black_box(g), [x4[0]])[0][0])
                    .sum()
            }) / rows as f64;
            let four = best(&|| {
                packed
                    .chunks_exact(gb)
                    .map(|g| dot_group::<B, 4>(isa, std::hint::black_box(g), x4)[3][0])
                    .sum()
            }) / (rows * 4) as f64;
            println!(
                "{:>5} {:>10}: N=1 {one:6.1} ns/row-dot, N=4 {four:6.1} ns/row-dot",
                B::NAME,
                isa.name()
            );
        }
    }
    time::<Q4_0>();
    time::<Q5_0>();
    time::<Q8_0>();
}
