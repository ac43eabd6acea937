//! The `llama` architecture (SmolLM2, Llama 2/3, …): hyper-parameters from `llama.*` metadata.
//!
//! GGUF's llama tensors are stored permuted for llama.cpp's "normal" rotary mode, which rotates adjacent pairs
//! (interleaved); there are no q/k/v biases. Mistral and Devstral GGUFs are this architecture; a
//! `llama.attention.sliding_window` key (Mistral 7B v0.1's 4096) makes every layer attend within the window.

use super::{Architecture, DecoderConfig, RopeStyle, SlidingWindow};
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let mut c = DecoderConfig::from_metadata(
        gguf,
        Architecture::Llama,
        "llama",
        RopeStyle::Interleaved,
        false,
    )?;
    // Mistral 7B v0.1's window, where a converter wrote it: every layer attends within it, as Hugging Face and
    // vLLM run the model. (llama.cpp ignores the key for llama; the two agree up to the window's length.)
    let key = "llama.attention.sliding_window";
    let window = match gguf.has(key) {
        true => gguf.get_u32(key)? as usize,
        false => 0,
    };
    if window > 0 && window < c.context_length {
        c.sliding_window = Some(SlidingWindow {
            size: window,
            layers: vec![true; c.n_layer],
            rope_theta: None,
        });
    }
    Ok(c)
}
