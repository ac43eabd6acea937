//! The CPU engine's token embedding table: kept in its file type (read in place from the mapped GGUF, or, for a
//! table tied to a repacked output head, read back out of the head's tiles), one row dequantized per
//! looked-up token.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::GgmlDType;
use candle_core::Device;

use crate::engine::cpu::qmatrix::QMatrix;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::SharedBytes;

/// The token embedding table, kept in its file type; rows are dequantized when looked up.
pub(super) struct Embedding {
    pub data: SharedBytes,
    pub dtype: GgmlDType,
    pub row_bytes: usize,
    pub cols: usize,
    /// The table is the output head's matrix (tied embeddings): rows are read from the head when it keeps
    /// them in another layout, so that the file's pages need not stay resident as well.
    pub tied: bool,
}

impl Embedding {
    /// Writes the embedding of `token` into `out` (`cols` values); `head` is the output head.
    pub fn row(&self, token: u32, out: &mut [f32], head: &QMatrix) -> Result<()> {
        use candle_core::quantized::k_quants as kq;
        let at = token as usize * self.row_bytes;
        let stored = self.data.get(at..at + self.row_bytes).ok_or_else(|| {
            EngineError::Internal(format!("token id {token} is outside the vocabulary"))
        })?;
        let mut from_head = Vec::new();
        let bytes = if self.tied {
            from_head.resize(self.row_bytes, 0);
            match head.raw_row(token as usize, &mut from_head) {
                true => &from_head[..],
                false => stored,
            }
        } else {
            stored
        };
        let done = match self.dtype {
            GgmlDType::Q4_0 => to_float::<kq::BlockQ4_0>(bytes, out),
            GgmlDType::Q4_1 => to_float::<kq::BlockQ4_1>(bytes, out),
            GgmlDType::Q5_0 => to_float::<kq::BlockQ5_0>(bytes, out),
            GgmlDType::Q5_1 => to_float::<kq::BlockQ5_1>(bytes, out),
            GgmlDType::Q8_0 => to_float::<kq::BlockQ8_0>(bytes, out),
            GgmlDType::Q2K => to_float::<kq::BlockQ2K>(bytes, out),
            GgmlDType::Q3K => to_float::<kq::BlockQ3K>(bytes, out),
            GgmlDType::Q4K => to_float::<kq::BlockQ4K>(bytes, out),
            GgmlDType::Q5K => to_float::<kq::BlockQ5K>(bytes, out),
            GgmlDType::Q6K => to_float::<kq::BlockQ6K>(bytes, out),
            _ => false,
        };
        if !done {
            // f32/f16/bf16 tables (and any block the cast below refused): through a one-row tensor.
            let row = qtensor_from_ggml(self.dtype, bytes, vec![self.cols], &Device::Cpu)?
                .dequantize(&Device::Cpu)?
                .to_vec1::<f32>()?;
            out.copy_from_slice(&row);
        }
        Ok(())
    }
}

/// Dequantizes `bytes` (whole blocks of `T`) into `out` without copying, when the bytes are aligned for `T`.
fn to_float<T: candle_core::quantized::GgmlType>(bytes: &[u8], out: &mut [f32]) -> bool {
    let size = std::mem::size_of::<T>();
    if size == 0
        || !bytes.len().is_multiple_of(size)
        || bytes.len() / size * T::BLCK_SIZE != out.len()
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return false;
    }
    // SAFETY: candle's block types are `repr(C)` structs of plain numbers (any bit pattern is a value), the
    // pointer is aligned for `T` (checked above) and the slice covers exactly `len / size` blocks.
    let blocks =
        unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) };
    T::to_float(blocks, out);
    true
}
