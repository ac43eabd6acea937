//! The `qwen2` architecture (Qwen2, Qwen2.5, Qwen2.5-Coder) and `qwen3` (Qwen3, Qwen3-Coder dense):
//! hyper-parameters from `qwen2.*` / `qwen3.*` metadata.
//!
//! Differences from llama: q/k/v projections carry biases (qwen2), and rotary embeddings use the NeoX layout
//! (the two halves of each head are rotated together) as llama.cpp does for these architectures. Qwen3 drops
//! the biases and RMS-normalises every head of q and k before the rotation (QK-norm); its head width
//! (`attention.key_length`, 128) need not be the hidden size over the heads.

use super::{Architecture, DecoderConfig, RopeStyle};
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
