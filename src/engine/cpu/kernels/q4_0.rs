//! Q4_0 weights (ggml `block_q4_0`, 18 bytes per 32 values): f16 `d`, then 16 bytes of nibbles, low nibbles
//! elements 0..16 and high nibbles 16..32; value `j` is `d · (q_j − 8)`. The −8 is applied to the unpacked
//! quants, so each block's dot with the activation quants is an exact signed-integer sum.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{self, Block32};

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Q4_0 rows.
pub struct Q4_0;

impl Block32 for Q4_0 {
    const NAME: &'static str = "q4_0";
    const DTYPE: GgmlDType = GgmlDType::Q4_0;
    const BYTES: usize = 18;
    const SIGNED: bool = true;

    fn idot(b: &[u8], y: &[i8; 32]) -> i32 {
        let (lo, hi) = y.split_at(16);
        b[2..18]
            .iter()
            .zip(lo.iter().zip(hi))
            .map(|(&q, (&y0, &y1))| {
                ((q & 0x0f) as i32 - 8) * y0 as i32 + ((q >> 4) as i32 - 8) * y1 as i32
            })
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn unpack_avx2(p: *const u8) -> __m256i {
        // SAFETY: the block's 16 quant bytes follow its 2-byte scale (the caller guarantees the block).
        let q = unsafe { block32::x86::nibbles(p.add(2)) };
        _mm256_sub_epi8(q, _mm256_set1_epi8(8))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn unpack_avx512(p: *const u8) -> __m256i {
        // SAFETY: as for `unpack_avx2`, whose features this function has.
        unsafe { Self::unpack_avx2(p) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn unpack_vnni(p: *const u8) -> __m256i {
        // SAFETY: the block's 16 quant bytes follow its 2-byte scale (the caller guarantees the block).
        let q = unsafe { block32::x86::nibbles(p.add(2)) };
        // (q − 8) + 128.
        _mm256_add_epi8(q, _mm256_set1_epi8(120))
    }

    #[cfg(target_arch = "aarch64")]
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn unpack_neon(p: *const u8) -> (int8x16_t, int8x16_t) {
        // SAFETY: the block's 16 quant bytes follow its 2-byte scale.
        let (lo, hi) = unsafe { block32::neon::nibbles(p.add(2)) };
        let eight = vdupq_n_s8(8);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), eight),
            vsubq_s8(vreinterpretq_s8_u8(hi), eight),
        )
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use crate::engine::cpu::kernels::q4_0::Q4_0;
    use crate::engine::cpu::kernels::testing;

    fn block(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
        let mut b = testing::scale(rng, 0.05).to_vec();
        b.extend((0..16).map(|_| rng.gen::<u8>()));
        b
    }

    #[test]
    fn matches_candle_on_every_isa() {
        testing::check_kernel::<Q4_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    #[test]
    fn long_rows_agree_with_scalar_on_every_isa() {
        testing::check_long_rows::<Q4_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }
}
