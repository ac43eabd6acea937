//! The tiles on aarch64: a 32-byte weight vector is two NEON registers (rows 0..4 and 4..8), the integer dot
//! is `sdot` with the dot-product extension or widening multiplies on base NEON.

use std::arch::aarch64::*;

use super::{h_at, q_at, tile_bytes, Block32, Quants, M_AT, ROWS};
use crate::engine::cpu::act::BlockQ8;
use crate::engine::cpu::kernels::f16_at;

/// A 32-byte weight vector: rows 0..4 and rows 4..8.
type Vector = (int8x16_t, int8x16_t);

/// The eight weight vectors of the tile at `p`, as on x86 (unsigned quants of the nibble types, Q8_0's
/// signed bytes; every value fits an i8, so the dots are signed · signed).
///
/// # Safety
/// `p` points at a whole tile of `B`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn weights<B: Block32>(p: *const u8) -> [Vector; 8] {
    let zero = vdupq_n_s8(0);
    let mut w = [(zero, zero); 8];
    // SAFETY: every load lies inside the tile (the caller's guarantee); `vld1q` has no alignment requirement.
    unsafe {
        let q = p.add(q_at::<B>());
        if B::QUANTS == Quants::Bytes {
            for (v, w) in w.iter_mut().enumerate() {
                *w = (
                    vld1q_s8(q.add(32 * v).cast()),
                    vld1q_s8(q.add(32 * v + 16).cast()),
                );
            }
            return w;
        }
        let low = vdupq_n_u8(0x0f);
        for j in 0..4 {
            let (b0, b1) = (vld1q_u8(q.add(32 * j)), vld1q_u8(q.add(32 * j + 16)));
            w[j] = (
                vreinterpretq_s8_u8(vandq_u8(b0, low)),
                vreinterpretq_s8_u8(vandq_u8(b1, low)),
            );
            w[j + 4] = (
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(b0)),
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(b1)),
            );
        }
        if B::QUANTS == Quants::Nibbles5 {
            let h = p.add(h_at::<B>());
            let (h0, h1) = (vld1q_u8(h), vld1q_u8(h.add(16)));
            let bit4 = vdupq_n_u8(0x10);
            for (v, w) in w.iter_mut().enumerate() {
                let bit = vdupq_n_u8(1 << v);
                let f0 = vandq_u8(vtstq_u8(h0, bit), bit4);
                let f1 = vandq_u8(vtstq_u8(h1, bit), bit4);
                *w = (
                    vorrq_s8(w.0, vreinterpretq_s8_u8(f0)),
                    vorrq_s8(w.1, vreinterpretq_s8_u8(f1)),
                );
            }
        }
    }
    w
}

/// Four activation bytes (`y[4v..4v+4]`) in every 32-bit lane.
#[inline]
#[target_feature(enable = "neon")]
fn broadcast(a: &BlockQ8, v: usize) -> int8x16_t {
    let b = &a.qs[4 * v..4 * v + 4];
    vreinterpretq_s8_s32(vdupq_n_s32(i32::from_le_bytes([
        b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
    ])))
}

/// The integer dots with `sdot`: lane `r` of the pair is row `r` (then `4 + r`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn isum_sdot<B: Block32>(w: &[Vector; 8], a: &BlockQ8) -> (int32x4_t, int32x4_t) {
    let seed = vdupq_n_s32(-B::ZERO * a.sum);
    let (mut s0, mut s1) = (seed, seed);
    for (v, w) in w.iter().enumerate() {
        let y = broadcast(a, v);
        s0 = crate::engine::cpu::kernels::neon_sdot(s0, w.0, y);
        s1 = crate::engine::cpu::kernels::neon_sdot(s1, w.1, y);
    }
    (s0, s1)
}

/// The integer dots with widening multiplies (an i8 product fits 16 bits; pairs are added into 32).
#[inline]
#[target_feature(enable = "neon")]
fn isum_mull<B: Block32>(w: &[Vector; 8], a: &BlockQ8) -> (int32x4_t, int32x4_t) {
    let z = vdupq_n_s32(0);
    // Per register: rows (0, 1) in the low half's products, rows (2, 3) in the high half's.
    let mut p = [z; 4];
    for (v, w) in w.iter().enumerate() {
        let y = broadcast(a, v);
        p[0] = vpadalq_s16(p[0], vmull_s8(vget_low_s8(w.0), vget_low_s8(y)));
        p[1] = vpadalq_s16(p[1], vmull_high_s8(w.0, y));
        p[2] = vpadalq_s16(p[2], vmull_s8(vget_low_s8(w.1), vget_low_s8(y)));
        p[3] = vpadalq_s16(p[3], vmull_high_s8(w.1, y));
    }
    let seed = vdupq_n_s32(-B::ZERO * a.sum);
    (
        vaddq_s32(seed, vpaddq_s32(p[0], p[1])),
        vaddq_s32(seed, vpaddq_s32(p[2], p[3])),
    )
}

macro_rules! tile {
    ($(#[$doc:meta])* $name:ident, $features:literal, $isum:ident) => {
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
            let z = vdupq_n_f32(0.0);
            let mut acc = [(z, z); N];
            let mut mins = [(z, z); N];
            for (i, tile) in group.chunks_exact(tb).take(nb).enumerate() {
                let f = |at: usize| {
                    let v: [f32; ROWS] = std::array::from_fn(|r| f16_at(tile, at + 2 * r));
                    // SAFETY: `v` is 8 floats.
                    unsafe { (vld1q_f32(v.as_ptr()), vld1q_f32(v.as_ptr().add(4))) }
                };
                let dw = f(0);
                let mw = if B::MIN { f(M_AT) } else { (z, z) };
                // SAFETY: `tile` is a whole tile.
                let w = unsafe { weights::<B>(tile.as_ptr()) };
                for t in 0..N {
                    let a = &x[t][i];
                    let (s0, s1) = $isum::<B>(&w, a);
                    let dy = vdupq_n_f32(a.d);
                    let (a0, a1) = acc[t];
                    acc[t] = (
                        vfmaq_f32(a0, vmulq_f32(dw.0, dy), vcvtq_f32_s32(s0)),
                        vfmaq_f32(a1, vmulq_f32(dw.1, dy), vcvtq_f32_s32(s1)),
                    );
                    if B::MIN {
                        let sy = vdupq_n_f32(a.s);
                        let (m0, m1) = mins[t];
                        mins[t] = (vfmaq_f32(m0, mw.0, sy), vfmaq_f32(m1, mw.1, sy));
                    }
                }
            }
            let mut out = [[0f32; ROWS]; N];
            for t in 0..N {
                let (mut a0, mut a1) = acc[t];
                if B::MIN {
                    a0 = vaddq_f32(a0, mins[t].0);
                    a1 = vaddq_f32(a1, mins[t].1);
                }
                // SAFETY: `out[t]` is 8 floats.
                unsafe {
                    vst1q_f32(out[t].as_mut_ptr(), a0);
                    vst1q_f32(out[t].as_mut_ptr().add(4), a1);
                }
            }
            out
        }
    };
}

tile!(
    /// The tile with the dot-product extension.
    tile_sdot,
    "neon,dotprod",
    isum_sdot
);
tile!(
    /// The tile on base NEON.
    tile_mull,
    "neon",
    isum_mull
);
