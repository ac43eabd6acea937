//! Q6_K weights · Q8_K activations: the super-block layout; the walking, the dispatch and the tails are
//! [`super::kquant`]'s.
//!
//! A 256-value super-block (210 bytes, ggml's `block_q6_K`): `ql[128]` (low 4 bits) at 0, `qh[64]` (high 2
//! bits) at 128, 16 signed 8-bit scales at 192, f16 `d` at 208. Each 128-value half `h` uses `ql[64h..]`,
//! `qh[32h..]`; for `l < 32` its values `l`, `l + 32`, `l + 64`, `l + 96` are the low nibble of `ql[l]`, the
//! low nibble of `ql[l + 32]`, the high nibble of `ql[l]`, the high nibble of `ql[l + 32]`, topped with bits
//! 0–1, 2–3, 4–5, 6–7 of `qh[l]`. A weight is `d·sc[k]·(q − 32)`, `k` its 16-value group, so
//!
//! `w·x = dx·d·(Σ_k sc[k]·Σ q·q8 − 32·Σ_k sc[k]·bsums[k])`.
//!
//! Unpacking: AVX2 makes the four 32-value sets of a half from two `ql` loads and one `qh` load, each set's
//! scales in a register holding two groups' scales (one per 128-bit lane); AVX-512 VNNI makes 64 values per
//! register, the high bits placed with per-lane shifts, and folds the `−32` offset in with one more
//! `vpdpwssd` of the `bsums`; NEON works as AVX2 on 16-byte halves.

use candle_core::quantized::GgmlDType;

use super::kquant::{self, KQuant};
use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;

#[cfg(target_arch = "x86_64")]
use super::kquant::x86::{f16x1, halves};
#[cfg(target_arch = "aarch64")]
use super::kquant::NeonChunk;
#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

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
        kquant::vec_dot::<Self>(isa, w, x)
    }

    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
        kquant::vec_dot_x4::<Self>(isa, w, x)
    }
}

/// `d` and the 16 scales of a block.
#[derive(Clone, Copy)]
pub(crate) struct Head {
    d: f32,
    sc: [u8; 16],
}

/// `Σ_k sc[k]·bsums[k]` (the offset term, before its factor −32).
#[inline(always)]
fn offset_term(sc: &[u8; 16], bsums: &[i16; 16]) -> i32 {
    sc.iter()
        .zip(bsums)
        .map(|(&s, &b)| s as i8 as i32 * b as i32)
        .sum()
}

/// A `pshufb` mask broadcasting word `a` over the low 128-bit lane and word `b` over the high one.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lane_words(a: i32, b: i32) -> __m256i {
    let w = |k: i32| (((2 * k + 1) << 8) | (2 * k)) as i16;
    _mm256_set_m128i(_mm_set1_epi16(w(b)), _mm_set1_epi16(w(a)))
}

/// A 512-bit `vpermw` index: word `base + lane / 8` in each of the 32 lanes (four groups' scales).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group_index(base: i16) -> __m512i {
    let lo = _mm256_set_m128i(_mm_set1_epi16(base + 1), _mm_set1_epi16(base));
    let hi = _mm256_set_m128i(_mm_set1_epi16(base + 3), _mm_set1_epi16(base + 2));
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

impl KQuant for Q6K {
    const AVX2_PAIRS: bool = false;

    type Head = Head;

    #[inline(always)]
    fn head(b: &[u8]) -> Head {
        let mut sc = [0u8; 16];
        sc.copy_from_slice(&b[192..208]);
        Head {
            d: f16_at(b, 208),
            sc,
        }
    }

