//! Activations quantized for the integer dot products: 32-value Q8 blocks (paired with Q4_0, Q4_1, Q5_0, Q5_1
//! and Q8_0 weights) and 256-value Q8_K blocks (paired with the K-quants). The roundings are llama.cpp's
//! (`quantize_row_q8_0`/`_q8_1`: scale kept as f16; `quantize_row_q8_K`: scale from the signed maximum, f32),
//! so results stay within llama.cpp's own noise.

use half::f16;

/// Values per [`BlockQ8`].
pub const QK8: usize = 32;
/// Values per [`BlockQ8K`] (and per K-quant super-block).
pub const QK_K: usize = 256;

/// 32 activations: `x ≈ d · qs`. `s = d · Σqs` (both f16-rounded, as in Q8_1) serves the offset term of
/// Q4_1/Q5_1; Q4_0/Q5_0/Q8_0 ignore it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; QK8],
}

impl Default for BlockQ8 {
    fn default() -> Self {
        Self {
            d: 0.0,
            s: 0.0,
            qs: [0; QK8],
        }
    }
}

/// 256 activations: `x ≈ d · qs`; `bsums[j]` is the sum of `qs[16j..16j+16]` (the K-quants' min terms).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

/// Quantizes `x` (a multiple of 32 long) into `out` (`x.len() / 32` blocks).
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK8);
    for (x, b) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        let d16 = f16::from_f32(d);
        b.d = d16.to_f32();
        b.s = (f16::from_f32(sum as f32) * d16).to_f32();
    }
}

/// Quantizes `x` (a multiple of 256 long) into `out` (`x.len() / 256` blocks).
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (x, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, v) in b.qs.iter_mut().zip(x) {
            *q = (iscale * v).round().clamp(-128.0, 127.0) as i8;
        }
        for (j, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// The activation block a weight type is dotted with.
pub trait ActBlock: Copy + Default + Send + Sync + 'static {
    /// Values per block.
    const ELEMS: usize;
    fn quantize(x: &[f32], out: &mut [Self]);
}

impl ActBlock for BlockQ8 {
    const ELEMS: usize = QK8;
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q8(x, out)
    }
}

impl ActBlock for BlockQ8K {
    const ELEMS: usize = QK_K;
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q8k(x, out)
    }
}
