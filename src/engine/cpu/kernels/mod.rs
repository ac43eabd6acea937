//! Dot-product kernels: one file per weight type, each dotting rows of that type (kept in the GGUF's own block
//! layout) with quantized activations, with a scalar path and the SIMD paths of [`Isa`]. The forward pass and
//! [`super::qmatrix`] reach them only through [`WeightKernel`], so adding a type is adding a file.

use candle_core::quantized::GgmlDType;

use super::act::ActBlock;
use super::isa::Isa;

mod block32;
pub mod q4_0;
pub mod q4_1;
pub mod q5_0;
pub mod q5_1;
pub mod q8_0;

/// A quantized weight type's dot products.
pub trait WeightKernel: Send + Sync + 'static {
    const NAME: &'static str;
    /// The GGUF/ggml type of the rows.
    const DTYPE: GgmlDType;
    /// Values and bytes per weight block, as stored in the file.
    const BLOCK_ELEMS: usize;
    const BLOCK_BYTES: usize;
    /// The activation blocks the rows are dotted with (`Act::ELEMS == BLOCK_ELEMS`).
    type Act: ActBlock;

    /// One weight row (its raw blocks: `x.len() * BLOCK_BYTES` bytes) · one activation row.
    fn vec_dot(isa: Isa, w: &[u8], x: &[Self::Act]) -> f32;

    /// One weight row · four activation rows: the GEMM micro-kernel, which unpacks each weight block once for
    /// four tokens. The default calls `vec_dot` four times.
    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[Self::Act]; 4]) -> [f32; 4] {
        x.map(|x| Self::vec_dot(isa, w, x))
    }
}

/// Reads a little-endian f16 at `b[at..at + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Test harness shared by the kernel files: random weight blocks, candle's dequantize-and-dot as the
/// reference, every instruction set this machine has.
#[cfg(test)]
pub(crate) mod testing {
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use candle_core::Device;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::WeightKernel;
    use crate::engine::cpu::act::ActBlock;
    use crate::engine::cpu::isa::Isa;

    /// An f16 scale in `[-lim, lim]`, as little-endian bytes.
    pub fn scale(rng: &mut StdRng, lim: f32) -> [u8; 2] {
        half::f16::from_f32(rng.gen_range(-lim..lim)).to_le_bytes()
    }