    #[inline(always)]
    fn unpack(b: &[u8], q: &mut [u8; QK_K]) -> [i32; 16] {
        for (h, q) in q.chunks_exact_mut(128).enumerate() {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..128 + 32 * h + 32];
            for (l, &qh) in qh.iter().enumerate() {
                q[l] = (ql[l] & 0xf) | ((qh & 3) << 4);
                q[l + 32] = (ql[l + 32] & 0xf) | (((qh >> 2) & 3) << 4);
                q[l + 64] = (ql[l] >> 4) | (((qh >> 4) & 3) << 4);
                q[l + 96] = (ql[l + 32] >> 4) | ((qh >> 6) << 4);
            }
        }
        std::array::from_fn(|k| b[192 + k] as i8 as i32)
    }

    #[inline(always)]
    fn finish(h: &Head, xb: &BlockQ8K, isum: i32) -> f32 {
        let isum = isum - 32 * offset_term(&h.sc, &xb.bsums);
        h.d * xb.d * isum as f32
    }

    /// `d` and the 16 scales as words.
    #[cfg(target_arch = "x86_64")]
    type Avx2Tail = (f32, __m256i);

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx2_block(
        p: *const u8,
        mut each: impl FnMut(usize, &[(__m256i, __m256i)]),
    ) -> (f32, __m256i) {
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let masks = [
            lane_words(0, 1),
            lane_words(2, 3),
            lane_words(4, 5),
            lane_words(6, 7),
        ];
        let d = f16x1(p.add(208));
        // The 16 scales as words; each half's 8 in both 128-bit lanes.
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let halves = [
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(sc)),
        ];
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
            each(
                128 * h,
                &[(q[0], s[0]), (q[1], s[1]), (q[2], s[2]), (q[3], s[3])],
            );
        }
        (d, sc)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx2_finish(acc: __m256, isum: __m256i, xb: &BlockQ8K, t: &(f32, __m256i)) -> __m256 {
        let (d, sc) = *t;
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, sc));
        let s = _mm256_sub_epi32(isum, off);
        _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(s), acc)
    }

    /// `d` and −32·scales as words, for the offset term (|128·32| fits 16 bits).
    #[cfg(target_arch = "x86_64")]
    type Avx512Tail = (f32, __m256i);

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx512_block(
        p: *const u8,
        mut each: impl FnMut(usize, &[(__m512i, __m512i)]),
    ) -> (f32, __m256i) {
        let m4 = _mm512_set1_epi8(0x0f);
        let m30 = _mm512_set1_epi8(0x30);
        // Values 0–31 take qh bits 0–1 (<< 4), 32–63 bits 2–3 (<< 2); 64–95 bits 4–5, 96–127 bits 6–7 (>> 2).
        let (up, down) = (halves(4, 2), halves(0, 2));
        let d = f16x1(p.add(208));
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let sc512 = _mm512_castsi256_si512(sc);
        let sc_off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<5>(sc));
        for h in 0..2 {
            let ql = _mm512_loadu_si512(p.add(64 * h) as *const _);
            let qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i));
            // Values 0–63 and 64–127 of this half.
            let w01 = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_and_si512(_mm512_sllv_epi16(qh, up), m30),
            );
            let w23 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, down), m30),
            );
            let s01 = _mm512_permutexvar_epi16(group_index(8 * h as i16), sc512);
            let s23 = _mm512_permutexvar_epi16(group_index(8 * h as i16 + 4), sc512);
            each(128 * h, &[(w01, s01), (w23, s23)]);
        }
        (d, sc_off)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn avx512_finish(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        t: &(f32, __m256i),
    ) -> __m256 {
        let (d, sc_off) = *t;
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let s = _mm256_dpwssd_epi32(isum, bs, sc_off);
        _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(s), acc)
    }

    #[cfg(target_arch = "aarch64")]
    const NEON_SCALE_VALUES: usize = 16;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn neon_block(p: *const u8, mut each: impl FnMut(usize, &[NeonChunk])) {
        let m4 = vdupq_n_u8(0x0f);
        let m30 = vdupq_n_u8(0x30);
        // The four sets (values l, l + 32, l + 64, l + 96) of 16 values l of a half.
        let sets = |ql0: uint8x16_t, ql1: uint8x16_t, qh: uint8x16_t| {
            [
                vorrq_u8(vandq_u8(ql0, m4), vandq_u8(vshlq_n_u8::<4>(qh), m30)),
                vorrq_u8(vandq_u8(ql1, m4), vandq_u8(vshlq_n_u8::<2>(qh), m30)),
                vorrq_u8(vshrq_n_u8::<4>(ql0), vandq_u8(qh, m30)),
                vorrq_u8(vshrq_n_u8::<4>(ql1), vandq_u8(vshrq_n_u8::<2>(qh), m30)),
            ]
        };
        for h in 0..2 {
            // Values l = 0..16 (part 0) and 16..32 (part 1) of each set.
            let part = |k: usize| {
                let ql = p.add(64 * h + 16 * k);
                sets(
                    vld1q_u8(ql),
                    vld1q_u8(ql.add(32)),
                    vld1q_u8(p.add(128 + 32 * h + 16 * k)),
                )
            };
            let (p0, p1) = (part(0), part(1));
            let sc = |g: usize| *p.add(192 + 8 * h + g) as i8 as i32;
            let chunk = |s: usize| NeonChunk {
                q: [vreinterpretq_s8_u8(p0[s]), vreinterpretq_s8_u8(p1[s])],
                sc: [sc(2 * s), sc(2 * s + 1)],
            };
            each(128 * h, &[chunk(0), chunk(1), chunk(2), chunk(3)]);
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
