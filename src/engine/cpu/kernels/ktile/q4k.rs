//! Q4_K tiles. A tile (1184 bytes for eight 144-byte super-blocks: the 6-bit scales and mins are kept one per
//! byte, 32 bytes more):
//! - `d` (8 f16) at 0, `dmin` (8 f16) at 16;
//! - the sub-block scales at 32: byte `8s + r` is row `r`'s scale of sub-block `s`;
//! - the mins at 96, in pairs: bytes `16k + 2r`, `16k + 2r + 1` are row `r`'s mins of sub-blocks `2k`, `2k + 1`;
//! - the quants at 160: 32 loads of 32 bytes; load `8c + e` holds, as bytes `4r..4r + 4`, row `r`'s file bytes
//!   `4e..4e + 4` of its 32-byte chunk `c`: low nibbles are sub-block `2c`'s values `4e..4e + 4`, high nibbles
//!   sub-block `2c + 1`'s.
//!
//! A super-block's integer sums per row: `isum = Σ_s sc[s]·Σ q·y` (the sub-block's eight vectors summed in 16
//! bits — a pair is at most 2·15·128 — then one `madd` by the rows' scales) and `msum = Σ_s m[s]·(bsums[2s] +
//! bsums[2s + 1])`.

use super::{KTile, ROWS};
use crate::engine::cpu::act::BlockQ8K;
use crate::engine::cpu::kernels::kquant::mins::scales_mins;
use crate::engine::cpu::kernels::q4_k::Q4K;

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

const SC_AT: usize = 32;
const MN_AT: usize = 96;
const Q_AT: usize = 160;

impl KTile for Q4K {
    const TILE: usize = 1184;

