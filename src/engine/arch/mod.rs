//! What an architecture is: the supported families ([`Architecture`]), the one [`DecoderConfig`] both forward
//! passes run from, and the weight loader they share (`weights.rs`). One file per family (`llama.rs`,
//! `qwen2.rs` with qwen3, `gemma3.rs`, `phi3.rs`) reads that family's hyper-parameters from the GGUF metadata;
//! [`DecoderConfig::read`] picks the file. Nothing here runs a forward pass or holds sequence state.

pub mod gemma3;
pub mod llama;
pub mod phi3;
pub mod qwen2;
pub mod weights;

use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;

/// Architectures with an implementation here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Phi3,
    Qwen3Moe,
}

impl Architecture {
    pub const SUPPORTED: &'static [&'static str] =
        &["llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"];

    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            "qwen3" => Ok(Self::Qwen3),
            "gemma3" => Ok(Self::Gemma3),
            "phi3" => Ok(Self::Phi3),
            "qwen3moe" => Ok(Self::Qwen3Moe),
            other => Err(EngineError::UnsupportedArchitecture {
                arch: other.into(),
                supported: Self::SUPPORTED.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
            Self::Phi3 => "phi3",
            Self::Qwen3Moe => "qwen3moe",
        }
    }
}

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (llama.cpp's "normal" mode; GGUF llama weights are permuted for it).
    Interleaved,
    /// First half with second half (GPT-NeoX layout; Qwen2).
    Neox,
}

/// Hyper-parameters of a decoder-only transformer, read from GGUF metadata.
#[derive(Debug, Clone)]
pub struct DecoderConfig {
    pub arch: Architecture,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub context_length: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    pub qkv_bias: bool,
    /// Each head of q and k is RMS-normalised (its own weights, `attn_q_norm` / `attn_k_norm`) before rotary
    /// embeddings: Qwen3's QK-norm.
    pub qk_norm: bool,
    /// Llama 3.1+'s rope scaling as llama.cpp stores it: one divisor per rotary frequency (`rope_freqs.weight`,
    /// `rope_dims / 2` values; Phi-3's long or short factors). `None`: plain RoPE.
    pub rope_freq_factors: Option<Vec<f32>>,
    /// How many dimensions of each head are rotated (`rope.dimension_count`; Phi-4-mini rotates 3/4 of them).
    pub rope_dims: usize,
    /// Linear rope scaling of the global layers: positions are multiplied by this (`1 / rope.scaling.factor`).
    pub rope_freq_scale: f32,
    /// Multiplies cos and sin (Phi-3's LongRoPE `rope.scaling.attn_factor`).
    pub rope_attn_factor: f32,
    /// The scale of `q·k` (`1/sqrt(head_dim)` unless the architecture says otherwise).
    pub attn_scale: f32,
    /// Token embeddings are multiplied by this (Gemma: `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
    /// RMS norms after the attention and after the MLP, before each residual add (Gemma's
    /// `post_attention_norm` / `post_ffw_norm`).
    pub post_norms: bool,
    /// The MLP's gate activation.
    pub activation: Activation,
    /// Sliding-window attention on some layers.
    pub sliding_window: Option<SlidingWindow>,
    /// `cap · tanh(logit / cap)` on the output logits (Gemma's final soft-capping).
    pub final_logit_softcap: Option<f32>,
    /// A routed mixture of experts in place of the dense MLP (Qwen3-MoE).
    pub moe: Option<Moe>,
}

/// A mixture of experts as llama.cpp runs Qwen3-MoE's: a softmax over the router's logits, the `used` most
/// likely experts, their probabilities renormalised to sum to one, each expert a SwiGLU MLP of width `ff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moe {
    pub experts: usize,
    pub used: usize,
    pub ff: usize,
}

impl Moe {
    /// The experts a token goes to and their weights, from the router's logits.
    pub fn route(&self, logits: &[f32]) -> Vec<(usize, f32)> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let total: f32 = exp.iter().sum();
        let probs: Vec<f32> = exp.iter().map(|e| e / total).collect();
        let mut order: Vec<usize> = (0..probs.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        order.truncate(self.used);
        // llama.cpp clamps the sum before dividing.
        let sum = order
            .iter()
            .map(|&e| probs[e])
            .sum::<f32>()
            .max(6.103_515_6e-5);
        order.into_iter().map(|e| (e, probs[e] / sum)).collect()
    }
}

/// The activation applied to the MLP's gate before it multiplies the up projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU (llama, qwen, phi3).
    Silu,
    /// GeGLU with the tanh approximation of GELU (gemma).
    GeluTanh,
}

/// Sliding-window attention: a query at position `p` sees keys at `p - size < j <= p` on the layers flagged
/// here (llama.cpp's standard SWA); those layers rotate with their own base and no scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingWindow {
    pub size: usize,
    /// Per layer: whether it is a sliding-window layer.
    pub layers: Vec<bool>,
    /// The rope base of the sliding-window layers, which then rotate unscaled (Gemma 3); `None`: they rotate as
    /// the global layers do (Mistral).
    pub rope_theta: Option<f32>,
}

