//! The tiles on aarch64: a 32-byte weight vector is two NEON registers (rows 0..4 and 4..8), the integer dot
//! is `sdot` with the dot-product extension or widening multiplies on base NEON.

use std::arch::aarch64::*;

use super::{h_at, q_at, tile_bytes, Block32, Quants, M_AT, ROWS};
use crate::engine::cpu::act::BlockQ8;
use crate::engine::cpu::kernels::f16_at;

// A 32-byte weight vector (`Vector`): rows 0..4 and rows 4..8.
use crate::engine::cpu::kernels::ktile::neon::{dot4, Half as Vector};

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

/// The integer dots of one tile with one token, lane `r` of the pair row `r` (then `4 + r`): the shared
/// NEON dot of [`crate::engine::cpu::kernels::ktile`] plus the zero point's `−zero · Σy`.
///
/// # Safety
/// The processor has the dot-product extension where `SDOT`.
#[inline]
unsafe fn isum<B: Block32, const SDOT: bool>(
    w: &[Vector; 8],
    a: &BlockQ8,
) -> (int32x4_t, int32x4_t) {
    // SAFETY: the caller's guarantee; `qs` holds 4 · 8 bytes.
    let (s0, s1) = unsafe { dot4::<SDOT>(w, &a.qs) };
    // SAFETY: NEON is part of every aarch64 processor.
    unsafe {
        let seed = vdupq_n_s32(-B::ZERO * a.sum);
        (vaddq_s32(seed, s0), vaddq_s32(seed, s1))
    }
}

macro_rules! tile {
    ($(#[$doc:meta])* $name:ident, $features:literal, $sdot:literal) => {
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
                    // SAFETY: the features this function is compiled for.
                    let (s0, s1) = unsafe { isum::<B, $sdot>(&w, a) };
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
    true
);
tile!(
    /// The tile on base NEON.
    tile_mull,
    "neon",
    false
);
