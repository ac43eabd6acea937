//! Q6_K tiles. A tile (1680 bytes, exactly eight 210-byte super-blocks):
//! - `d` (8 f16) at 0;
//! - the 16 signed scales of each row at 16, in pairs: bytes `16k + 2r`, `16k + 2r + 1` are row `r`'s scales
//!   of groups `2k`, `2k + 1` (16 values each);
//! - the low four bits at 144: 32 loads of 32 bytes; load `j`'s low nibbles are vector `j` (values `4j..4j + 4`
//!   of each row, as bytes `4r..4r + 4`), its high nibbles vector `32 + j`;
//! - the top two bits at 1168: 16 loads of 32 bytes; bits `2m..2m + 2` of load `k` are vector `16m + k`'s.
//!
//! A super-block's integer sum per row is `Σ_g sc[g]·Σ q·y − 32·Σ_g sc[g]·bsums[g]` (quants below 64: two
//! vectors' `maddubs` pairs add up in 16 bits, then a `madd` by the rows' scales).

use super::{KTile, ROWS};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::kernels::kquant::KQuant;
use crate::engine::cpu::kernels::q6_k::Q6K;

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

const SC_AT: usize = 16;
const QL_AT: usize = 144;
const QH_AT: usize = 1168;

/// Where value `4v + e` of row `r` lives: (byte of the low bits, nibble shift, byte of the top bits, shift).
fn place(v: usize, e: usize, r: usize) -> (usize, u32, usize, u32) {
    let lane = 4 * r + e;
    (
        QL_AT + 32 * (v % 32) + lane,
        4 * (v / 32) as u32,
        QH_AT + 32 * (v % 16) + lane,
        2 * (v / 16) as u32,
    )
}

/// Row `r`'s scale of group `g`, as stored in the tile.
fn scale_at(g: usize, r: usize) -> usize {
    SC_AT + 16 * (g / 2) + 2 * r + g % 2
}

impl KTile for Q6K {
    const TILE: usize = 1680;

    fn pack_block(b: &[u8], r: usize, tile: &mut [u8]) {
        tile[2 * r..2 * r + 2].copy_from_slice(&b[208..210]);
        for g in 0..16 {
            tile[scale_at(g, r)] = b[192 + g];
        }
        let mut q = [0u8; QK_K];
        Self::unpack(b, &mut q);
        for v in 0..64 {
            for e in 0..4 {
                let (lo, ls, hi, hs) = place(v, e, r);
                let x = q[4 * v + e];
                tile[lo] |= (x & 0x0f) << ls;
                tile[hi] |= (x >> 4) << hs;
            }
        }
    }

