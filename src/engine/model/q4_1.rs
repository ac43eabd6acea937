//! A CPU matrix-vector kernel for Q4_1 weights: activations are quantized to Q8_1 and dotted with the weights
//! 32 at a time, with AVX2/FMA when the processor has them (detected at run time) and a scalar path otherwise.
//!
//! candle 0.11 only has the scalar path for Q4_1 (~22 tok/s decode on SmolLM2 here), and requantising the
//! weights to Q8_0 changes greedy outputs against llama.cpp. This is the same arithmetic as llama.cpp's
//! `ggml_vec_dot_q4_1_q8_1`, so results stay within llama.cpp's own run-to-run noise.

use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};
use half::f16;
use rayon::prelude::*;

use crate::engine::error::{EngineError, Result};

const QK: usize = 32;
/// Output rows handled per task: their weights stay in cache while every input row is dotted with them.
const ROWS_PER_TASK: usize = 16;

#[derive(Clone, Copy)]
struct BlockQ4_1 {
    d: f32,
    m: f32,
    /// Low nibbles are elements 0..16, high nibbles 16..32.
    qs: [u8; QK / 2],
}

#[derive(Clone, Copy)]
struct BlockQ8_1 {
    d: f32,
    /// `d * sum(qs)`, for the Q4_1 offset term.
    s: f32,
    qs: [i8; QK],
}

/// A `[rows, cols]` Q4_1 weight matrix used as `x @ Wᵀ` (public for `benches/q4_1.rs`).
pub struct Q4_1Matrix {
    blocks: Vec<BlockQ4_1>,
    rows: usize,
    cols: usize,
}

impl Q4_1Matrix {
    /// Takes the raw Q4_1 bytes of a QTensor (20-byte blocks: f16 d, f16 m, 16 bytes of nibbles).
    pub fn from_qtensor(q: &QTensor) -> Result<Self> {
        let (rows, cols) = q.shape().dims2()?;
        if cols % QK != 0 {
            return Err(EngineError::Internal(format!(
                "Q4_1 row length {cols} is not a multiple of {QK}"
            )));
        }
        let data = q.data()?;
        let expected = rows * cols / QK * 20;
        if data.len() != expected {
            return Err(EngineError::Internal(format!(
                "Q4_1 tensor has {} bytes, expected {expected}",
                data.len()
            )));
        }
        let blocks = data
            .chunks_exact(20)
            .map(|b| {
                let mut qs = [0u8; QK / 2];
                qs.copy_from_slice(&b[4..20]);
                BlockQ4_1 {
                    // Scales are stored as f16; widening them once here saves a conversion per dot product.
                    d: f16::from_le_bytes([b[0], b[1]]).to_f32(),
                    m: f16::from_le_bytes([b[2], b[3]]).to_f32(),
                    qs,
                }
            })
            .collect();
        Ok(Self { blocks, rows, cols })
    }

    pub fn storage_bytes(&self) -> usize {
        self.rows * self.cols / QK * 20
    }

    /// `x: [.., cols]` → `[.., rows]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let cols = *dims.last().unwrap_or(&0);
        if cols != self.cols {
            return Err(EngineError::Internal(format!(
                "Q4_1 matmul: input width {cols} != weight width {}",
                self.cols
            )));
        }
        let n = x.elem_count() / cols;
        let xs: Vec<f32> = x
            .flatten_all()?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1()?;
        let nb = cols / QK;
        let q8: Vec<BlockQ8_1> = xs.chunks_exact(QK).map(quantize_q8_1).collect();
        let mut out = vec![0f32; n * self.rows];
        let simd = has_avx2_fma();
        // Each task owns ROWS_PER_TASK output columns of every input row; collect then scatter.
        let parts: Vec<(usize, Vec<f32>)> = (0..self.rows)
            .step_by(ROWS_PER_TASK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|r0| {
                let r1 = (r0 + ROWS_PER_TASK).min(self.rows);
                let mut part = vec![0f32; n * (r1 - r0)];
                for i in 0..n {
                    let y = &q8[i * nb..(i + 1) * nb];
                    for r in r0..r1 {
                        let w = &self.blocks[r * nb..(r + 1) * nb];
                        part[i * (r1 - r0) + (r - r0)] = dot(w, y, simd);
                    }
                }
                (r0, part)
            })
            .collect();
        for (r0, part) in parts {
            let width = part.len() / n.max(1);
            for i in 0..n {
                out[i * self.rows + r0..i * self.rows + r0 + width]
                    .copy_from_slice(&part[i * width..(i + 1) * width]);
            }
        }
        let mut shape = dims;
        if let Some(last) = shape.last_mut() {
            *last = self.rows;
        }
        Ok(Tensor::from_vec(out, shape, &Device::Cpu)?)
    }
}

fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `quantize_row_q8_1`: d = amax / 127, qs = round(x / d), s = d · Σqs, with the f16 roundings of candle's
/// reference implementation (whose outputs the llama.cpp comparison tests pin down).
fn quantize_q8_1(x: &[f32]) -> BlockQ8_1 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
        sum += *q as i32;
    }
    let d16 = f16::from_f32(d);
    BlockQ8_1 {
        d: d16.to_f32(),
        s: (f16::from_f32(sum as f32) * d16).to_f32(),
        qs,
    }
}

fn dot(w: &[BlockQ4_1], y: &[BlockQ8_1], simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is true only when AVX2 and FMA were detected on this processor.
        return unsafe { avx2::dot(w, y) };
    }
    let _ = simd;
    dot_scalar(w, y)
}

fn dot_scalar(w: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in w.iter().zip(y) {
        let mut acc = 0i32;
        for j in 0..QK / 2 {
            acc += (x.qs[j] & 0x0f) as i32 * y.qs[j] as i32;
            acc += (x.qs[j] >> 4) as i32 * y.qs[j + QK / 2] as i32;
        }
        sum += x.d * y.d * acc as f32 + x.m * y.s;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BlockQ4_1, BlockQ8_1};
    use std::arch::x86_64::*;

    /// # Safety
    /// The processor must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(w: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        let low = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        for (x, y) in w.iter().zip(y) {
            summs += x.m * y.s;
            // SAFETY: `qs` arrays are 16 and 32 bytes long, exactly what the unaligned loads read.
            let (tmp, qy) = unsafe {
                (
                    _mm_loadu_si128(x.qs.as_ptr() as *const __m128i),
                    _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i),
                )
            };
            let qx = _mm256_and_si256(
                low,
                _mm256_insertf128_si256::<1>(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4)),
            );
            let dot16 = _mm256_maddubs_epi16(qx, qy);
            let xy = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, dot16));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(x.d * y.d), xy, acc);
        }
        let hi = _mm256_extractf128_ps::<1>(acc);
        let s = _mm_add_ps(hi, _mm256_castps256_ps128(acc));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s) + summs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;

    #[test]
    fn simd_and_scalar_agree_and_match_dequantized_matmul() {
        let (rows, cols) = (40, 96);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let w = Tensor::from_vec(w, (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
        let m = Q4_1Matrix::from_qtensor(&q).unwrap();
        let x: Vec<f32> = (0..3 * cols)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let x = Tensor::from_vec(x, (1, 3, cols), &Device::Cpu).unwrap();
        let got = m.forward(&x).unwrap();
        assert_eq!(got.dims(), &[1, 3, rows]);
        let want = x
            .broadcast_matmul(&q.dequantize(&Device::Cpu).unwrap().t().unwrap())
            .unwrap();
        let scale = want
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let diff = (got.clone() - want)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        // Activations are quantized to 8 bits (and the offset sum kept in f16): allow 1% of the largest output.
        assert!(
            diff < 0.01 * scale,
            "max diff {diff} (largest output {scale})"
        );
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let y: Vec<BlockQ8_1> = xs[..cols].chunks_exact(QK).map(quantize_q8_1).collect();
        for r in 0..rows {
            let wr = &m.blocks[r * cols / QK..(r + 1) * cols / QK];
            let a = dot_scalar(wr, &y);
            let b = dot(wr, &y, has_avx2_fma());
            assert!((a - b).abs() < 1e-3, "row {r}: {a} vs {b}");
        }
    }
}
