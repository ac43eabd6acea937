//! Q5_1 weights (ggml `block_q5_1`, 24 bytes per 32 values): f16 `d`, f16 `m`, a little-endian u32 of fifth
//! bits, then 16 bytes of nibbles; value `j` is `d · (q_j | h_j << 4) + m` (the min enters as for Q4_1).

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{Block32, Quants};

/// Q5_1 rows.
pub struct Q5_1;

impl Block32 for Q5_1 {
    const NAME: &'static str = "q5_1";
    const DTYPE: GgmlDType = GgmlDType::Q5_1;
    const QUANTS: Quants = Quants::Nibbles5;
    const MIN: bool = true;
    const ZERO: i32 = 0;
}

#[cfg(test)]
mod tests {
    use crate::engine::cpu::kernels::block32::tests::random_block;
    use crate::engine::cpu::kernels::q5_1::Q5_1;
    use crate::engine::cpu::kernels::{packed, testing};

    #[test]
    fn matches_candle() {
        testing::check_kernel::<Q5_1>(random_block::<Q5_1>, |a| {
            a.qs.iter().map(|&q| q as f32 * a.d).collect()
        });
    }

    #[test]
    fn tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
        packed::tests::check_tiles::<Q5_1>();
    }
}
