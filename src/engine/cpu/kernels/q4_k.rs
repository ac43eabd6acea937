//! Q4_K weights · Q8_K activations: the super-block layout; the walking, the dispatch and the tails are
//! [`super::kquant`]'s.
//!
//! A 256-value super-block (144 bytes, ggml's `block_q4_K`): f16 `d` at 0, f16 `dmin` at 2, 12 bytes of
//! packed 6-bit scales and mins at 4 (the header [`mins`] reads), then 128 bytes of nibbles at 16. The
//! super-block is 8 sub-blocks of 32 values; byte `l` of the 32-byte chunk `j` holds value `l` of sub-block
//! `2j` in its low nibble and value `l` of sub-block `2j + 1` in its high nibble.
//!
//! Unpacking: AVX2 splits each 32-byte chunk into its two sub-blocks; AVX-512 VNNI takes 64 bytes at a time,
//! as two registers of two sub-blocks each (the nibble halves regrouped by 256-bit lane so that each register
//! meets 64 contiguous activations); NEON splits 16 bytes at a time.

use candle_core::quantized::GgmlDType;

use super::kquant::{self, mins, KQuant};
use super::WeightKernel;
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;

#[cfg(target_arch = "x86_64")]
use super::kquant::x86::{halves, word_mask};
#[cfg(target_arch = "aarch64")]
use super::kquant::NeonChunk;
#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Q4_K rows.
pub struct Q4K;

const BLOCK_BYTES: usize = 144;

impl WeightKernel for Q4K {
    const NAME: &'static str = "q4_k";
    const DTYPE: GgmlDType = GgmlDType::Q4K;
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    type Act = BlockQ8K;

    fn vec_dot(isa: Isa, w: &[u8], x: &[BlockQ8K]) -> f32 {
        kquant::vec_dot::<Self>(isa, w, x)
    }

    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
        kquant::vec_dot_x4::<Self>(isa, w, x)
    }
}

impl KQuant for Q4K {
    const AVX2_PAIRS: bool = true;

    type Head = mins::Head;

    #[inline(always)]
    fn head(b: &[u8]) -> mins::Head {
        mins::head(b)
    }

    #[inline(always)]
    fn unpack(b: &[u8], q: &mut [u8; QK_K]) -> [i32; 16] {
        for (q, qs) in q
            .chunks_exact_mut(64)
            .zip(b[16..BLOCK_BYTES].chunks_exact(32))
        {
            for (l, &v) in qs.iter().enumerate() {
                q[l] = v & 0xf;
                q[l + 32] = v >> 4;
            }
        }
        mins::scales16(b)
    }

    #[inline(always)]
    fn finish(h: &mins::Head, xb: &BlockQ8K, isum: i32) -> f32 {
        mins::finish(h, xb, isum)
    }