impl SlidingWindow {
    pub fn on_layer(&self, layer: usize) -> bool {
        self.layers.get(layer).copied().unwrap_or(false)
    }

    /// The first key position a query at `pos` sees.
    pub fn start(&self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.size)
    }
}

impl DecoderConfig {
    pub(crate) fn from_metadata(
        gguf: &GgufFile,
        arch: Architecture,
        prefix: &str,
        rope_style: RopeStyle,
        qkv_bias: bool,
    ) -> Result<Self> {
        let key = |k: &str| format!("{prefix}.{k}");
        let n_head = gguf.get_u32(&key("attention.head_count"))? as usize;
        let n_kv_head = if gguf.has(&key("attention.head_count_kv")) {
            gguf.get_u32(&key("attention.head_count_kv"))? as usize
        } else {
            n_head
        };
        let hidden = gguf.get_u32(&key("embedding_length"))? as usize;
        if n_head == 0
            || n_kv_head == 0
            || !n_head.is_multiple_of(n_kv_head)
            || !hidden.is_multiple_of(n_head)
        {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "inconsistent attention shape: {n_head} heads, {n_kv_head} KV heads, width {hidden}"
                ),
            });
        }
        let head_dim = if gguf.has(&key("attention.key_length")) {
            gguf.get_u32(&key("attention.key_length"))? as usize
        } else {
            hidden / n_head
        };
        let rope_theta = if gguf.has(&key("rope.freq_base")) {
            gguf.get_f32(&key("rope.freq_base"))?
        } else {
            10_000.0
        };
        let rope_dims = if gguf.has(&key("rope.dimension_count")) {
            gguf.get_u32(&key("rope.dimension_count"))? as usize
        } else {
            head_dim
        };
        if rope_dims == 0 || rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "rope.dimension_count {rope_dims} does not fit heads of {head_dim}"
                ),
            });
        }
        let rope_freq_scale = match opt_f32(gguf, &key("rope.scaling.factor"))?
            .or(opt_f32(gguf, &key("rope.scale_linear"))?)
        {
            Some(f) if f > 0.0 && scaling_is_linear(gguf, &key("rope.scaling.type"))? => 1.0 / f,
            _ => 1.0,
        };
        Ok(Self {
            arch,
            n_layer: gguf.get_u32(&key("block_count"))? as usize,
            n_head,
            n_kv_head,
            head_dim,
            hidden,
            context_length: gguf.get_u32(&key("context_length"))? as usize,
            rms_eps: gguf.get_f32(&key("attention.layer_norm_rms_epsilon"))? as f64,
            rope_theta,
            rope_style,
            qkv_bias,
            qk_norm: false,
            rope_freq_factors: rope_freq_factors(gguf, "rope_freqs.weight", rope_dims)?,
            rope_dims,
            rope_freq_scale,
            rope_attn_factor: opt_f32(gguf, &key("rope.scaling.attn_factor"))?.unwrap_or(1.0),
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            embed_scale: None,
            post_norms: false,
            activation: Activation::Silu,
            sliding_window: None,
            final_logit_softcap: None,
            moe: None,
        })
    }

    /// `token_embd`'s width must be the model's hidden size.
    pub(crate) fn check_embedding_width(&self, gguf: &GgufFile, width: usize) -> Result<()> {
        if width != self.hidden {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "token_embd width {width} != embedding_length {}",
                    self.hidden
                ),
            });
        }
        Ok(())
    }

    /// Rotary tables `[position][rope_dims / 2]` for the whole context: `a·cos` and `a·sin` of `p · s · θ_i`,
    /// with `θ_i = base^(−2i/d) / factor_i` (`d` = `rope_dims`, `factor_i` = 1 without rope frequency factors,
    /// `s` the linear scale, `a` the attention factor; both forward passes use these). The tables of the global
    /// layers; see [`rope_tables_swa`](Self::rope_tables_swa).
    pub fn rope_tables(&self) -> (Vec<f32>, Vec<f32>) {
        rope_table(
            self.rope_theta,
            self.rope_dims,
            self.rope_freq_factors.as_deref(),
            self.rope_freq_scale,
            self.rope_attn_factor,
            self.context_length,
        )
    }

    /// The tables of the sliding-window layers when they have their own base: no frequency factors, no linear
    /// scaling (llama.cpp's `rope_freq_base_train_swa`, scale 1). `None` when they use the global tables.
    pub fn rope_tables_swa(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        let theta = self.sliding_window.as_ref()?.rope_theta?;
        Some(rope_table(
            theta,
            self.rope_dims,
            None,
            1.0,
            self.rope_attn_factor,
            self.context_length,
        ))
    }

    /// Whether `layer` uses sliding-window attention.
    pub fn is_swa(&self, layer: usize) -> bool {
        self.sliding_window
            .as_ref()
            .is_some_and(|w| w.on_layer(layer))
    }
}