    fn unpack_block(tile: &[u8], r: usize, out: &mut [u8]) {
        out[208..210].copy_from_slice(&tile[2 * r..2 * r + 2]);
        for g in 0..16 {
            out[192 + g] = tile[scale_at(g, r)];
        }
        let q: [u8; QK_K] = std::array::from_fn(|k| {
            let (lo, ls, hi, hs) = place(k / 4, k % 4, r);
            ((tile[lo] >> ls) & 0x0f) | ((tile[hi] >> hs) & 3) << 4
        });
        // The file's layout (see `q6_k`): per 128-value half, `ql` bytes `l` and `l + 32` and `qh` byte `l`.
        for h in 0..2 {
            let q = &q[128 * h..128 * h + 128];
            for l in 0..32 {
                out[64 * h + l] = (q[l] & 0x0f) | (q[l + 64] & 0x0f) << 4;
                out[64 * h + l + 32] = (q[l + 32] & 0x0f) | (q[l + 96] & 0x0f) << 4;
                out[128 + 32 * h + l] = (q[l] >> 4)
                    | (q[l + 32] >> 4) << 2
                    | (q[l + 64] >> 4) << 4
                    | (q[l + 96] >> 4) << 6;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_avx2<const N: usize>(
        group: &[u8],
        nb: usize,
        x: [&[BlockQ8K]; N],
    ) -> [[f32; ROWS]; N] {
        use super::x86::{broadcast, store};
        debug_assert!(group.len() >= nb * Self::TILE && x.iter().all(|x| x.len() >= nb));
        let mut acc = [_mm256_setzero_ps(); N];
        let low = _mm256_set1_epi8(0x0f);
        let top = _mm256_set1_epi8(0x30);
        let lo16 = _mm256_set1_epi32(0xffff);
        for i in 0..nb {
            // SAFETY: tile `i` lies in `group` and block `i` in every `x[t]` (i < nb, the caller's bounds);
            // every load below is inside the tile.
            unsafe {
                let p = group.as_ptr().add(i * Self::TILE);
                let mut isum = [_mm256_setzero_si256(); N];
                for k in 0..8 {
                    // Groups 2k and 2k + 1: the rows' scales as (sc[2k], sc[2k + 1]) words per lane.
                    let pairs = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(SC_AT + 16 * k).cast()));
                    for j in 0..2 {
                        let g = 2 * k + j;
                        let one = if j == 0 {
                            _mm256_and_si256(pairs, lo16)
                        } else {
                            _mm256_srli_epi32::<16>(pairs)
                        };
                        let sc = _mm256_or_si256(one, _mm256_slli_epi32::<16>(one));
                        let q: [__m256i; 4] = std::array::from_fn(|n| {
                            let v = 4 * g + n;
                            let l = _mm256_loadu_si256(p.add(QL_AT + 32 * (v % 32)).cast());
                            let l = if v < 32 { l } else { _mm256_srli_epi16::<4>(l) };
                            let h = _mm256_loadu_si256(p.add(QH_AT + 32 * (v % 16)).cast());
                            // Bits 2m..2m + 2 to bits 4..6 (16-bit shifts, masked right after).
                            let h = match v / 16 {
                                0 => _mm256_slli_epi16::<4>(h),
                                1 => _mm256_slli_epi16::<2>(h),
                                2 => h,
                                _ => _mm256_srli_epi16::<2>(h),
                            };
                            _mm256_or_si256(_mm256_and_si256(l, low), _mm256_and_si256(h, top))
                        });
                        for t in 0..N {
                            let y = &x[t].get_unchecked(i).qs;
                            let m =
                                |n: usize| _mm256_maddubs_epi16(q[n], broadcast(y, 16 * g + 4 * n));
                            let a = _mm256_madd_epi16(_mm256_add_epi16(m(0), m(1)), sc);
                            let b = _mm256_madd_epi16(_mm256_add_epi16(m(2), m(3)), sc);
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(a, b));
                        }
                    }
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
                for t in 0..N {
                    let xb = x[t].get_unchecked(i);
                    let bs = _mm256_loadu_si256(xb.bsums.as_ptr().cast());
                    let mut off = _mm256_setzero_si256();
                    for k in 0..8 {
                        let pairs =
                            _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(SC_AT + 16 * k).cast()));
                        // (bsums[2k], bsums[2k + 1]) in every 32-bit lane.
                        let b = _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(k as i32));
                        off = _mm256_add_epi32(off, _mm256_madd_epi16(pairs, b));
                    }
                    let isum = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(off));
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(xb.d));
                    acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum)));
                }
            }
        }
        let mut out = [[0f32; ROWS]; N];
        for t in 0..N {
            store(acc[t], &mut out[t]);
        }
        out
    }

    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    unsafe fn tile_neon<const N: usize, const SDOT: bool>(
        group: &[u8],
        nb: usize,
        x: [&[BlockQ8K]; N],
    ) -> [[f32; ROWS]; N] {
        use super::neon::{dot4, f16x8, store, Half};
        let z = vdupq_n_f32(0.0);
        let mut acc = [(z, z); N];
        let (low, top) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x30));
        for (i, tile) in group.chunks_exact(Self::TILE).take(nb).enumerate() {
            let p = tile.as_ptr();
            let zi = vdupq_n_s32(0);
            let mut isum = [(zi, zi); N];
            for g in 0..16 {
                let q: [Half; 4] = std::array::from_fn(|n| {
                    let v = 4 * g + n;
                    let half = |off: usize| {
                        // SAFETY: both 16-byte loads lie inside the tile.
                        let (l, h) = unsafe {
                            (
                                vld1q_u8(p.add(QL_AT + 32 * (v % 32) + off)),
                                vld1q_u8(p.add(QH_AT + 32 * (v % 16) + off)),
                            )
                        };
                        let l = if v < 32 {
                            vandq_u8(l, low)
                        } else {
                            vshrq_n_u8::<4>(l)
                        };
                        let h = match v / 16 {
                            0 => vshlq_n_u8::<4>(h),
                            1 => vshlq_n_u8::<2>(h),
                            2 => h,
                            _ => vshrq_n_u8::<2>(h),
                        };
                        vreinterpretq_s8_u8(vorrq_u8(l, vandq_u8(h, top)))
                    };
                    (half(0), half(16))
                });
                let sc = |r0: usize| {
                    let s: [i32; 4] =
                        std::array::from_fn(|r| tile[scale_at(g, r0 + r)] as i8 as i32);
                    // SAFETY: a 4-lane array.
                    unsafe { vld1q_s32(s.as_ptr()) }
                };
                let (sc0, sc1) = (sc(0), sc(4));
                for t in 0..N {
                    let y = &x[t][i].qs[16 * g..16 * g + 16];
                    // SAFETY: NEON is present (and `dotprod` where SDOT, the caller's guarantee).
                    let (g0, g1) = unsafe { dot4::<SDOT>(&q, y) };
                    isum[t] = (vmlaq_s32(isum[t].0, g0, sc0), vmlaq_s32(isum[t].1, g1, sc1));
                }
            }
            let d = f16x8(tile, 0);
            for t in 0..N {
                let xb = &x[t][i];
                let off: [i32; ROWS] = std::array::from_fn(|r| {
                    (0..16)
                        .map(|g| tile[scale_at(g, r)] as i8 as i32 * xb.bsums[g] as i32)
                        .sum::<i32>()
                        * 32
                });
                // SAFETY: 8-lane arrays.
                let (o0, o1) = unsafe { (vld1q_s32(off.as_ptr()), vld1q_s32(off.as_ptr().add(4))) };
                let dx = vdupq_n_f32(xb.d);
                let term = |d: float32x4_t, is: int32x4_t, o: int32x4_t| {
                    vmulq_f32(vmulq_f32(d, dx), vcvtq_f32_s32(vsubq_s32(is, o)))
                };
                acc[t] = (
                    vaddq_f32(acc[t].0, term(d.0, isum[t].0, o0)),
                    vaddq_f32(acc[t].1, term(d.1, isum[t].1, o1)),
                );
            }
        }
        let mut out = [[0f32; ROWS]; N];
        for t in 0..N {
            store(acc[t], &mut out[t]);
        }
        out
    }
}
