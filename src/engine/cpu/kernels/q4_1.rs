//! Q4_1 weights (ggml `block_q4_1`, 20 bytes per 32 values): f16 `d`, f16 `m`, then 16 bytes of nibbles,
//! low nibbles elements 0..16 and high nibbles 16..32; value `j` is `d · q_j + m`. As in llama.cpp's
//! `ggml_vec_dot_q4_1_q8_1`, a block contributes `d_w d_x Σ q y + m_w s_x` with the activation's
//! `s = d_x Σ y`.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::kernels::block32::{Block32, Quants};

/// Q4_1 rows.
pub struct Q4_1;

impl Block32 for Q4_1 {
    const NAME: &'static str = "q4_1";
    const DTYPE: GgmlDType = GgmlDType::Q4_1;
    const QUANTS: Quants = Quants::Nibbles;
    const MIN: bool = true;
    const ZERO: i32 = 0;
}

#[cfg(test)]
mod tests {
    use crate::engine::cpu::kernels::block32::tests::random_block;
    use crate::engine::cpu::kernels::q4_1::Q4_1;
    use crate::engine::cpu::kernels::{packed, testing};

    #[test]
    fn matches_candle() {
        testing::check_kernel::<Q4_1>(random_block::<Q4_1>, |a| {
            a.qs.iter().map(|&q| q as f32 * a.d).collect()
        });
    }

    #[test]
    fn tiles_give_the_row_dot_bit_for_bit_on_every_isa() {
        packed::tests::check_tiles::<Q4_1>();
    }
}
