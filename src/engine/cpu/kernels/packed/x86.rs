//! The tiles on x86: AVX2 (`maddubs`, whose 16-bit pair sums are added in 16 bits as long as they cannot
//! overflow) and AVX-512 VNNI (`vpdpbusd` on 256-bit vectors). Both unpack each weight vector of a tile once
//! and use it for every token.

use std::arch::x86_64::*;

use super::{h_at, q_at, tile_bytes, Block32, Quants, M_AT, ROWS};
use crate::engine::cpu::act::BlockQ8;

/// Load `j` (< 4) of a nibble tile's quants at `p` as its two weight vectors, `j` (low nibbles) and `j + 4`
/// (high nibbles), each with its fifth bits from `h` for the Q5 types (unsigned quants below 16, or 32).
///
/// # Safety
/// `p` points at a whole tile of `B`; the processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibble_pair<B: Block32>(p: *const u8, h: __m256i, j: usize) -> (__m256i, __m256i) {
    let low = _mm256_set1_epi8(0x0f);
    // SAFETY: load `j` lies inside the tile (the caller's guarantee); the load is unaligned.
    let b = unsafe { _mm256_loadu_si256(p.add(q_at::<B>() + 32 * j).cast()) };
    let lo = _mm256_and_si256(b, low);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(b), low);
    if B::QUANTS == Quants::Nibbles5 {
        // SAFETY: AVX2, as this function.
        unsafe {
            (
                _mm256_or_si256(lo, fifth(h, j)),
                _mm256_or_si256(hi, fifth(h, j + 4)),
            )
        }
    } else {
        (lo, hi)
    }
}

/// A Q5 tile's fifth bits (zero for the other types).
///
/// # Safety
/// `p` points at a whole tile of `B`; the processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fifth_bits<B: Block32>(p: *const u8) -> __m256i {
    if B::QUANTS == Quants::Nibbles5 {
        // SAFETY: the fifth bits lie inside the tile; the load is unaligned.
        unsafe { _mm256_loadu_si256(p.add(h_at::<B>()).cast()) }
    } else {
        _mm256_setzero_si256()
    }
}

/// The eight weight vectors of the tile at `p` for the VNNI path (vector `v`: elements `4v..4v+4` of each
/// row): the unsigned quants of the nibble types (below 16, or 32 with the fifth bits), Q8_0's signed bytes.
///
/// # Safety
/// `p` points at a whole tile of `B`; the processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn weights<B: Block32>(p: *const u8) -> [__m256i; 8] {
    let mut w = [_mm256_setzero_si256(); 8];
    // SAFETY: every load lies inside the tile (the caller's guarantee); the loads are unaligned.
    unsafe {
        let q = p.add(q_at::<B>());
        if B::QUANTS == Quants::Bytes {
            for (v, w) in w.iter_mut().enumerate() {
                *w = _mm256_loadu_si256(q.add(32 * v).cast());
            }
            return w;
        }
        let h = fifth_bits::<B>(p);
        for j in 0..4 {
            (w[j], w[j + 4]) = nibble_pair::<B>(p, h, j);
        }
    }
    w
}

/// Four activation bytes (`y[4v..4v+4]`) in every 32-bit lane.
///
/// # Safety
/// `v < 8`; the processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn broadcast(a: &BlockQ8, v: usize) -> __m256i {
    // SAFETY: `qs` has 32 bytes and 4v + 4 <= 32; the read is unaligned.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(a.qs.as_ptr().add(4 * v).cast::<i32>()) })
}

/// Bit `v` of every byte of `h` (a Q5 tile's fifth bits) moved to bit 4 (16-bit shifts: the bit is masked
/// right after, and no shift here carries a byte's bit `v` into its neighbour's bit 4).
///
/// # Safety
/// The processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fifth(h: __m256i, v: usize) -> __m256i {
    let at4 = match v {
        0 => _mm256_slli_epi16::<4>(h),
        1 => _mm256_slli_epi16::<3>(h),
        2 => _mm256_slli_epi16::<2>(h),
        3 => _mm256_slli_epi16::<1>(h),
        4 => h,
        5 => _mm256_srli_epi16::<1>(h),
        6 => _mm256_srli_epi16::<2>(h),
        _ => _mm256_srli_epi16::<3>(h),
    };
    _mm256_and_si256(at4, _mm256_set1_epi8(0x10))
}

