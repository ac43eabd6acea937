//! The `qwen2` architecture (Qwen2, Qwen2.5, Qwen2.5-Coder), `qwen3` (Qwen3, Qwen3-Coder dense) and `qwen3moe`
//! (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): hyper-parameters from `qwen2.*` / `qwen3.*` / `qwen3moe.*` metadata.
//!
//! Differences from llama: q/k/v projections carry biases (qwen2), and rotary embeddings use the NeoX layout
//! (the two halves of each head are rotated together) as llama.cpp does for these architectures. Qwen3 drops
//! the biases and RMS-normalises every head of q and k before the rotation (QK-norm); its head width
//! (`attention.key_length`, 128) need not be the hidden size over the heads.

use super::{Architecture, DecoderConfig, Moe, RopeStyle};
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    DecoderConfig::from_metadata(gguf, Architecture::Qwen2, "qwen2", RopeStyle::Neox, true)
}

pub fn qwen3_config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let mut config =
        DecoderConfig::from_metadata(gguf, Architecture::Qwen3, "qwen3", RopeStyle::Neox, false)?;
    config.qk_norm = true;
    Ok(config)
}

/// Qwen3-MoE: Qwen3's attention; every layer's MLP is a routed mixture of `expert_count` experts, of which
/// `expert_used_count` run per token, each `expert_feed_forward_length` wide.
pub fn qwen3moe_config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let mut config = DecoderConfig::from_metadata(
        gguf,
        Architecture::Qwen3Moe,
        "qwen3moe",
        RopeStyle::Neox,
        false,
    )?;
    config.qk_norm = true;
    let get = |k: &str| gguf.get_u32(&format!("qwen3moe.{k}")).map(|v| v as usize);
    let moe = Moe {
        experts: get("expert_count")?,
        used: get("expert_used_count")?,
        ff: get("expert_feed_forward_length")?,
    };
    if moe.used == 0 || moe.used > moe.experts {
        return Err(crate::engine::error::EngineError::InvalidGguf {
            path: gguf.path.clone(),
            message: format!("{} experts used of {}", moe.used, moe.experts),
        });
    }
    config.moe = Some(moe);
    Ok(config)
}
