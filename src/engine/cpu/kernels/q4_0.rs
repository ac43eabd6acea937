//! Q4_0 weights (ggml `block_q4_0`, 18 bytes per 32 values): f16 `d`, then 16 bytes of nibbles, low nibbles
//! elements 0..16 and high nibbles 16..32; value `j` is `d · (q_j − 8)`.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{Block32, Quants};

/// Q4_0 rows.
pub struct Q4_0;

impl Block32 for Q4_0 {
    const NAME: &'static str = "q4_0";
    const DTYPE: GgmlDType = GgmlDType::Q4_0;
    const QUANTS: Quants = Quants::Nibbles;
    const MIN: bool = false;
    const ZERO: i32 = 8;
}

#[cfg(test)]
mod tests {
    use crate::engine::cpu::kernels::block32::tests::random_block;
    use crate::engine::cpu::kernels::q4_0::Q4_0;
    use crate::engine::cpu::kernels::{packed, testing};

    #[test]
    fn matches_candle() {
        testing::check_kernel::<Q4_0>(random_block::<Q4_0>, |a| {
            a.qs.iter().map(|&q| q as f32 * a.d).collect()
        });
    }

    #[test]
    fn tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
        packed::tests::check_tiles::<Q4_0>();
    }
}
