//! The `llama` architecture (SmolLM2, Llama 2/3, …): hyper-parameters from `llama.*` metadata.
//!
//! GGUF's llama tensors are stored permuted for llama.cpp's "normal" rotary mode, which rotates adjacent pairs
//! (interleaved); there are no q/k/v biases.

use super::{Architecture, DecoderConfig, RopeStyle};
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    DecoderConfig::from_metadata(
        gguf,
        Architecture::Llama,
        "llama",
        RopeStyle::Interleaved,
        false,
    )
}
