//! The `qwen2` architecture (Qwen2, Qwen2.5, Qwen2.5-Coder): hyper-parameters from `qwen2.*` metadata.
//!
//! Differences from llama: q/k/v projections carry biases, and rotary embeddings use the NeoX layout (the
//! two halves of each head are rotated together) as llama.cpp does for this architecture.

use super::{Architecture, DecoderConfig, RopeStyle};
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    DecoderConfig::from_metadata(gguf, Architecture::Qwen2, "qwen2", RopeStyle::Neox, true)
}
