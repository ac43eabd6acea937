//! The 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), which all dot with [`BlockQ8`] activations: what
//! a type's block holds ([`Block32`]: its quants, scale and min), and the one order of float operations every
//! path follows, written out here as the reference (`vec_dot`).
//!
//! The canonical sum of a weight row `w` with an activation row `x` (blocks `i` in order):
//! - the block's integer dot `Σ_j w_j y_j`, exact (`w_j` the signed weight quant: `q_j − zero`, or the i8 of
//!   Q8_0; for the types with a min, the unsigned `q_j`);
//! - `acc = fma(d_w · d_x, isum, acc)`, and for the types with a min `mins = fma(m_w, s_x, mins)` (the
//!   activation's `s = d_x Σ y`, as llama.cpp's `ggml_vec_dot_q4_1_q8_1` uses it);
//! - the result is `acc` (`acc + mins` with a min).
//!
//! The matrices run these types as row-interleaved tiles ([`super::packed`]), whose SIMD paths compute exactly
//! this sum for each of their rows: a token's result is bit for bit the same on every path, however it is
//! batched or tiled.

use candle_core::quantized::GgmlDType;

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::BlockQ8;
use crate::engine::cpu::isa::Isa;

/// How a type stores its 32 quants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quants {
    /// 16 bytes of nibbles: low nibbles are elements 0..16, high nibbles 16..32 (Q4_0, Q4_1).
    Nibbles,
    /// A little-endian u32 of fifth bits (bit `j` for element `j`), then nibbles as above (Q5_0, Q5_1).
    Nibbles5,
    /// 32 signed bytes (Q8_0).
    Bytes,
}

/// A 32-value weight block layout: an f16 `d`, an f16 `m` for the types with a min, then the quants.
pub(crate) trait Block32 {
    /// The type's name and GGUF type (for [`WeightKernel`]).
    const NAME: &'static str;
    #[cfg_attr(not(test), allow(dead_code))]
    const DTYPE: GgmlDType;
    const QUANTS: Quants;
    /// Whether the block has an f16 min `m` after `d` (value `d · q + m`).
    const MIN: bool;
    /// The zero point subtracted from the unsigned quants (Q4_0: 8, Q5_0: 16; 0 for Q8_0 and the types with
    /// a min).
    const ZERO: i32;
    /// Bytes per block.
    const BYTES: usize = 2
        + if Self::MIN { 2 } else { 0 }
        + match Self::QUANTS {
            Quants::Nibbles => 16,
            Quants::Nibbles5 => 20,
            Quants::Bytes => 32,
        };
}

/// Where a block's parts start.
pub(crate) const fn quants_at<B: Block32>() -> usize {
    2 + if B::MIN { 2 } else { 0 }
}

/// The block's 32 quants as stored: below 16 (nibbles), below 32 (with the fifth bits), or Q8_0's i8 bits.
pub(crate) fn quants<B: Block32>(b: &[u8]) -> [u8; 32] {
    let at = quants_at::<B>();
    let mut q = [0u8; 32];
    match B::QUANTS {
        Quants::Bytes => q.copy_from_slice(&b[at..at + 32]),
        Quants::Nibbles | Quants::Nibbles5 => {
            let (h, qs) = if B::QUANTS == Quants::Nibbles5 {
                let h = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                (h, &b[at + 4..at + 20])
            } else {
                (0, &b[at..at + 16])
            };
            for (j, &byte) in qs.iter().enumerate() {
                q[j] = (byte & 0x0f) | (((h >> j) & 1) << 4) as u8;
                q[j + 16] = (byte >> 4) | (((h >> (j + 16)) & 1) << 4) as u8;
            }
        }
    }
    q
}

/// Writes a block's quants (as [`quants`] gives them) back into its stored form at `b` (the scales untouched).
pub(crate) fn store_quants<B: Block32>(q: &[u8; 32], b: &mut [u8]) {
    let at = quants_at::<B>();
    match B::QUANTS {
        Quants::Bytes => b[at..at + 32].copy_from_slice(q),
        Quants::Nibbles | Quants::Nibbles5 => {
            let mut at = at;
            if B::QUANTS == Quants::Nibbles5 {
                let h = (0..32).fold(0u32, |h, j| h | (((q[j] >> 4) & 1) as u32) << j);
                b[at..at + 4].copy_from_slice(&h.to_le_bytes());
                at += 4;
            }
            for j in 0..16 {
                b[at + j] = (q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4;
            }
        }
    }
}

/// The weight quant as the integer dot uses it: signed (`q − zero`, or Q8_0's i8) or, with a min, unsigned.
#[inline(always)]
pub(crate) fn weight<B: Block32>(q: u8) -> i32 {
    if B::QUANTS == Quants::Bytes {
        q as i8 as i32
    } else {
        q as i32 - B::ZERO
    }
}

/// `Σ w_j y_j` over one block (exact).
pub(crate) fn idot<B: Block32>(b: &[u8], y: &[i8; 32]) -> i32 {
    quants::<B>(b)
        .iter()
        .zip(y)
        .map(|(&q, &y)| weight::<B>(q) * y as i32)
        .sum()
}

/// Every 32-value block type is a [`WeightKernel`]; its row dot is the canonical sum (on every `isa`: the
/// SIMD paths are the tiles').
impl<B: Block32 + Send + Sync + 'static> WeightKernel for B {
    const NAME: &'static str = B::NAME;
    const DTYPE: GgmlDType = B::DTYPE;
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = B::BYTES;
    type Act = BlockQ8;

    fn vec_dot(_isa: Isa, w: &[u8], x: &[BlockQ8]) -> f32 {
        let mut acc = 0f32;
        let mut mins = 0f32;
        for (b, a) in w.chunks_exact(B::BYTES).zip(x) {
            acc = (f16_at(b, 0) * a.d).mul_add(idot::<B>(b, &a.qs) as f32, acc);
            if B::MIN {
                mins = f16_at(b, 2).mul_add(a.s, mins);
            }
        }
        if B::MIN {
            acc + mins
        } else {
            acc
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{quants, store_quants, Block32};
    use crate::engine::cpu::kernels::{q4_0::Q4_0, q4_1::Q4_1, q5_0::Q5_0, q5_1::Q5_1, q8_0::Q8_0};

    /// A random block of `B` with a finite scale (and min).
    pub fn random_block<B: Block32>(rng: &mut StdRng) -> Vec<u8> {
        let mut b: Vec<u8> = (0..B::BYTES).map(|_| rng.gen()).collect();
        b[..2].copy_from_slice(&half::f16::from_f32(rng.gen_range(-0.05..0.05)).to_le_bytes());
        if B::MIN {
            b[2..4].copy_from_slice(&half::f16::from_f32(rng.gen_range(-0.2..0.2)).to_le_bytes());
        }
        b
    }

    fn round_trip<B: Block32>() {
        let mut rng = StdRng::seed_from_u64(B::BYTES as u64);
        for _ in 0..50 {
            let b = random_block::<B>(&mut rng);
            let mut back = b.clone();
            back[super::quants_at::<B>()..].fill(0);
            store_quants::<B>(&quants::<B>(&b), &mut back);
            assert_eq!(back, b, "{}", B::NAME);
        }
    }

    #[test]
    fn quants_are_read_and_stored_back_exactly() {
        round_trip::<Q4_0>();
        round_trip::<Q4_1>();
        round_trip::<Q5_0>();
        round_trip::<Q5_1>();
        round_trip::<Q8_0>();
    }
}