    #[cfg(target_arch = "x86_64")]
    type Avx2Tail = mins::Avx2Tail;

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx2_block(
        p: *const u8,
        mut each: impl FnMut(usize, &[(__m256i, __m256i)]),
    ) -> mins::Avx2Tail {
        let (tail, sc16) = mins::avx2_head(p);
        let m4 = _mm256_set1_epi8(0x0f);
        let qp = p.add(16);
        for j in 0..4 {
            let q = _mm256_loadu_si256(qp.add(32 * j) as *const __m256i);
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            let s_lo = _mm256_shuffle_epi8(sc16, word_mask(2 * j as i32));
            let s_hi = _mm256_shuffle_epi8(sc16, word_mask(2 * j as i32 + 1));
            each(64 * j, &[(lo, s_lo), (hi, s_hi)]);
        }
        tail
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx2_finish(acc: __m256, isum: __m256i, xb: &BlockQ8K, t: &mins::Avx2Tail) -> __m256 {
        mins::avx2_finish(acc, isum, xb, t)
    }

    #[cfg(target_arch = "x86_64")]
    type Avx512Tail = mins::Avx512Tail;

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx512_block(
        p: *const u8,
        mut each: impl FnMut(usize, &[(__m512i, __m512i)]),
    ) -> mins::Avx512Tail {
        let (tail, sc16) = mins::avx512_head(p);
        let m4 = _mm512_set1_epi8(0x0f);
        let qp = p.add(16);
        for s in 0..2 {
            let q = _mm512_loadu_si512(qp.add(64 * s) as *const _);
            // lo = [sub-block 4s | 4s+2], hi = [4s+1 | 4s+3] (256-bit halves).
            let lo = _mm512_and_si512(q, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            let w01 = _mm512_shuffle_i64x2::<0x44>(lo, hi);
            let w23 = _mm512_shuffle_i64x2::<0xee>(lo, hi);
            // `vpermw` indices: sub-block 4s's scale in the low 16 words, 4s+1's in the high, and so on.
            let k = 4 * s as i16;
            let s01 = _mm512_permutexvar_epi16(halves(k, k + 1), sc16);
            let s23 = _mm512_permutexvar_epi16(halves(k + 2, k + 3), sc16);
            each(128 * s, &[(w01, s01), (w23, s23)]);
        }
        tail
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx512_finish(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        t: &mins::Avx512Tail,
    ) -> __m256 {
        mins::avx512_finish(acc, isum, xb, t)
    }

    #[cfg(target_arch = "aarch64")]
    const NEON_SCALE_VALUES: usize = 32;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn neon_block(p: *const u8, mut each: impl FnMut(usize, &[NeonChunk])) {
        let (sc, _) = mins::scales_mins(std::slice::from_raw_parts(p.add(4), 12));
        let m4 = vdupq_n_u8(0x0f);
        let qp = p.add(16);
        for j in 0..4 {
            let q0 = vld1q_u8(qp.add(32 * j));
            let q1 = vld1q_u8(qp.add(32 * j + 16));
            let lo = [
                vreinterpretq_s8_u8(vandq_u8(q0, m4)),
                vreinterpretq_s8_u8(vandq_u8(q1, m4)),
            ];
            let hi = [
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0)),
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1)),
            ];
            let s_lo = ((sc >> (16 * j)) & 0xff) as i32;
            let s_hi = ((sc >> (16 * j + 8)) & 0xff) as i32;
            each(
                64 * j,
                &[
                    NeonChunk {
                        q: lo,
                        sc: [s_lo; 2],
                    },
                    NeonChunk {
                        q: hi,
                        sc: [s_hi; 2],
                    },
                ],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::Rng;

    use super::*;
    use crate::engine::cpu::kernels::testing::{self, check_kernel};

    fn block(rng: &mut StdRng) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK_BYTES);
        b.extend(testing::scale(rng, 0.01));
        b.extend(testing::scale(rng, 0.01));
        b.extend((0..BLOCK_BYTES - 4).map(|_| rng.gen::<u8>()));
        b
    }

    #[test]
    fn matches_candle() {
        check_kernel::<Q4K>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    /// Every instruction set against the scalar path on a 4864-column row (19 super-blocks).
    #[test]
    fn long_row_every_isa() {
        testing::long_row_every_isa::<Q4K>(block);
    }

    /// Saturated quants and scales (all bits set; scales/mins 63), and max quants with zero mins.
    #[test]
    fn extremes_every_isa() {
        let one = half::f16::from_f32(1.0).to_le_bytes();
        let mut full = vec![0xffu8; BLOCK_BYTES];
        full[..2].copy_from_slice(&one);
        full[2..4].copy_from_slice(&one);
        let mut no_min = full.clone();
        // Scales 63, mins 0: packed bytes 4–7 (mins 0–3, top bits of mins 4–7) clear; packed bytes 8–11
        // 0x0f (scales 4–7 low bits set, mins 4–7 low bits clear).
        no_min[8..12].fill(0);
        no_min[12..16].fill(0x0f);
        testing::extremes_every_isa::<Q4K>(&[full, no_min]);
    }

    #[test]
    #[ignore = "timing: cargo test --release --lib engine::cpu::kernels -- --ignored --nocapture"]
    fn timing() {
        testing::timing::<Q4K>(
            block,
            testing::candle_k_dot::<candle_core::quantized::k_quants::BlockQ4K>,
        );
    }
}