    /// Random activations with a few outliers (what real hidden states look like).
    pub fn activations(rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v: f32 = rng.gen_range(-1.0..1.0);
                if i % 97 == 13 {
                    v * 20.0
                } else {
                    v
                }
            })
            .collect()
    }

    /// Checks `K` on `rows` random rows of `blocks` blocks each (`block(rng)` makes one block's bytes):
    /// every instruction set agrees with the scalar path within float rounding, the scalar path agrees with
    /// candle's dequantized weights dotted with the dequantized activations, and `vec_dot_x4` with `vec_dot`.
    pub fn check_kernel<K: WeightKernel>(
        block: impl Fn(&mut StdRng) -> Vec<u8>,
        dequant_act: impl Fn(&K::Act) -> Vec<f32>,
    ) {
        let mut rng = StdRng::seed_from_u64(0x5eed ^ K::BLOCK_BYTES as u64);
        for blocks in [1usize, 2, 3, 8] {
            let rows = 5;
            let cols = blocks * K::BLOCK_ELEMS;
            let mut raw = Vec::new();
            for _ in 0..rows * blocks {
                let b = block(&mut rng);
                assert_eq!(b.len(), K::BLOCK_BYTES, "{}: block size", K::NAME);
                raw.extend(b);
            }
            let q = qtensor_from_ggml(K::DTYPE, &raw, vec![rows, cols], &Device::Cpu)
                .expect("candle reads the blocks");
            let w: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle dequantizes");
            let acts: Vec<Vec<K::Act>> = (0..4)
                .map(|_| {
                    let x = activations(&mut rng, cols);
                    let mut a = vec![K::Act::default(); blocks];
                    K::Act::quantize(&x, &mut a);
                    a
                })
                .collect();
            for r in 0..rows {
                let wr = &raw[r * blocks * K::BLOCK_BYTES..(r + 1) * blocks * K::BLOCK_BYTES];
                let wf = &w[r * cols..(r + 1) * cols];
                for a in &acts {
                    let xf: Vec<f32> = a.iter().flat_map(&dequant_act).collect();
                    let terms: Vec<f64> = wf
                        .iter()
                        .zip(&xf)
                        .map(|(w, x)| *w as f64 * *x as f64)
                        .collect();
                    let want: f64 = terms.iter().sum();
                    let mag: f64 = terms.iter().map(|t| t.abs()).sum::<f64>() + 1e-6;
                    let scalar = K::vec_dot(Isa::Scalar, wr, a);
                    assert!(
                        ((scalar as f64 - want) / mag).abs() < 1e-3,
                        "{} {blocks} blocks row {r}: scalar {scalar} vs candle {want} (magnitude {mag})",
                        K::NAME
                    );
                    for isa in Isa::available() {
                        let got = K::vec_dot(isa, wr, a);
                        assert!(
                            ((got as f64 - scalar as f64) / mag).abs() < 1e-5,
                            "{} {blocks} blocks row {r}: {} {got} vs scalar {scalar}",
                            K::NAME,
                            isa.name()
                        );
                    }
                }
                for isa in Isa::available() {
                    let x4 = K::vec_dot_x4(isa, wr, [&acts[0], &acts[1], &acts[2], &acts[3]]);
                    for (t, got) in x4.iter().enumerate() {
                        let one = K::vec_dot(isa, wr, &acts[t]);
                        assert!(
                            (got - one).abs() <= 1e-5 * (one.abs() + 1.0),
                            "{} {}: x4[{t}] {got} vs vec_dot {one}",
                            K::NAME,
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    /// Checks `K` on long rows (LLM widths: 896 and 4864 columns, 2 rows each): every instruction set this
    /// machine has agrees with the scalar path within float rounding (relative to `Σ|w x|`, with candle's
    /// dequantized weights), and `vec_dot_x4` gives bit for bit what `vec_dot` gives on each.
    pub fn check_long_rows<K: WeightKernel>(
        block: impl Fn(&mut StdRng) -> Vec<u8>,
        dequant_act: impl Fn(&K::Act) -> Vec<f32>,
    ) {
        let mut rng = StdRng::seed_from_u64(0x10c5 ^ K::BLOCK_BYTES as u64);
        for cols in [896usize, 4864] {
            let (rows, blocks) = (2, cols / K::BLOCK_ELEMS);
            let raw: Vec<u8> = (0..rows * blocks).flat_map(|_| block(&mut rng)).collect();
            let q = qtensor_from_ggml(K::DTYPE, &raw, vec![rows, cols], &Device::Cpu)
                .expect("candle reads the blocks");
            let w: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle dequantizes");
            let acts: Vec<Vec<K::Act>> = (0..4)
                .map(|_| {
                    let x = activations(&mut rng, cols);
                    let mut a = vec![K::Act::default(); blocks];
                    K::Act::quantize(&x, &mut a);
                    a
                })
                .collect();
            let x4 = [&acts[0][..], &acts[1][..], &acts[2][..], &acts[3][..]];
            for r in 0..rows {
                let wr = &raw[r * blocks * K::BLOCK_BYTES..(r + 1) * blocks * K::BLOCK_BYTES];
                let wf = &w[r * cols..(r + 1) * cols];
                for isa in Isa::available() {
                    let got4 = K::vec_dot_x4(isa, wr, x4);
                    for (t, a) in acts.iter().enumerate() {
                        let xf: Vec<f32> = a.iter().flat_map(&dequant_act).collect();
                        let mag: f64 = wf
                            .iter()
                            .zip(&xf)
                            .map(|(w, x)| (*w as f64 * *x as f64).abs())
                            .sum();
                        let scalar = K::vec_dot(Isa::Scalar, wr, a);
                        let got = K::vec_dot(isa, wr, a);
                        assert!(
                            ((got as f64 - scalar as f64) / mag).abs() < 1e-5,
                            "{} {cols} cols row {r}: {} {got} vs scalar {scalar} (magnitude {mag})",
                            K::NAME,
                            isa.name()
                        );
                        assert_eq!(
                            got4[t].to_bits(),
                            got.to_bits(),
                            "{} {cols} cols row {r}: {} x4[{t}] {} vs vec_dot {got}",
                            K::NAME,
                            isa.name(),
                            got4[t]
                        );
                    }
                }
            }
        }
    }
}
