//! The `phi3` architecture (Phi-3, Phi-3.5, Phi-4-mini): hyper-parameters from `phi3.*` metadata, as llama.cpp
//! reads them.
//!
//! Differences from llama: q, k and v come fused in one `attn_qkv` matrix (rows q | k | v) and the MLP's gate and
//! up in one `ffn_up` of twice the width (rows gate | up); both are split into separate matrices at load (see
//! the loaders). Rotation is NeoX-style over `rope.dimension_count` dimensions (Phi-4-mini rotates three
//! quarters of each head). LongRoPE checkpoints carry `rope_factors_long` and `rope_factors_short`: as llama.cpp
//! does for a context of the model's full length, the long factors are used when that length exceeds
//! `rope.scaling.original_context_length`, the short ones otherwise; `rope.scaling.attn_factor` scales cos and
//! sin. `attention.sliding_window` is read but not applied, as in llama.cpp (which disables Phi's SWA).

use super::{rope_freq_factors, Architecture, DecoderConfig, RopeStyle};
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let mut c =
        DecoderConfig::from_metadata(gguf, Architecture::Phi3, "phi3", RopeStyle::Neox, false)?;
    if c.rope_freq_factors.is_none() {
        let original = match gguf.has("phi3.rope.scaling.original_context_length") {
            true => gguf.get_u32("phi3.rope.scaling.original_context_length")? as usize,
            false => c.context_length,
        };
        let name = if c.context_length > original {
            "rope_factors_long.weight"
        } else {
            "rope_factors_short.weight"
        };
        c.rope_freq_factors = rope_freq_factors(gguf, name, c.rope_dims)?;
    }
    if gguf.has("phi3.attention.sliding_window") {
        tracing::debug!("phi3: attention.sliding_window is not applied (as in llama.cpp)");
    }
    Ok(c)
}
