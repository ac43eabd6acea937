//! Row-interleaved tiles for the 32-value block types (llama.cpp's CPU "repack" idea, our own layout): the
//! rows of a matrix are taken eight at a time, and block `i` of those eight rows becomes one tile in which
//! every 32-byte vector holds four consecutive quants of each of the eight rows. One broadcast of four
//! activation bytes then serves all eight rows: the integer dot of a whole tile is 8 multiply-adds per token
//! (AVX2: `maddubs` + a 16-bit add; VNNI and NEON `sdot`: one instruction), and the scales are applied to
//! eight rows at once. The tile is exactly as large as the eight blocks it replaces.
//!
//! A tile (`ROWS · B::BYTES` bytes), in order:
//! - `d`: 8 f16, row `r` at `2r`; then for the types with a min, `m`: 8 f16;
//! - for the Q5 types, the fifth bits: 32 bytes, bit `v` of byte `4r + e` is the fifth bit of row `r`'s
//!   element `4v + e`;
//! - the quants: vector `v` (elements `4v..4v+4` of every row; byte `4r + e` is row `r`'s element `4v + e`).
//!   Q8_0 stores the eight vectors (256 bytes); the nibble types store four 32-byte loads whose low nibbles
//!   are vector `j` and whose high nibbles are vector `j + 4` (128 bytes: a row's four bytes are the file's
//!   own bytes `4j..4j+4` of its block).
//!
//! Every path computes, for each of its rows, the canonical sum of [`super::block32`] (same integer dots,
//! same fused multiply-adds in the same order), so results are bit for bit the row dot's.

use super::block32::{quants, store_quants, weight, Block32, Quants};
use super::f16_at;
use crate::engine::cpu::act::BlockQ8;
use crate::engine::cpu::isa::Isa;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

impl<B: Block32 + Send + Sync + 'static> super::Tiled for B {
    const TILE: usize = tile_bytes::<B>();

    fn pack(raw: &[u8], rows: usize, nb: usize) -> Vec<u8> {
        pack::<B>(raw, rows, nb)
    }

    fn unpack(tile: &[u8], r: usize, out: &mut [u8]) {
        unpack_block::<B>(tile, r, out)
    }

    fn dot_group<const N: usize>(isa: Isa, group: &[u8], x: [&[BlockQ8]; N]) -> [[f32; ROWS]; N] {
        dot_group::<B, N>(isa, group, x)
    }
}

/// Rows per tile.
pub(crate) const ROWS: usize = 8;

/// Bytes of one tile (block `i` of eight rows).
pub(crate) const fn tile_bytes<B: Block32>() -> usize {
    ROWS * B::BYTES
}

/// Where a tile's parts start: the mins (after the eight `d`), the fifth bits and the quants.
pub(crate) const M_AT: usize = 16;
pub(crate) const fn h_at<B: Block32>() -> usize {
    16 + if B::MIN { 16 } else { 0 }
}
pub(crate) const fn q_at<B: Block32>() -> usize {
    h_at::<B>()
        + if matches!(B::QUANTS, Quants::Nibbles5) {
            32
        } else {
            0
        }
}

/// Packs a `[rows, nb · 32]` matrix of raw blocks into row groups of eight (the last one padded with zero
/// blocks, whose scales are 0): group `g`'s tiles are `nb` consecutive tiles.
pub(crate) fn pack<B: Block32>(raw: &[u8], rows: usize, nb: usize) -> Vec<u8> {
    let tb = tile_bytes::<B>();
    let groups = rows.div_ceil(ROWS);
    let mut out = vec![0u8; groups * nb * tb];
    for (gi, group) in out.chunks_exact_mut(nb * tb).enumerate() {
        for (i, tile) in group.chunks_exact_mut(tb).enumerate() {
            for r in 0..ROWS {
                let row = gi * ROWS + r;
                if row >= rows {
                    break;
                }
                let at = (row * nb + i) * B::BYTES;
                pack_block::<B>(&raw[at..at + B::BYTES], r, tile);
            }
        }
    }
    out
}

/// Puts one raw block as row `r` of `tile`.
fn pack_block<B: Block32>(b: &[u8], r: usize, tile: &mut [u8]) {
    tile[2 * r..2 * r + 2].copy_from_slice(&b[..2]);
    if B::MIN {
        let m = M_AT + 2 * r;
        tile[m..m + 2].copy_from_slice(&b[2..4]);
    }
    let q = quants::<B>(b);
    let (h, qa) = (h_at::<B>(), q_at::<B>());
    for v in 0..8 {
        for e in 0..4 {
            let x = q[4 * v + e];
            let lane = 4 * r + e;
            match B::QUANTS {
                Quants::Bytes => tile[qa + 32 * v + lane] = x,
                Quants::Nibbles | Quants::Nibbles5 => {
                    let nibble = if v < 4 { x & 0x0f } else { (x & 0x0f) << 4 };
                    tile[qa + 32 * (v % 4) + lane] |= nibble;
                    if B::QUANTS == Quants::Nibbles5 {
                        tile[h + lane] |= ((x >> 4) & 1) << v;
                    }
                }
            }
        }
    }
}

