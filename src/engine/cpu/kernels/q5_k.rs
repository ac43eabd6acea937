//! Q5_K weights · Q8_K activations.
//!
//! A 256-value super-block (176 bytes, ggml's `block_q5_K`): f16 `d` at 0, f16 `dmin` at 2, 12 bytes of
//! packed 6-bit scales and mins at 4 (as in Q4_K), `qh[32]` at 16, `qs[128]` at 48. Sub-blocks `2j` and
//! `2j + 1` take the low and high nibbles of `qs[32j..32j + 32]`, topped with bit `2j` and bit `2j + 1` of
//! `qh[l]` (value `l` of the sub-block), so the 5-bit value is `nibble | bit << 4` and, as in Q4_K,
//!
//! `w·x = dx·(d·Σ_s sc[s]·Σ q·q8 − dmin·Σ_s m[s]·Σ q8)`.
//!
//! Paths as Q4_K's, with the fifth bit ORed in after the nibbles are split.

use candle_core::quantized::GgmlDType;

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::kernels::q4_k::{min_term, scales_mins};

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
        #[cfg(target_arch = "x86_64")]
        {
            if isa.has_avx512() {
                // SAFETY: `has_avx512` checked AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C at run time; the
                // kernel reads only the blocks both slices hold.
                return unsafe { x86::dot_avx512::<1>(w, [x]) }[0];
            }
            if isa.has_avx2() {
                // SAFETY: `has_avx2` checked AVX2, FMA and F16C at run time; bounds as above.
                return unsafe { x86::dot_avx2::<1>(w, [x]) }[0];
            }
        }
        #[cfg(target_arch = "aarch64")]
        if isa.has_neon() {
            return neon::dot::<1>(w, [x])[0];
        }
        let _ = isa;
        dot_scalar(w, x)
    }

    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
        #[cfg(target_arch = "x86_64")]
        {
            if isa.has_avx512() {
                // SAFETY: as in `vec_dot`.
                return unsafe { x86::dot_avx512::<4>(w, x) };
            }
            if isa.has_avx2() {
                // Two tokens at a time: four overflow AVX2's 16 registers (measured slower than two).
                // SAFETY: as in `vec_dot`.
                let [a, b] = unsafe { x86::dot_avx2::<2>(w, [x[0], x[1]]) };
                // SAFETY: as in `vec_dot`.
                let [c, d] = unsafe { x86::dot_avx2::<2>(w, [x[2], x[3]]) };
                return [a, b, c, d];
            }
        }
        #[cfg(target_arch = "aarch64")]
        if isa.has_neon() {
            return neon::dot::<4>(w, x);
        }
        let _ = isa;
        x.map(|x| dot_scalar(w, x))
    }
}

