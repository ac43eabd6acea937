//! Q5_K weights · Q8_K activations: the super-block layout; the walking, the dispatch and the tails are
//! [`super::kquant`]'s.
//!
//! A 256-value super-block (176 bytes, ggml's `block_q5_K`): f16 `d` at 0, f16 `dmin` at 2, 12 bytes of
//! packed 6-bit scales and mins at 4 (as in Q4_K: the header [`mins`] reads), `qh[32]` at 16, `qs[128]` at 48.
//! Sub-blocks `2j` and `2j + 1` take the low and high nibbles of `qs[32j..32j + 32]`, topped with bit `2j` and
//! bit `2j + 1` of `qh[l]` (value `l` of the sub-block), so the 5-bit value is `nibble | bit << 4`.
//!
//! Unpacking as Q4_K's, with the fifth bit ORed in after the nibbles are split.

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

/// Q5_K rows.
pub struct Q5K;

const BLOCK_BYTES: usize = 176;

impl WeightKernel for Q5K {
    const NAME: &'static str = "q5_k";
    const DTYPE: GgmlDType = GgmlDType::Q5K;
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

impl KQuant for Q5K {
    const AVX2_PAIRS: bool = true;

    type Head = mins::Head;

    #[inline(always)]
    fn head(b: &[u8]) -> mins::Head {
        mins::head(b)
    }

    #[inline(always)]
    fn unpack(b: &[u8], q: &mut [u8; QK_K]) -> [i32; 16] {
        let qh = &b[16..48];
        let qs = b[48..BLOCK_BYTES].chunks_exact(32);
        for (j, (q, qs)) in q.chunks_exact_mut(64).zip(qs).enumerate() {
            for (l, (&v, &h)) in qs.iter().zip(qh).enumerate() {
                let h = h >> (2 * j);
                q[l] = (v & 0xf) | ((h & 1) << 4);
                q[l + 32] = (v >> 4) | ((h & 2) << 3);
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
        let m10 = _mm256_set1_epi8(0x10);
        // Shifted right by 2 per sub-block pair: bits 0 and 1 of each byte are the pair's fifth bits
        // (a 16-bit shift only moves bits into positions 6–7, never read).
        let mut qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
        for j in 0..4 {
            let q = _mm256_loadu_si256(p.add(48 + 32 * j) as *const __m256i);
            let lo = _mm256_or_si256(
                _mm256_and_si256(q, m4),
                _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m10),
            );
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                _mm256_and_si256(_mm256_slli_epi16::<3>(qh), m10),
            );
            qh = _mm256_srli_epi16::<2>(qh);
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

    /// Q4_K's scheme; the fifth bits placed with per-half shifts of the 32 `qh` bytes repeated in both
    /// halves.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx512_block(
        p: *const u8,
        mut each: impl FnMut(usize, &[(__m512i, __m512i)]),
    ) -> mins::Avx512Tail {
        let (tail, sc16) = mins::avx512_head(p);
        let m4 = _mm512_set1_epi8(0x0f);
        let m10 = _mm512_set1_epi8(0x10);
        // [sub-block 4s | 4s+1] take qh bits 4s, 4s+1; [4s+2 | 4s+3] bits 4s+2, 4s+3 (after >> 4s).
        let (sh01, sh23) = (halves(4, 3), halves(2, 1));
        let mut qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16) as *const __m256i));
        for s in 0..2 {
            let q = _mm512_loadu_si512(p.add(48 + 64 * s) as *const _);
            let lo = _mm512_and_si512(q, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            let w01 = _mm512_or_si512(
                _mm512_shuffle_i64x2::<0x44>(lo, hi),
                _mm512_and_si512(_mm512_sllv_epi16(qh, sh01), m10),
            );
            let w23 = _mm512_or_si512(
                _mm512_shuffle_i64x2::<0xee>(lo, hi),
                _mm512_and_si512(_mm512_sllv_epi16(qh, sh23), m10),
            );
            qh = _mm512_srli_epi16::<4>(qh);
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
        let m10 = vdupq_n_u8(0x10);
        let mut qh0 = vld1q_u8(p.add(16));
        let mut qh1 = vld1q_u8(p.add(32));
        for j in 0..4 {
            let q0 = vld1q_u8(p.add(48 + 32 * j));
            let q1 = vld1q_u8(p.add(48 + 32 * j + 16));
            let lo0 = vorrq_u8(vandq_u8(q0, m4), vandq_u8(vshlq_n_u8::<4>(qh0), m10));
            let lo1 = vorrq_u8(vandq_u8(q1, m4), vandq_u8(vshlq_n_u8::<4>(qh1), m10));
            let hi0 = vorrq_u8(vshrq_n_u8::<4>(q0), vandq_u8(vshlq_n_u8::<3>(qh0), m10));
            let hi1 = vorrq_u8(vshrq_n_u8::<4>(q1), vandq_u8(vshlq_n_u8::<3>(qh1), m10));
            qh0 = vshrq_n_u8::<2>(qh0);
            qh1 = vshrq_n_u8::<2>(qh1);
            let lo = [vreinterpretq_s8_u8(lo0), vreinterpretq_s8_u8(lo1)];
            let hi = [vreinterpretq_s8_u8(hi0), vreinterpretq_s8_u8(hi1)];
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

    use super::super::testing::{self, check_kernel};
    use super::*;

    fn block(rng: &mut StdRng) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK_BYTES);
        b.extend(testing::scale(rng, 0.01));
        b.extend(testing::scale(rng, 0.01));
        b.extend((0..BLOCK_BYTES - 4).map(|_| rng.gen::<u8>()));
        b
    }

    #[test]
    fn matches_candle() {
        check_kernel::<Q5K>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    /// Every instruction set against the scalar path on a 4864-column row (19 super-blocks).
    #[test]
    fn long_row_every_isa() {
        testing::long_row_every_isa::<Q5K>(block);
    }

    /// Saturated quants (31 with the fifth bit) and scales.
    #[test]
    fn extremes_every_isa() {
        let one = half::f16::from_f32(1.0).to_le_bytes();
        let mut full = vec![0xffu8; BLOCK_BYTES];
        full[..2].copy_from_slice(&one);
        full[2..4].copy_from_slice(&one);
        let mut no_high = full.clone();
        no_high[16..48].fill(0);
        testing::extremes_every_isa::<Q5K>(&[full, no_high]);
    }

    #[test]
    #[ignore = "timing: cargo test --release --lib engine::cpu::kernels -- --ignored --nocapture"]
    fn timing() {
        testing::timing::<Q5K>(
            block,
            testing::candle_k_dot::<candle_core::quantized::k_quants::BlockQ5K>,
        );
    }
}
