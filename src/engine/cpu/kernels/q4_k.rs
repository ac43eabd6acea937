//! Q4_K weights · Q8_K activations.
//!
//! A 256-value super-block (144 bytes, ggml's `block_q4_K`): f16 `d` at 0, f16 `dmin` at 2, 12 bytes of
//! packed 6-bit scales and mins at 4, then 128 bytes of nibbles at 16. The super-block is 8 sub-blocks of 32
//! values; byte `l` of the 32-byte chunk `j` holds value `l` of sub-block `2j` in its low nibble and value `l`
//! of sub-block `2j + 1` in its high nibble. Value `k` of sub-block `s` is `d·sc[s]·q − dmin·m[s]`, so
//!
//! `w·x = dx·(d·Σ_s sc[s]·Σ q·q8 − dmin·Σ_s m[s]·Σ q8)`,
//!
//! where `Σ q8` over sub-block `s` is `bsums[2s] + bsums[2s + 1]` of the activation block.
//!
//! Paths: plain Rust; AVX2 (`maddubs` nibble×int8 pairs, `madd` by the 16-bit sub-block scale); AVX-512 VNNI
//! (64 bytes at a time, two sub-blocks per register, `maddubs` then `vpdpwssd` folding the scale multiply
//! into the accumulate); NEON (`sdot` where the CPU has the dot-product extension, `smull` otherwise). Every
//! SIMD path is one const-generic body run for 1 token (`vec_dot`) or several (`vec_dot_x4`: each weight
//! block is unpacked once and dotted with four activation rows; AVX2 takes them two at a time, as four
//! tokens' accumulators and the unpacked block overflow its 16 registers).

use candle_core::quantized::GgmlDType;

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;

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

/// The 8 sub-block scales and the 8 mins (6 bits each) of a Q4_K/Q5_K super-block, from its 12 packed bytes:
/// bytes 0–3 hold scales 0–3 in their low 6 bits, bytes 4–7 mins 0–3; scales and mins 4–7 keep their low 4
/// bits in the nibbles of bytes 8–11 and their top 2 bits in the top 2 bits of bytes 0–3 (scales) and 4–7
/// (mins). Returned as little-endian byte lanes of a u64 each.
#[inline(always)]
pub(super) fn scales_mins(s: &[u8]) -> (u64, u64) {
    let word = |at: usize| u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
    let (a, b, c) = (word(0), word(4), word(8));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x3030_3030; // bits 6–7 shifted down to 4–5
    let sc_lo = a & LOW6;
    let mn_lo = b & LOW6;
    let sc_hi = (c & LOW4) | ((a >> 2) & TOP2);
    let mn_hi = ((c >> 4) & LOW4) | ((b >> 2) & TOP2);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        mn_lo as u64 | (mn_hi as u64) << 32,
    )
}

/// Σ over sub-block pairs of `m[s]·(bsums[2s] + bsums[2s + 1])`.
#[inline(always)]
pub(super) fn min_term(mins: u64, bsums: &[i16; 16]) -> i32 {
    (0..8)
        .map(|s| {
            ((mins >> (8 * s)) & 0xff) as i32 * (bsums[2 * s] as i32 + bsums[2 * s + 1] as i32)
        })
        .sum()
}

