//! Q8_0 weights (ggml `block_q8_0`, 34 bytes per 32 values): f16 `d`, then 32 signed bytes; value `j` is
//! `d · q_j`.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::Block32;

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Q8_0 rows.
pub struct Q8_0;

impl Block32 for Q8_0 {
    const NAME: &'static str = "q8_0";
    const DTYPE: GgmlDType = GgmlDType::Q8_0;
    const BYTES: usize = 34;
    const SIGNED: bool = true;

    fn idot(b: &[u8], y: &[i8; 32]) -> i32 {
        b[2..34]
            .iter()
            .zip(y)
            .map(|(&q, &y)| q as i8 as i32 * y as i32)
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn unpack_avx2(p: *const u8) -> __m256i {
        // SAFETY: the block's 32 quant bytes follow its 2-byte scale (the caller guarantees the block).
        unsafe { _mm256_loadu_si256(p.add(2).cast()) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn unpack_avx512(p: *const u8) -> __m256i {
        // SAFETY: as for `unpack_avx2`, whose features this function has.
        unsafe { Self::unpack_avx2(p) }
    }

    #[cfg(target_arch = "aarch64")]
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn unpack_neon(p: *const u8) -> (int8x16_t, int8x16_t) {
        // SAFETY: the block's 32 quant bytes follow its 2-byte scale.
        unsafe { (vld1q_s8(p.add(2).cast()), vld1q_s8(p.add(18).cast())) }
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use crate::engine::cpu::kernels::q8_0::Q8_0;
    use crate::engine::cpu::kernels::testing;

    fn block(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
        let mut b = testing::scale(rng, 0.01).to_vec();
        b.extend((0..32).map(|_| rng.gen::<u8>()));
        b
    }

    #[test]
    fn matches_candle_on_every_isa() {
        testing::check_kernel::<Q8_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }

    #[test]
    fn long_rows_agree_with_scalar_on_every_isa() {
        testing::check_long_rows::<Q8_0>(block, |a| a.qs.iter().map(|&q| q as f32 * a.d).collect());
    }
}
