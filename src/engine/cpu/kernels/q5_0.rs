//! Q5_0 weights (ggml `block_q5_0`, 22 bytes per 32 values): f16 `d`, a little-endian u32 of fifth bits
//! (bit `j` for element `j`), then 16 bytes of nibbles, low nibbles elements 0..16 and high nibbles 16..32;
//! value `j` is `d · ((q_j | h_j << 4) − 16)`.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{Block32, Quants};

/// Q5_0 rows.
pub struct Q5_0;

impl Block32 for Q5_0 {
    const NAME: &'static str = "q5_0";
    const DTYPE: GgmlDType = GgmlDType::Q5_0;
    const QUANTS: Quants = Quants::Nibbles5;
    const MIN: bool = false;
    const ZERO: i32 = 16;
}

#[cfg(test)]
mod tests {
    use crate::engine::cpu::kernels::block32::tests::random_block;
    use crate::engine::cpu::kernels::q5_0::Q5_0;
    use crate::engine::cpu::kernels::{packed, testing};

    #[test]
    fn matches_candle() {
        testing::check_kernel::<Q5_0>(random_block::<Q5_0>, |a| {
            a.qs.iter().map(|&q| q as f32 * a.d).collect()
        });
    }

    #[test]
    fn tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
        packed::tests::check_tiles::<Q5_0>();
    }
}