/// The AVX2 integer dots of one tile with `N` tokens: lane `r` of `s[t]` is row `r`'s `Σ w y` (exact). The
/// weight vectors are unpacked one at a time and each serves every token before the next (few live
/// registers: the accumulators stay in registers for `N` up to 4; at 8 some spill, which costs less than a
/// second unpack).
///
/// # Safety
/// `p` points at a whole tile of `B`; the processor has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn isums_avx2<B: Block32, const N: usize>(p: *const u8, a: [&BlockQ8; N]) -> [__m256i; N] {
    let ones = _mm256_set1_epi16(1);
    let mut s = [_mm256_setzero_si256(); N];
    // SAFETY: every load lies inside the tile (the caller's guarantee; unaligned loads); every `broadcast`
    // has v < 8.
    unsafe {
        let q = p.add(q_at::<B>());
        if B::QUANTS == Quants::Bytes {
            // Signed · signed: |w| as the unsigned operand and y with w's sign (|w| <= 128, |y| <= 127 from
            // the activation quantizer, so a pair fits 16 bits but two pairs may not: one `madd` per vector).
            for v in 0..8 {
                let w = _mm256_loadu_si256(q.add(32 * v).cast());
                let aw = _mm256_abs_epi8(w);
                for t in 0..N {
                    let y = _mm256_sign_epi8(broadcast(a[t], v), w);
                    let pair = _mm256_maddubs_epi16(aw, y);
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(pair, ones));
                }
            }
            return s;
        }
        for t in 0..N {
            s[t] = _mm256_set1_epi32(-B::ZERO * a[t].sum);
        }
        let h = fifth_bits::<B>(p);
        // Unsigned quants below 16 (32): a pair is at most 2·15·128 (2·31·128) in magnitude, so eight (four)
        // vectors' pairs add up in 16 bits before one `madd` widens them. Load `j` holds vectors `j` (low
        // nibbles) and `j + 4` (high nibbles).
        let loads: &[&[usize]] = if B::QUANTS == Quants::Nibbles {
            &[&[0, 1, 2, 3]]
        } else {
            &[&[0, 1], &[2, 3]]
        };
        for js in loads {
            let mut h16 = [_mm256_setzero_si256(); N];
            for &j in *js {
                let (lo, hi) = nibble_pair::<B>(p, h, j);
                for t in 0..N {
                    let pl = _mm256_maddubs_epi16(lo, broadcast(a[t], j));
                    let ph = _mm256_maddubs_epi16(hi, broadcast(a[t], j + 4));
                    h16[t] = _mm256_add_epi16(h16[t], _mm256_add_epi16(pl, ph));
                }
            }
            for t in 0..N {
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(h16[t], ones));
            }
        }
    }
    s
}

/// The VNNI integer dots of one tile with one token (the weights as the unsigned operand: Q8_0's are given
/// plus 128, taken back off with the activation's exact `Σy`).
///
/// # Safety
/// The processor has AVX2, AVX-512 F/VL and VNNI.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
unsafe fn isum_vnni<B: Block32>(w: &[__m256i; 8], a: &BlockQ8) -> __m256i {
    let zero = if B::QUANTS == Quants::Bytes {
        128
    } else {
        B::ZERO
    };
    let mut s = _mm256_set1_epi32(-zero * a.sum);
    for (v, &w) in w.iter().enumerate() {
        // SAFETY: v < 8.
        s = _mm256_dpbusd_epi32(s, w, unsafe { broadcast(a, v) });
    }
    s
}

macro_rules! tile {
    ($(#[$doc:meta])* $name:ident, $features:literal, $vnni:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The processor has the features this function is compiled for; `group` holds at least `nb` tiles
        /// and every `x[t]` at least `nb` blocks.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $name<B: Block32, const N: usize>(
            group: &[u8],
            nb: usize,
            x: [&[BlockQ8]; N],
        ) -> [[f32; ROWS]; N] {
            let tb = tile_bytes::<B>();
            debug_assert!(group.len() >= nb * tb && x.iter().all(|x| x.len() >= nb));
            let mut acc = [_mm256_setzero_ps(); N];
            let mut mins = [_mm256_setzero_ps(); N];
            for i in 0..nb {
                // SAFETY: tile `i` lies in `group` (i < nb); block `i` of every `x[t]` exists.
                unsafe {
                    let p = group.as_ptr().add(i * tb);
                    let dw = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
                    let mw = if B::MIN {
                        _mm256_cvtph_ps(_mm_loadu_si128(p.add(M_AT).cast()))
                    } else {
                        _mm256_setzero_ps()
                    };
                    let a: [&BlockQ8; N] = std::array::from_fn(|t| x[t].get_unchecked(i));
                    let isums = if $vnni {
                        let mut w = weights::<B>(p);
                        if B::QUANTS == Quants::Bytes {
                            for w in &mut w {
                                *w = _mm256_xor_si256(*w, _mm256_set1_epi8(0x80u8 as i8));
                            }
                        }
                        // A loop, not `a.map(..)`: a closure does not get this function's target features,
                        // so `isum_vnni` could not be inlined into it (a call per token and tile).
                        let mut s = [_mm256_setzero_si256(); N];
                        for (s, a) in s.iter_mut().zip(a) {
                            *s = isum_vnni::<B>(&w, a);
                        }
                        s
                    } else {
                        isums_avx2::<B, N>(p, a)
                    };
                    for t in 0..N {
                        let (a, isum) = (a[t], isums[t]);
                        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(a.d));
                        acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc[t]);
                        if B::MIN {
                            mins[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s), mins[t]);
                        }
                    }
                }
            }
            let mut out = [[0f32; ROWS]; N];
            for t in 0..N {
                let v = if B::MIN { _mm256_add_ps(acc[t], mins[t]) } else { acc[t] };
                // SAFETY: `out[t]` is 8 floats.
                unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), v) };
            }
            out
        }
    };
}

tile!(
    /// The AVX2 + FMA + F16C tile.
    tile_avx2,
    "avx2,fma,f16c",
    false
);
tile!(
    /// The AVX-512 VNNI tile (256-bit vectors: one `vpdpbusd` per weight vector and token).
    tile_vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    true
);
