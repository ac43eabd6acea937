//! Q6_K weights · Q8_K activations.
//!
//! A 256-value super-block (210 bytes, ggml's `block_q6_K`): `ql[128]` (low 4 bits) at 0, `qh[64]` (high 2
//! bits) at 128, 16 signed 8-bit scales at 192, f16 `d` at 208. Each 128-value half `h` uses `ql[64h..]`,
//! `qh[32h..]`; for `l < 32` its values `l`, `l + 32`, `l + 64`, `l + 96` are the low nibble of `ql[l]`, the
//! low nibble of `ql[l + 32]`, the high nibble of `ql[l]`, the high nibble of `ql[l + 32]`, topped with bits
//! 0–1, 2–3, 4–5, 6–7 of `qh[l]`. A weight is `d·sc[k]·(q − 32)`, `k` its 16-value group, so
//!
//! `w·x = dx·d·(Σ_k sc[k]·Σ q·q8 − 32·Σ_k sc[k]·bsums[k])`.
//!
//! Paths: plain Rust; AVX2 (the unsigned 6-bit values × int8 with `maddubs`, `madd` by a register holding
//! two groups' scales); AVX-512 VNNI (64 values per register, the high bits placed with per-lane shifts,
//! `maddubs` then `vpdpwssd` by the scales, the `−32` offset folded in with one more `vpdpwssd` of the
//! `bsums`); NEON (`sdot` or `smull`). One const-generic body serves `vec_dot` (1 token) and `vec_dot_x4`
//! (4 tokens, each weight block unpacked once).

use candle_core::quantized::GgmlDType;

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;

/// Q6_K rows.
pub struct Q6K;

const BLOCK_BYTES: usize = 210;

