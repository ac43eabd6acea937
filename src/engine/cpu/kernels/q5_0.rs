//! Q5_0 weights (ggml `block_q5_0`, 22 bytes per 32 values): f16 `d`, a little-endian u32 of fifth bits
//! (bit `j` for element `j`), then 16 bytes of nibbles, low nibbles elements 0..16 and high nibbles 16..32;
//! value `j` is `d · ((q_j | h_j << 4) − 16)`. The −16 is applied to the unpacked quants, so each block's dot
//! with the activation quants is an exact signed-integer sum.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{self, Block32};

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Q5_0 rows.
pub struct Q5_0;

impl Block32 for Q5_0 {
    const NAME: &'static str = "q5_0";
    const DTYPE: GgmlDType = GgmlDType::Q5_0;
    const BYTES: usize = 22;
    const SIGNED: bool = true;

    fn idot(b: &[u8], y: &[i8; 32]) -> i32 {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = y.split_at(16);
        let mut sum = 0;
        for (j, (&q, (&y0, &y1))) in b[6..22].iter().zip(lo.iter().zip(hi)).enumerate() {
            let w0 = ((q & 0x0f) as u32 | ((qh >> j) & 1) << 4) as i32 - 16;
            let w1 = ((q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32 - 16;
            sum += w0 * y0 as i32 + w1 * y1 as i32;
        }
        sum
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn unpack_avx2(p: *const u8) -> __m256i {
        // SAFETY: the block is 22 bytes: the fifth bits at 2..6, the nibbles at 6..22.
        let (q, qh) = unsafe {
            (
                block32::x86::nibbles(p.add(6)),
                block32::x86::u32_at(p.add(2)),
            )
        };
        // (q | h << 4) − 16 is q where h is set and q − 16 = q | 0xf0 (as i8) where it is not.
        let clear =
            _mm256_andnot_si256(block32::x86::bit_bytes(qh), _mm256_set1_epi8(0xf0u8 as i8));
        _mm256_or_si256(q, clear)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn unpack_avx512(p: *const u8) -> __m256i {
        // SAFETY: the block is 22 bytes: the fifth bits at 2..6, the nibbles at 6..22.
        let (q, qh) = unsafe {
            (
                block32::x86::nibbles(p.add(6)),
                block32::x86::u32_at(p.add(2)),
            )
        };
        // q − 16 in the bytes whose fifth bit is clear (the mask register is the inverted bits).
        _mm256_mask_sub_epi8(q, !qh, q, _mm256_set1_epi8(16))
    }

    #[cfg(target_arch = "aarch64")]
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn unpack_neon(p: *const u8) -> (int8x16_t, int8x16_t) {
        // SAFETY: the block is 22 bytes: the fifth bits at 2..6, the nibbles at 6..22.
        let (lo, hi, qh) = unsafe {
            let (lo, hi) = block32::neon::nibbles(p.add(6));
            (
                lo,
                hi,
                u32::from_le_bytes(std::ptr::read_unaligned(p.add(2).cast::<[u8; 4]>())),
            )
        };
        let (h0, h1) = block32::neon::fifth_bits(qh);
        let sixteen = vdupq_n_s8(16);
        (
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, h0)), sixteen),
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, h1)), sixteen),
        )
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use crate::engine::cpu::kernels::q5_0::Q5_0;
    use crate::engine::cpu::kernels::testing;

    fn block(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
        let mut b = testing::scale(rng, 0.03).to_vec();
        b.extend(rng.gen::<u32>().to_le_bytes());
        b.extend((0..16).map(|_| rng.gen::<u8>()));
        b
    }

    #[test]
    fn matches_candle_on_every_isa() {
        testing::check_kernel::<Q5_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    #[test]
    fn long_rows_agree_with_scalar_on_every_isa() {
        testing::check_long_rows::<Q5_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }
}
