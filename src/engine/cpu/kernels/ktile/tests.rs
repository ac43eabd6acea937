//! The K-quant tiles against the plain-Rust row dot (`dot_scalar`, itself checked against candle in each
//! type's tests): bit for bit, on every instruction set this machine has, for every token count, with padding
//! rows and saturating activations; and the packing against the raw super-blocks.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::KTile;
use crate::engine::cpu::act::{quantize_q8k, BlockQ8K, QK_K};
use crate::engine::cpu::kernels::kquant::dot_scalar;
use crate::engine::cpu::kernels::testing::{activations, check_tiled};
use crate::engine::cpu::kernels::{q4_k::Q4K, q6_k::Q6K};

/// A random super-block with finite f16 scales at the byte offsets `f16s`.
fn block<K: KTile>(rng: &mut StdRng, f16s: &[usize]) -> Vec<u8> {
    let mut b: Vec<u8> = (0..K::BLOCK_BYTES).map(|_| rng.gen()).collect();
    for &at in f16s {
        b[at..at + 2]
            .copy_from_slice(&half::f16::from_f32(rng.gen_range(-0.01..0.01)).to_le_bytes());
    }
    b
}

/// Activation rows of `nb` super-blocks: random with outliers, and at the extremes (every quant 127, −128,
/// alternating), with their `bsums`.
fn acts(rng: &mut StdRng, nb: usize) -> Vec<Vec<BlockQ8K>> {
    let mut rows: Vec<Vec<BlockQ8K>> = (0..3)
        .map(|_| {
            let mut a = vec![BlockQ8K::default(); nb];
            quantize_q8k(&activations(rng, nb * QK_K), &mut a);
            a
        })
        .collect();
    for f in [
        (|_: usize| 127i8) as fn(usize) -> i8,
        |_| -128,
        |i| if i % 2 == 0 { 127 } else { -128 },
    ] {
        let mut b = BlockQ8K {
            d: 1.0 / 127.0,
            ..Default::default()
        };
        for (i, q) in b.qs.iter_mut().enumerate() {
            *q = f(i);
        }
        for (j, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        rows.push(vec![b; nb]);
    }
    rows
}

fn check<K: KTile + crate::engine::cpu::kernels::Tiled<Act = BlockQ8K>>(f16s: &[usize]) {
    let mut rng = StdRng::seed_from_u64(0x4b71 ^ K::BLOCK_BYTES as u64);
    for (rows, nb) in [(8, 1), (1, 2), (13, 2), (16, 3)] {
        let raw: Vec<u8> = (0..rows * nb)
            .flat_map(|_| block::<K>(&mut rng, f16s))
            .collect();
        let acts = acts(&mut rng, nb);
        check_tiled::<K, _>(&raw, rows, nb, &acts, |w, x| dot_scalar::<K>(w, x));
    }
}

#[test]
fn q4_k_tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
    check::<Q4K>(&[0, 2]);
}

#[test]
fn q6_k_tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
    check::<Q6K>(&[208]);
}