fn dot_scalar(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (wb, xb) in w.chunks_exact(BLOCK_BYTES).zip(x) {
        let (sc, mn) = scales_mins(&wb[4..16]);
        let qh = &wb[16..48];
        let qs = &wb[48..BLOCK_BYTES];
        let mut isum = 0i32;
        for j in 0..4 {
            let q = &qs[32 * j..32 * j + 32];
            let a = &xb.qs[64 * j..64 * j + 64];
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                let h = qh[l] >> (2 * j);
                lo += ((q[l] & 0xf) | ((h & 1) << 4)) as i32 * a[l] as i32;
                hi += ((q[l] >> 4) | ((h & 2) << 3)) as i32 * a[l + 32] as i32;
            }
            isum +=
                ((sc >> (16 * j)) & 0xff) as i32 * lo + ((sc >> (16 * j + 8)) & 0xff) as i32 * hi;
        }
        let msum = min_term(mn, &xb.bsums);
        sum += f16_at(wb, 0) * xb.d * isum as f32 - f16_at(wb, 2) * xb.d * msum as f32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{scales_mins, BLOCK_BYTES};
    use crate::engine::cpu::act::BlockQ8K;
    use crate::engine::cpu::kernels::q4_k::x86::{
        blocks, f16x2, finish_block, finish_block_lean, fold512, hsum, mins_paired, word_mask,
    };

    /// One Q5_K row · `N` activation rows, AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx2<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm256_set1_epi8(0x0f);
        let m10 = _mm256_set1_epi8(0x10);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = f16x2(wb.as_ptr());
            let (sc, mn) = scales_mins(&wb[4..16]);
            let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let mins2 = mins_paired(mn);
            let p = wb.as_ptr();
            // Shifted right by 2 per sub-block pair: bits 0 and 1 of each byte are the pair's fifth bits
            // (a 16-bit shift only moves bits into positions 6–7, never read).
            let mut qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
            let mut isum = [_mm256_setzero_si256(); N];
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
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(64 * j);
                    let a_lo = _mm256_loadu_si256(a as *const __m256i);
                    let a_hi = _mm256_loadu_si256(a.add(32) as *const __m256i);
                    let p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), s_lo);
                    let p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), s_hi);
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p_lo, p_hi));
                }
            }
            for (t, xt) in x.iter().enumerate() {
                acc[t] = finish_block_lean(acc[t], isum[t], xt.get_unchecked(i), mins2, d, dmin);
            }
        }
        let mut out = [0f32; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
        out
    }

    /// A 512-bit register of 16-bit lanes: `a` in the low 256 bits, `b` in the high.
    #[inline(always)]
    unsafe fn halves(a: i16, b: i16) -> __m512i {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    }

    /// One Q5_K row · `N` activation rows, AVX-512 VNNI (Q4_K's scheme; the fifth bits placed with
    /// per-half shifts of the 32 `qh` bytes repeated in both halves).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx512<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm512_set1_epi8(0x0f);
        let m10 = _mm512_set1_epi8(0x10);
        let idx = [halves(0, 1), halves(2, 3), halves(4, 5), halves(6, 7)];
        // [sub-block 4p | 4p+1] take qh bits 4p, 4p+1; [4p+2 | 4p+3] bits 4p+2, 4p+3 (after >> 4p).
        let (sh01, sh23) = (halves(4, 3), halves(2, 1));
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = f16x2(wb.as_ptr());
            let (d, dmin) = (_mm256_set1_ps(d), _mm256_set1_ps(dmin));
            let (sc, mn) = scales_mins(&wb[4..16]);
            let sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let mins2 = mins_paired(mn);
            let p = wb.as_ptr();
            let mut qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16) as *const __m256i));
            let mut isum = [_mm512_setzero_si512(); N];
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
                let s01 = _mm512_permutexvar_epi16(idx[2 * s], sc16);
                let s23 = _mm512_permutexvar_epi16(idx[2 * s + 1], sc16);
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(128 * s);
                    let a01 = _mm512_loadu_si512(a as *const _);
                    let a23 = _mm512_loadu_si512(a.add(64) as *const _);
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(w01, a01), s01);
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(w23, a23), s23);
                }
            }
            for (t, xt) in x.iter().enumerate() {
                acc[t] = finish_block(
                    acc[t],
                    fold512(isum[t]),
                    xt.get_unchecked(i),
                    mins2,
                    d,
                    dmin,
                );
            }
        }
        let mut out = [0f32; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
        out
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::{min_term, scales_mins, BLOCK_BYTES};
    use crate::engine::cpu::act::BlockQ8K;
    use crate::engine::cpu::kernels::f16_at;
    use crate::engine::cpu::kernels::q4_k::neon::{has_dotprod, Dot, Sdot, Smull};

    pub(super) fn dot<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        if has_dotprod() {
            // SAFETY: the dot-product extension was detected at run time (NEON is always there).
            unsafe { dot_sdot(w, x) }
        } else {
            // SAFETY: NEON is part of every aarch64 CPU.
            unsafe { dot_smull(w, x) }
        }
    }

    #[target_feature(enable = "neon,dotprod")]
    unsafe fn dot_sdot<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        body::<Sdot, N>(w, x)
    }

    #[target_feature(enable = "neon")]
    unsafe fn dot_smull<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        body::<Smull, N>(w, x)
    }

    #[inline(always)]
    unsafe fn body<D: Dot, const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = x.iter().fold(w.len() / BLOCK_BYTES, |n, x| n.min(x.len()));
        let m4 = vdupq_n_u8(0x0f);
        let m10 = vdupq_n_u8(0x10);
        let mut out = [0f32; N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
            let (sc, mn) = scales_mins(&wb[4..16]);
            let p = wb.as_ptr();
            let mut qh0 = vld1q_u8(p.add(16));
            let mut qh1 = vld1q_u8(p.add(32));
            let mut isum = [vdupq_n_s32(0); N];
            for j in 0..4 {
                let q0 = vld1q_u8(p.add(48 + 32 * j));
                let q1 = vld1q_u8(p.add(48 + 32 * j + 16));
                let lo0 = vorrq_u8(vandq_u8(q0, m4), vandq_u8(vshlq_n_u8::<4>(qh0), m10));
                let lo1 = vorrq_u8(vandq_u8(q1, m4), vandq_u8(vshlq_n_u8::<4>(qh1), m10));
                let hi0 = vorrq_u8(vshrq_n_u8::<4>(q0), vandq_u8(vshlq_n_u8::<3>(qh0), m10));
                let hi1 = vorrq_u8(vshrq_n_u8::<4>(q1), vandq_u8(vshlq_n_u8::<3>(qh1), m10));
                qh0 = vshrq_n_u8::<2>(qh0);
                qh1 = vshrq_n_u8::<2>(qh1);
                let (lo0, lo1) = (vreinterpretq_s8_u8(lo0), vreinterpretq_s8_u8(lo1));
                let (hi0, hi1) = (vreinterpretq_s8_u8(hi0), vreinterpretq_s8_u8(hi1));
                let s_lo = ((sc >> (16 * j)) & 0xff) as i32;
                let s_hi = ((sc >> (16 * j + 8)) & 0xff) as i32;
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(64 * j);
                    let z = vdupq_n_s32(0);
                    let p_lo = D::dot(D::dot(z, lo0, vld1q_s8(a)), lo1, vld1q_s8(a.add(16)));
                    let p_hi = D::dot(
                        D::dot(z, hi0, vld1q_s8(a.add(32))),
                        hi1,
                        vld1q_s8(a.add(48)),
                    );
                    isum[t] = vmlaq_n_s32(vmlaq_n_s32(isum[t], p_lo, s_lo), p_hi, s_hi);
                }
            }
            for (t, xt) in x.iter().enumerate() {
                let xb = xt.get_unchecked(i);
                let msum = min_term(mn, &xb.bsums);
                // The same float expression as the scalar path, so the two agree to the bit.
                out[t] += d * xb.d * vaddvq_s32(isum[t]) as f32 - dmin * xb.d * msum as f32;
            }
        }
        out
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