fn dot_scalar(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (wb, xb) in w.chunks_exact(BLOCK_BYTES).zip(x) {
        let (sc, mn) = scales_mins(&wb[4..16]);
        let qs = &wb[16..BLOCK_BYTES];
        let mut isum = 0i32;
        for j in 0..4 {
            let q = &qs[32 * j..32 * j + 32];
            let a = &xb.qs[64 * j..64 * j + 64];
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                lo += (q[l] & 0xf) as i32 * a[l] as i32;
                hi += (q[l] >> 4) as i32 * a[l + 32] as i32;
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
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::{scales_mins, BLOCK_BYTES};
    use crate::engine::cpu::act::BlockQ8K;

    /// How many whole blocks every slice holds (the kernels never read past it).
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) fn blocks<const N: usize>(
        w: &[u8],
        bytes: usize,
        x: &[&[BlockQ8K]; N],
    ) -> usize {
        x.iter().fold(w.len() / bytes, |n, x| n.min(x.len()))
    }

    /// The f16 pair at `p` (unaligned) as f32s, with F16C.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn f16x2(p: *const u8) -> (f32, f32) {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }

    /// The f16 at `p` (unaligned; reads 2 bytes) as f32, with F16C.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn f16x1(p: *const u8) -> f32 {
        let bits = (p as *const u16).read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// Sum of the 8 lanes.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// The 16-bit lane shuffle mask (for `pshufb` on both 128-bit lanes) that broadcasts word `k`.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn word_mask(k: i32) -> __m256i {
        _mm256_set1_epi16((((2 * k + 1) << 8) | (2 * k)) as i16)
    }

    /// `mins` (8 bytes) widened to 16 i16 lanes, each twice: `[m0, m0, m1, m1, …, m7, m7]`, to `madd` with the
    /// 16 `bsums` of an activation block.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn mins_paired(mins: u64) -> __m256i {
        let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64));
        _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m))
    }

    /// Adds `dx·(d·isum − dmin·Σ m·bsums)` of one super-block to `acc` (`d`, `dmin` broadcast once per
    /// block for all the tokens).
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn finish_block(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        mins2: __m256i,
        d: __m256,
        dmin: __m256,
    ) -> __m256 {
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins2));
        let block = _mm256_fnmadd_ps(dmin, msum, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        _mm256_fmadd_ps(_mm256_set1_ps(xb.d), block, acc)
    }

    /// [`finish_block`] with `d`, `dmin` as scalars, folded with `dx` per token: two fewer registers held
    /// across the block, which the AVX2 kernels (16 registers) run faster with.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn finish_block_lean(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        mins2: __m256i,
        d: f32,
        dmin: f32,
    ) -> __m256 {
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let msum = _mm256_madd_epi16(bs, mins2);
        let acc = _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(isum), acc);
        _mm256_fnmadd_ps(_mm256_set1_ps(dmin * xb.d), _mm256_cvtepi32_ps(msum), acc)
    }

    /// One Q4_K row · `N` activation rows, AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx2<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm256_set1_epi8(0x0f);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = f16x2(wb.as_ptr());
            let (sc, mn) = scales_mins(&wb[4..16]);
            // The 8 scales as 16-bit words, in both 128-bit lanes (for `pshufb` broadcasts).
            let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let mins2 = mins_paired(mn);
            let qp = wb.as_ptr().add(16);
            let mut isum = [_mm256_setzero_si256(); N];
            for j in 0..4 {
                let q = _mm256_loadu_si256(qp.add(32 * j) as *const __m256i);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
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

    /// A 512-bit `vpermw` index putting word `a` in the low 16 lanes and word `b` in the high 16.
    #[inline(always)]
    unsafe fn pair_index(a: i16, b: i16) -> __m512i {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    }

    /// The sum of the 16 lanes folded into 8.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) unsafe fn fold512(v: __m512i) -> __m256i {
        _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
    }

    /// One Q4_K row · `N` activation rows, AVX-512 VNNI: 128 values of the super-block per step, as two
    /// registers of two sub-blocks each (the nibble halves regrouped by 256-bit lane so that each register
    /// meets 64 contiguous activations), `maddubs` to 16-bit pairs and `vpdpwssd` by the scales.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn dot_avx512<const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks(w, BLOCK_BYTES, &x);
        let m4 = _mm512_set1_epi8(0x0f);
        let idx = [
            pair_index(0, 1),
            pair_index(2, 3),
            pair_index(4, 5),
            pair_index(6, 7),
        ];
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = f16x2(wb.as_ptr());
            let (d, dmin) = (_mm256_set1_ps(d), _mm256_set1_ps(dmin));
            let (sc, mn) = scales_mins(&wb[4..16]);
            let sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let mins2 = mins_paired(mn);
            let qp = wb.as_ptr().add(16);
            let mut isum = [_mm512_setzero_si512(); N];
            for p in 0..2 {
                let q = _mm512_loadu_si512(qp.add(64 * p) as *const _);
                // lo = [sub-block 4p | 4p+2], hi = [4p+1 | 4p+3] (256-bit halves).
                let lo = _mm512_and_si512(q, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
                let w01 = _mm512_shuffle_i64x2::<0x44>(lo, hi);
                let w23 = _mm512_shuffle_i64x2::<0xee>(lo, hi);
                let s01 = _mm512_permutexvar_epi16(idx[2 * p], sc16);
                let s23 = _mm512_permutexvar_epi16(idx[2 * p + 1], sc16);
                for (t, xt) in x.iter().enumerate() {
                    let a = xt.get_unchecked(i).qs.as_ptr().add(128 * p);
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
pub(super) mod neon {
    use std::arch::aarch64::*;

    use super::{min_term, scales_mins, BLOCK_BYTES};
    use crate::engine::cpu::act::BlockQ8K;
    use crate::engine::cpu::kernels::f16_at;

    /// A 16-byte signed dot product into 4 lanes (which lane gets which products is the implementation's).
    pub(in crate::engine::cpu::kernels) trait Dot {
        /// # Safety
        /// The CPU must have what the implementation uses.
        unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
    }

    /// `sdot` (the dot-product extension). The intrinsic is not stable yet, so it is written as assembly.
    pub(in crate::engine::cpu::kernels) struct Sdot;
    impl Dot for Sdot {
        #[inline(always)]
        unsafe fn dot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            // SAFETY: only reached from functions compiled with (and run after detecting) `dotprod`; the
            // instruction touches only the three registers.
            unsafe {
                core::arch::asm!(
                    "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                    acc = inout(vreg) acc,
                    a = in(vreg) a,
                    b = in(vreg) b,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
            acc
        }
    }

    /// Base NEON: widening multiplies, pairs added into 32 bits. Each product is at most 63·128 in
    /// magnitude for the K-quants' 6-bit-or-narrower weights, so a pair fits 16 bits.
    pub(in crate::engine::cpu::kernels) struct Smull;
    impl Dot for Smull {
        #[inline(always)]
        unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            let p = vaddq_s16(
                vmull_s8(vget_low_s8(a), vget_low_s8(b)),
                vmull_high_s8(a, b),
            );
            vpadalq_s16(acc, p)
        }
    }

    /// Whether the dot-product extension is present.
    #[inline(always)]
    pub(in crate::engine::cpu::kernels) fn has_dotprod() -> bool {
        std::arch::is_aarch64_feature_detected!("dotprod")
    }

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
        let mut out = [0f32; N];
        for i in 0..nb {
            let wb = &w[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
            let (sc, mn) = scales_mins(&wb[4..16]);
            let qp = wb.as_ptr().add(16);
            let mut isum = [vdupq_n_s32(0); N];
            for j in 0..4 {
                let q0 = vld1q_u8(qp.add(32 * j));
                let q1 = vld1q_u8(qp.add(32 * j + 16));
                let lo0 = vreinterpretq_s8_u8(vandq_u8(q0, m4));
                let lo1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
                let hi0 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0));
                let hi1 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1));
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
