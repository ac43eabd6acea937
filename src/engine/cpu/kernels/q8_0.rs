//! Q8_0 weights (ggml `block_q8_0`, 34 bytes per 32 values): f16 `d`, then 32 signed bytes; value `j` is
//! `d · q_j`.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{Block32, Quants};

/// Q8_0 rows.
pub struct Q8_0;

impl Block32 for Q8_0 {
    const NAME: &'static str = "q8_0";
    const DTYPE: GgmlDType = GgmlDType::Q8_0;
    const QUANTS: Quants = Quants::Bytes;
    const MIN: bool = false;
    const ZERO: i32 = 0;
}

#[cfg(test)]
mod tests {
    use crate::engine::cpu::kernels::block32::tests::random_block;
    use crate::engine::cpu::kernels::q8_0::Q8_0;
    use crate::engine::cpu::kernels::{packed, testing};

    #[test]
    fn matches_candle() {
        testing::check_kernel::<Q8_0>(random_block::<Q8_0>, |a| {
            a.qs.iter().map(|&q| q as f32 * a.d).collect()
        });
    }

    #[test]
    fn tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
        packed::tests::check_tiles::<Q8_0>();
    }
}