impl WeightKernel for Q6K {
    const NAME: &'static str = "q6_k";
    const DTYPE: GgmlDType = GgmlDType::Q6K;
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
                // SAFETY: as in `vec_dot`.
                return unsafe { x86::dot_avx2::<4>(w, x) };
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

/// `Σ_k sc[k]·bsums[k]` (the offset term, before its factor −32).
#[inline(always)]
fn offset_term(sc: &[u8], bsums: &[i16; 16]) -> i32 {
    sc.iter()
        .zip(bsums)
        .map(|(&s, &b)| s as i8 as i32 * b as i32)
        .sum()
}

fn dot_scalar(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (wb, xb) in w.chunks_exact(BLOCK_BYTES).zip(x) {
        let sc = &wb[192..208];
        let mut isum = 0i32;
        for h in 0..2 {
            let ql = &wb[64 * h..64 * h + 64];
            let qh = &wb[128 + 32 * h..128 + 32 * h + 32];
            let a = &xb.qs[128 * h..128 * h + 128];
            // Per 16-value group: g = 4 value sets (l, l+32, l+64, l+96) × 2 halves of l.
            let mut g = [0i32; 8];
            for l in 0..32 {
                let q = [
                    (ql[l] & 0xf) | ((qh[l] & 3) << 4),
                    (ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | ((qh[l] >> 6) << 4),
                ];
                for (s, &q) in q.iter().enumerate() {
                    g[2 * s + l / 16] += q as i32 * a[32 * s + l] as i32;
                }
            }
            for (k, g) in g.iter().enumerate() {
                isum += sc[8 * h + k] as i8 as i32 * g;
            }
        }
        isum -= 32 * offset_term(sc, &xb.bsums);
        sum += f16_at(wb, 208) * xb.d * isum as f32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::engine::cpu::act::BlockQ8K;
    use crate::engine::cpu::kernels::q4_k::x86::{blocks, f16x1, fold512, hsum};
    use crate::engine::cpu::kernels::q6_k::BLOCK_BYTES;

    /// A `pshufb` mask broadcasting word `a` over the low 128-bit lane and word `b` over the high one.
    #[inline(always)]
    unsafe fn lane_words(a: i32, b: i32) -> __m256i {
        let w = |k: i32| (((2 * k + 1) << 8) | (2 * k)) as i16;
        _mm256_set_m128i(_mm_set1_epi16(w(b)), _mm_set1_epi16(w(a)))
    }

    /// One Q6_K row · `N` activation rows, AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx2<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let masks = [
            lane_words(0, 1),
            lane_words(2, 3),
            lane_words(4, 5),
            lane_words(6, 7),
        ];
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let p = wb.as_ptr();
            let d = f16x1(p.add(208));
            // The 16 scales as words; each half's 8 in both 128-bit lanes.
            let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
            let halves = [
                _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc)),
                _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(sc)),
            ];
            let mut isum = [_mm256_setzero_si256(); N];
            for (h, &sch) in halves.iter().enumerate() {
                let ql0 = _mm256_loadu_si256(p.add(64 * h) as *const __m256i);
                let ql1 = _mm256_loadu_si256(p.add(64 * h + 32) as *const __m256i);
                let qh = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i);
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        _mm256_and_si256(qh, m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                    ),
                ];
                let s = [
                    _mm256_shuffle_epi8(sch, masks[0]),
                    _mm256_shuffle_epi8(sch, masks[1]),
                    _mm256_shuffle_epi8(sch, masks[2]),
                    _mm256_shuffle_epi8(sch, masks[3]),
                ];
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(128 * h);
                    for g in 0..4 {
                        let av = _mm256_loadu_si256(a.add(32 * g) as *const __m256i);
                        let pg = _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], av), s[g]);
                        isum[t] = _mm256_add_epi32(isum[t], pg);
                    }
                }
            }
            for (t, xt) in x.iter().enumerate() {
                let xb = xt.get_unchecked(i);
                let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
                let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, sc));
                let s = _mm256_sub_epi32(isum[t], off);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(s), acc[t]);
            }
        }
        let mut out = [0f32; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
        out
    }

    /// A 512-bit `vpermw` index: word `base + lane / 8` in each of the 32 lanes (four groups' scales).
    #[inline(always)]
    unsafe fn group_index(base: i16) -> __m512i {
        let lo = _mm256_set_m128i(_mm_set1_epi16(base + 1), _mm_set1_epi16(base));
        let hi = _mm256_set_m128i(_mm_set1_epi16(base + 3), _mm_set1_epi16(base + 2));
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }

    /// 16-bit lane shift counts: `a` in the low 256 bits, `b` in the high.
    #[inline(always)]
    unsafe fn counts(a: i16, b: i16) -> __m512i {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    }

    /// One Q6_K row · `N` activation rows, AVX-512 VNNI.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx512<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm512_set1_epi8(0x0f);
        let m30 = _mm512_set1_epi8(0x30);
        let idx = [
            group_index(0),
            group_index(4),
            group_index(8),
            group_index(12),
        ];
        // Values 0–31 take qh bits 0–1 (<< 4), 32–63 bits 2–3 (<< 2); 64–95 bits 4–5, 96–127 bits 6–7 (>> 2).
        let (up, down) = (counts(4, 2), counts(0, 2));
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let p = wb.as_ptr();
            let d = f16x1(p.add(208));
            let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
            let sc512 = _mm512_castsi256_si512(sc);
            // −32·scales, for the offset term (|128·32| fits 16 bits).
            let sc_off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<5>(sc));
            let mut isum = [_mm512_setzero_si512(); N];
            for h in 0..2 {
                let ql = _mm512_loadu_si512(p.add(64 * h) as *const _);
                let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    p.add(128 + 32 * h) as *const __m256i
                ));
                // Values 0–63 and 64–127 of this half.
                let w01 = _mm512_or_si512(
                    _mm512_and_si512(ql, m4),
                    _mm512_and_si512(_mm512_sllv_epi16(qh, up), m30),
                );
                let w23 = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(_mm512_srlv_epi16(qh, down), m30),
                );
                let s01 = _mm512_permutexvar_epi16(idx[2 * h], sc512);
                let s23 = _mm512_permutexvar_epi16(idx[2 * h + 1], sc512);
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(128 * h);
                    let a01 = _mm512_loadu_si512(a as *const _);
                    let a23 = _mm512_loadu_si512(a.add(64) as *const _);
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(w01, a01), s01);
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(w23, a23), s23);
                }
            }
            for (t, xt) in x.iter().enumerate() {
                let xb = xt.get_unchecked(i);
                let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
                let s = _mm256_dpwssd_epi32(fold512(isum[t]), bs, sc_off);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(s), acc[t]);
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

    use super::{offset_term, BLOCK_BYTES};
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
        let m30 = vdupq_n_u8(0x30);
        let mut out = [0f32; N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let d = f16_at(wb, 208);
            let p = wb.as_ptr();
            let sc = &wb[192..208];
            let mut isum = [vdupq_n_s32(0); N];
            for h in 0..2 {
                for part in 0..2 {
                    // Values l = 16·part .. 16·part + 16 of each of the four sets.
                    let ql0 = vld1q_u8(p.add(64 * h + 16 * part));
                    let ql1 = vld1q_u8(p.add(64 * h + 32 + 16 * part));
                    let qh = vld1q_u8(p.add(128 + 32 * h + 16 * part));
                    let q = [
                        vreinterpretq_s8_u8(vorrq_u8(
                            vandq_u8(ql0, m4),
                            vandq_u8(vshlq_n_u8::<4>(qh), m30),
                        )),
                        vreinterpretq_s8_u8(vorrq_u8(
                            vandq_u8(ql1, m4),
                            vandq_u8(vshlq_n_u8::<2>(qh), m30),
                        )),
                        vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(ql0), vandq_u8(qh, m30))),
                        vreinterpretq_s8_u8(vorrq_u8(
                            vshrq_n_u8::<4>(ql1),
                            vandq_u8(vshrq_n_u8::<2>(qh), m30),
                        )),
                    ];
                    for (t, xt) in x.iter().enumerate() {
                        let a = xt.get_unchecked(i).qs.as_ptr().add(128 * h + 16 * part);
                        for (s, &qs) in q.iter().enumerate() {
                            let g = D::dot(vdupq_n_s32(0), qs, vld1q_s8(a.add(32 * s)));
                            let scale = sc[8 * h + 2 * s + part] as i8 as i32;
                            isum[t] = vmlaq_n_s32(isum[t], g, scale);
                        }
                    }
                }
            }
            for (t, xt) in x.iter().enumerate() {
                let xb = xt.get_unchecked(i);
                let s = vaddvq_s32(isum[t]) - 32 * offset_term(sc, &xb.bsums);
                // The same float expression as the scalar path, so the two agree to the bit.
                out[t] += d * xb.d * s as f32;
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
        let mut b: Vec<u8> = (0..208).map(|_| rng.gen::<u8>()).collect();
        b.extend(testing::scale(rng, 0.01));
        b
    }

    #[test]
    fn matches_candle() {
        check_kernel::<Q6K>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    /// Every instruction set against the scalar path on a 4864-column row (19 super-blocks).
    #[test]
    fn long_row_every_isa() {
        testing::long_row_every_isa::<Q6K>(block);
    }

    /// Quants 63 and 0 (offset −32), scales 127 and −128.
    #[test]
    fn extremes_every_isa() {
        let one = half::f16::from_f32(1.0).to_le_bytes();
        let mut top = vec![0xffu8; BLOCK_BYTES];
        top[192..208].fill(0x7f);
        top[208..].copy_from_slice(&one);
        let mut bottom = vec![0u8; BLOCK_BYTES];
        bottom[192..208].fill(0x80);
        bottom[208..].copy_from_slice(&one);
        let mut mixed = top.clone();
        for (i, s) in mixed[192..208].iter_mut().enumerate() {
            *s = if i % 2 == 0 { 0x80 } else { 0x7f };
        }
        testing::extremes_every_isa::<Q6K>(&[top, bottom, mixed]);
    }

    #[test]
    #[ignore = "timing: cargo test --release --lib engine::cpu::kernels -- --ignored --nocapture"]
    fn timing() {
        testing::timing::<Q6K>(
            block,
            testing::candle_k_dot::<candle_core::quantized::k_quants::BlockQ6K>,
        );
    }
}