fn rope_table(
    base: f32,
    dims: usize,
    factors: Option<&[f32]>,
    scale: f32,
    attn_factor: f32,
    positions: usize,
) -> (Vec<f32>, Vec<f32>) {
    let half = dims / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| {
            let factor = factors.map_or(1.0, |f| f[i]);
            scale / base.powf((2 * i) as f32 / dims as f32) / factor
        })
        .collect();
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for p in 0..positions {
        for f in &inv_freq {
            let angle = p as f32 * f;
            cos.push(angle.cos() * attn_factor);
            sin.push(angle.sin() * attn_factor);
        }
    }
    (cos, sin)
}

/// An optional f32 key (an integer is accepted too).
pub(crate) fn opt_f32(gguf: &GgufFile, key: &str) -> Result<Option<f32>> {
    if !gguf.has(key) {
        return Ok(None);
    }
    match gguf.get_f32(key) {
        Ok(v) => Ok(Some(v)),
        Err(_) => Ok(Some(gguf.get_u32(key)? as f32)),
    }
}

/// Whether `rope.scaling.type` is absent or linear (llama.cpp's default); YaRN and others are refused rather
/// than run wrong.
fn scaling_is_linear(gguf: &GgufFile, key: &str) -> Result<bool> {
    if !gguf.has(key) {
        return Ok(true);
    }
    match gguf.get_str(key)? {
        "linear" => Ok(true),
        "none" => Ok(false),
        other => Err(EngineError::InvalidGguf {
            path: gguf.path.clone(),
            message: format!("rope scaling `{other}` is not supported (linear, none)"),
        }),
    }
}

/// The rotary frequency divisors of tensor `name` (`rope_freqs.weight`: llama.cpp writes it for Llama 3.1+ rope
/// scaling; Phi-3's `rope_factors_long/short.weight`) when the file has it; they must be `rope_dims / 2` positive
/// numbers.
pub(crate) fn rope_freq_factors(
    gguf: &GgufFile,
    name: &str,
    rope_dims: usize,
) -> Result<Option<Vec<f32>>> {
    if !gguf.content.tensor_infos.contains_key(name) {
        return Ok(None);
    }
    let invalid = |message: String| EngineError::InvalidGguf {
        path: gguf.path.clone(),
        message,
    };
    let mut reader = gguf.reader()?;
    let factors: Vec<f32> = gguf
        .content
        .tensor(&mut reader, name, &candle_core::Device::Cpu)
        .and_then(|t| t.dequantize(&candle_core::Device::Cpu))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .map_err(|e| invalid(format!("{name}: {e}")))?;
    if factors.len() != rope_dims / 2 || factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
        return Err(invalid(format!(
            "{name} has {} values (expected {} positive numbers)",
            factors.len(),
            rope_dims / 2
        )));
    }
    Ok(Some(factors))
}

/// The largest sizes a model file may claim (well above every real model).
pub(crate) const MAX_LAYERS: usize = 1024;
pub(crate) const MAX_HEADS: usize = 1024;
pub(crate) const MAX_HEAD_DIM: usize = 1024;
pub(crate) const MAX_HIDDEN: usize = 1 << 17;
pub(crate) const MAX_CONTEXT: usize = 1 << 24;
/// `context_length × rope dims` at most (two f32 tables of this many halves: 1 GiB).
const MAX_ROPE_VALUES: usize = 1 << 28;

impl DecoderConfig {
    /// The hyper-parameters of the GGUF's architecture, read by that family's file.
    pub fn read(gguf: &GgufFile) -> Result<Self> {
        let config = match Architecture::from_name(gguf.architecture()?)? {
            Architecture::Llama => llama::config(gguf),
            Architecture::Qwen2 => qwen2::config(gguf),
            Architecture::Qwen3 => qwen2::qwen3_config(gguf),
            Architecture::Gemma3 => gemma3::config(gguf),
            Architecture::Phi3 => phi3::config(gguf),
            Architecture::Qwen3Moe => qwen2::qwen3moe_config(gguf),
        }?;
        config.check_bounds(gguf)?;
        Ok(config)
    }

    /// Refuses sizes no real model has before anything is allocated from them (a model file is input from
    /// whoever made it): the rope tables alone are `context_length × rope dims` values.
    fn check_bounds(&self, gguf: &GgufFile) -> Result<()> {
        let limits = [
            ("block_count", self.n_layer, 1, MAX_LAYERS),
            ("attention.head_count", self.n_head, 1, MAX_HEADS),
            ("head width", self.head_dim, 1, MAX_HEAD_DIM),
            ("embedding_length", self.hidden, 1, MAX_HIDDEN),
            ("context_length", self.context_length, 1, MAX_CONTEXT),
        ];
        for (what, value, low, high) in limits {
            if !(low..=high).contains(&value) {
                return Err(EngineError::InvalidGguf {
                    path: gguf.path.clone(),
                    message: format!("{what} {value} is outside {low}..={high}"),
                });
            }
        }
        if self.context_length.saturating_mul(self.rope_dims) > MAX_ROPE_VALUES {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "context_length {} × rope dimensions {} is more positions than this engine keeps tables for",
                    self.context_length, self.rope_dims
                ),
            });
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0 && self.rope_theta.is_finite()) {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: "layer_norm_rms_epsilon or rope.freq_base is not a finite number".into(),
            });
        }
        Ok(())
    }
}
