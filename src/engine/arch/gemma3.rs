//! The `gemma3` architecture (Gemma 3 text models): hyper-parameters from `gemma3.*` metadata, as llama.cpp reads
//! them.
//!
//! Differences from llama: embeddings are scaled by `sqrt(hidden)`; q and k are RMS-normalised per head before
//! the (NeoX) rotation; the attention and the MLP outputs are RMS-normalised again before their residual adds;
//! the MLP is GeGLU (tanh GELU); the output head is the embedding. Norm weights are used as stored (llama.cpp's
//! converter already added Gemma's `1 +`). When `attention.sliding_window` is set, five of every six layers
//! (`attention.sliding_window_pattern`, default 6; or a per-layer array) attend within the window and rotate with
//! `rope.freq_base_swa` (default 10 000) unscaled; the others rotate with `rope.freq_base` and the linear
//! `rope.scaling.factor`. q·k is scaled by `1/sqrt(key_length)` (by `1/sqrt(hidden/heads)` for the 62-layer 27B).
//! `final_logit_softcapping` caps the logits when present.

use crate::engine::gguf::MetaValue as Value;

use super::{opt_f32, Activation, Architecture, DecoderConfig, RopeStyle, SlidingWindow};
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;

pub fn config(gguf: &GgufFile) -> Result<DecoderConfig> {
    let mut c =
        DecoderConfig::from_metadata(gguf, Architecture::Gemma3, "gemma3", RopeStyle::Neox, false)?;
    c.qk_norm = true;
    c.post_norms = true;
    c.activation = Activation::GeluTanh;
    c.embed_scale = Some((c.hidden as f32).sqrt());
    c.attn_scale = if c.n_layer == 62 {
        1.0 / ((c.hidden / c.n_head) as f32).sqrt()
    } else {
        1.0 / (c.head_dim as f32).sqrt()
    };
    c.final_logit_softcap = opt_f32(gguf, "gemma3.final_logit_softcapping")?.filter(|&v| v > 0.0);
    let window = match gguf.has("gemma3.attention.sliding_window") {
        true => gguf.get_u32("gemma3.attention.sliding_window")? as usize,
        false => 0,
    };
    if window > 0 {
        c.sliding_window = Some(SlidingWindow {
            size: window,
            layers: swa_layers(gguf, c.n_layer)?,
            rope_theta: Some(opt_f32(gguf, "gemma3.rope.freq_base_swa")?.unwrap_or(10_000.0)),
        });
    }
    Ok(c)
}

/// Which layers use the window: `attention.sliding_window_pattern` as one flag per layer, or as a period `n`
/// (every `n`-th layer global, from layer `n - 1`); 6 when absent.
fn swa_layers(gguf: &GgufFile, n_layer: usize) -> Result<Vec<bool>> {
    const KEY: &str = "gemma3.attention.sliding_window_pattern";
    let invalid = |message: String| EngineError::InvalidGguf {
        path: gguf.path.clone(),
        message,
    };
    let period = |n: usize| (0..n_layer).map(|il| n == 0 || il % n < n - 1).collect();
    if !gguf.has(KEY) {
        return Ok(period(6));
    }
    if let Ok(values) = gguf.get_array(KEY) {
        if values.len() != n_layer {
            return Err(invalid(format!(
                "{KEY} has {} entries for {n_layer} layers",
                values.len()
            )));
        }
        return values
            .iter()
            .map(|v| match v {
                Value::Bool(b) => Ok(*b),
                Value::U32(n) => Ok(*n != 0),
                Value::I32(n) => Ok(*n != 0),
                other => Err(invalid(format!("{KEY}: unexpected entry {other:?}"))),
            })
            .collect();
    }
    Ok(period(gguf.get_u32(KEY)? as usize))
}