/// Row `r`'s 32 quants in `tile`, as [`quants`] gives them for the raw block.
fn tile_quants<B: Block32>(tile: &[u8], r: usize) -> [u8; 32] {
    let (h, qa) = (h_at::<B>(), q_at::<B>());
    let mut q = [0u8; 32];
    for v in 0..8 {
        for e in 0..4 {
            let lane = 4 * r + e;
            q[4 * v + e] = match B::QUANTS {
                Quants::Bytes => tile[qa + 32 * v + lane],
                Quants::Nibbles | Quants::Nibbles5 => {
                    let byte = tile[qa + 32 * (v % 4) + lane];
                    let nibble = if v < 4 { byte & 0x0f } else { byte >> 4 };
                    let fifth = if B::QUANTS == Quants::Nibbles5 {
                        ((tile[h + lane] >> v) & 1) << 4
                    } else {
                        0
                    };
                    nibble | fifth
                }
            };
        }
    }
    q
}

/// Writes row `r` of `tile` back as the raw block it was packed from (`out`: `B::BYTES` bytes).
pub(crate) fn unpack_block<B: Block32>(tile: &[u8], r: usize, out: &mut [u8]) {
    out[..2].copy_from_slice(&tile[2 * r..2 * r + 2]);
    if B::MIN {
        let m = M_AT + 2 * r;
        out[2..4].copy_from_slice(&tile[m..m + 2]);
    }
    store_quants::<B>(&tile_quants::<B>(tile, r), out);
}

/// The eight rows of one packed row group (`group`: its tiles) dotted with `N` activation rows, on the best
/// path `isa` allows: `out[t][r]`, bit for bit the canonical row dot (zero for padding rows).
#[inline]
pub(crate) fn dot_group<B: Block32, const N: usize>(
    isa: Isa,
    group: &[u8],
    x: [&[BlockQ8]; N],
) -> [[f32; ROWS]; N] {
    let nb = x
        .iter()
        .fold(group.len() / tile_bytes::<B>(), |n, x| n.min(x.len()));
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx512() {
            // SAFETY: `has_avx512` checked AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI on this processor; `nb`
            // tiles lie in `group` and `nb` blocks in every `x[t]`.
            return unsafe { x86::tile_vnni::<B, N>(group, nb, x) };
        }
        if isa.has_avx2() {
            // SAFETY: `has_avx2` checked AVX2, FMA and F16C; bounds as above.
            return unsafe { x86::tile_avx2::<B, N>(group, nb, x) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if isa.has_neon() {
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                // SAFETY: NEON is part of aarch64 and the dot-product extension was just detected; bounds as
                // above.
                return unsafe { neon::tile_sdot::<B, N>(group, nb, x) };
            }
            // SAFETY: NEON is part of every aarch64 processor; bounds as above.
            return unsafe { neon::tile_mull::<B, N>(group, nb, x) };
        }
    }
    let _ = isa;
    tile_scalar::<B, N>(group, nb, x)
}

/// The portable path: each row's canonical sum, read straight out of the tiles.
fn tile_scalar<B: Block32, const N: usize>(
    group: &[u8],
    nb: usize,
    x: [&[BlockQ8]; N],
) -> [[f32; ROWS]; N] {
    let tb = tile_bytes::<B>();
    let mut out = [[0f32; ROWS]; N];
    for r in 0..ROWS {
        let mut acc = [0f32; N];
        let mut mins = [0f32; N];
        for (i, tile) in group.chunks_exact(tb).take(nb).enumerate() {
            let q = tile_quants::<B>(tile, r);
            let d = f16_at(tile, 2 * r);
            for t in 0..N {
                let a = &x[t][i];
                let isum: i32 = q
                    .iter()
                    .zip(&a.qs)
                    .map(|(&q, &y)| weight::<B>(q) * y as i32)
                    .sum();
                acc[t] = (d * a.d).mul_add(isum as f32, acc[t]);
                if B::MIN {
                    mins[t] = f16_at(tile, M_AT + 2 * r).mul_add(a.s, mins[t]);
                }
            }
        }
        for (out, (acc, mins)) in out.iter_mut().zip(acc.iter().zip(&mins)) {
            out[r] = if B::MIN { acc + mins } else { *acc };
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