    fn pack_block(b: &[u8], r: usize, tile: &mut [u8]) {
        tile[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
        tile[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&b[2..4]);
        let (sc, mn) = scales_mins(&b[4..16]);
        for s in 0..8 {
            tile[SC_AT + 8 * s + r] = (sc >> (8 * s)) as u8;
            tile[MN_AT + 16 * (s / 2) + 2 * r + s % 2] = (mn >> (8 * s)) as u8;
        }
        for c in 0..4 {
            for e in 0..8 {
                let at = Q_AT + 32 * (8 * c + e) + 4 * r;
                tile[at..at + 4].copy_from_slice(&b[16 + 32 * c + 4 * e..16 + 32 * c + 4 * e + 4]);
            }
        }
    }

    fn unpack_block(tile: &[u8], r: usize, out: &mut [u8]) {
        out[0..2].copy_from_slice(&tile[2 * r..2 * r + 2]);
        out[2..4].copy_from_slice(&tile[16 + 2 * r..16 + 2 * r + 2]);
        let sc = |s: usize| tile[SC_AT + 8 * s + r];
        let mn = |s: usize| tile[MN_AT + 16 * (s / 2) + 2 * r + s % 2];
        for j in 0..4 {
            out[4 + j] = (sc(j) & 0x3f) | (sc(4 + j) >> 4) << 6;
            out[8 + j] = (mn(j) & 0x3f) | (mn(4 + j) >> 4) << 6;
            out[12 + j] = (sc(4 + j) & 0x0f) | (mn(4 + j) & 0x0f) << 4;
        }
        for c in 0..4 {
            for e in 0..8 {
                let at = Q_AT + 32 * (8 * c + e) + 4 * r;
                out[16 + 32 * c + 4 * e..16 + 32 * c + 4 * e + 4]
                    .copy_from_slice(&tile[at..at + 4]);
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
        use super::x86::{broadcast, row_scales, store};
        debug_assert!(group.len() >= nb * Self::TILE && x.iter().all(|x| x.len() >= nb));
        let mut acc = [_mm256_setzero_ps(); N];
        let low = _mm256_set1_epi8(0x0f);
        for i in 0..nb {
            // SAFETY: tile `i` lies in `group` and block `i` in every `x[t]` (i < nb, the caller's bounds);
            // every load below is inside the tile.
            unsafe {
                let p = group.as_ptr().add(i * Self::TILE);
                let mut isum = [_mm256_setzero_si256(); N];
                for s in 0..8 {
                    let (c, high) = (s / 2, s % 2 == 1);
                    let mut q = [_mm256_setzero_si256(); 8];
                    for (e, q) in q.iter_mut().enumerate() {
                        let b = _mm256_loadu_si256(p.add(Q_AT + 32 * (8 * c + e)).cast());
                        let b = if high { _mm256_srli_epi16::<4>(b) } else { b };
                        *q = _mm256_and_si256(b, low);
                    }
                    let sc = row_scales(p.add(SC_AT + 8 * s), false);
                    for t in 0..N {
                        let y = &x[t].get_unchecked(i).qs;
                        let mut h = _mm256_setzero_si256();
                        for (e, &q) in q.iter().enumerate() {
                            h = _mm256_add_epi16(
                                h,
                                _mm256_maddubs_epi16(q, broadcast(y, 32 * s + 4 * e)),
                            );
                        }
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(h, sc));
                    }
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast()));
                for t in 0..N {
                    let xb = x[t].get_unchecked(i);
                    // Σ over each 32 values of the activations: the 16 bsums added in pairs.
                    let bs = _mm_hadd_epi16(
                        _mm_loadu_si128(xb.bsums.as_ptr().cast()),
                        _mm_loadu_si128(xb.bsums.as_ptr().add(8).cast()),
                    );
                    let mut msum = _mm256_setzero_si256();
                    for k in 0..4 {
                        let mn =
                            _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(MN_AT + 16 * k).cast()));
                        let pair = match k {
                            0 => _mm_shuffle_epi32::<0x00>(bs),
                            1 => _mm_shuffle_epi32::<0x55>(bs),
                            2 => _mm_shuffle_epi32::<0xaa>(bs),
                            _ => _mm_shuffle_epi32::<0xff>(bs),
                        };
                        let pair = _mm256_broadcastsi128_si256(pair);
                        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn, pair));
                    }
                    let dx = _mm256_set1_ps(xb.d);
                    let t1 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[t]));
                    let t2 = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum));
                    acc[t] = _mm256_add_ps(acc[t], _mm256_sub_ps(t1, t2));
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
        let low = vdupq_n_u8(0x0f);
        for (i, tile) in group.chunks_exact(Self::TILE).take(nb).enumerate() {
            let p = tile.as_ptr();
            let zi = vdupq_n_s32(0);
            let mut isum = [(zi, zi); N];
            for s in 0..8 {
                let (c, high) = (s / 2, s % 2 == 1);
                let q: [Half; 8] = std::array::from_fn(|e| {
                    // SAFETY: the 32 bytes of load `8c + e` lie inside the tile.
                    let (b0, b1) = unsafe {
                        let at = p.add(Q_AT + 32 * (8 * c + e));
                        (vld1q_u8(at), vld1q_u8(at.add(16)))
                    };
                    let f = |b| {
                        vreinterpretq_s8_u8(if high {
                            vshrq_n_u8::<4>(b)
                        } else {
                            vandq_u8(b, low)
                        })
                    };
                    (f(b0), f(b1))
                });
                let sc = |r0: usize| {
                    let b = &tile[SC_AT + 8 * s + r0..SC_AT + 8 * s + r0 + 4];
                    // SAFETY: a 4-lane array.
                    unsafe {
                        vld1q_s32([b[0] as i32, b[1] as i32, b[2] as i32, b[3] as i32].as_ptr())
                    }
                };
                let (sc0, sc1) = (sc(0), sc(4));
                for t in 0..N {
                    let y = &x[t][i].qs[32 * s..32 * s + 32];
                    // SAFETY: NEON is present (and `dotprod` where SDOT, the caller's guarantee).
                    let (g0, g1) = unsafe { dot4::<SDOT>(&q, y) };
                    isum[t] = (vmlaq_s32(isum[t].0, g0, sc0), vmlaq_s32(isum[t].1, g1, sc1));
                }
            }
            let d = f16x8(tile, 0);
            let dmin = f16x8(tile, 16);
            for t in 0..N {
                let xb = &x[t][i];
                let mut msum = [0i32; ROWS];
                for (r, m) in msum.iter_mut().enumerate() {
                    *m = (0..8)
                        .map(|s| {
                            let mn = tile[MN_AT + 16 * (s / 2) + 2 * r + s % 2] as i32;
                            mn * (xb.bsums[2 * s] as i32 + xb.bsums[2 * s + 1] as i32)
                        })
                        .sum();
                }
                // SAFETY: 8-lane arrays.
                let (m0, m1) =
                    unsafe { (vld1q_s32(msum.as_ptr()), vld1q_s32(msum.as_ptr().add(4))) };
                let dx = vdupq_n_f32(xb.d);
                let term = |d: float32x4_t, dmin: float32x4_t, is: int32x4_t, ms: int32x4_t| {
                    vsubq_f32(
                        vmulq_f32(vmulq_f32(d, dx), vcvtq_f32_s32(is)),
                        vmulq_f32(vmulq_f32(dmin, dx), vcvtq_f32_s32(ms)),
                    )
                };
                acc[t] = (
                    vaddq_f32(acc[t].0, term(d.0, dmin.0, isum[t].0, m0)),
                    vaddq_f32(acc[t].1, term(d.1, dmin.1, isum[t].1, m1)),
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
