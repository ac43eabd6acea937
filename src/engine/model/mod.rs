//! Model forward passes for decoder-only transformers loaded from GGUF.
//!
//! One file per architecture (`llama.rs`, `qwen2.rs` with qwen3, `gemma3.rs`, `phi3.rs`) reads that
//! architecture's hyper-parameters into one [`DecoderConfig`]; the layers they share (RMS norm, attention with
//! grouped KV heads, rotary embeddings and optional sliding windows, gated MLP) live in `layers.rs`, so the
//! rotary code exists once. Fused weights (Phi-3's `attn_qkv`, `ffn_up`) are split into their parts at load
//! ([`split_rows`]), so both forward passes see one layout. The model holds no sequence state: every forward pass takes the sequence's own
//! [`SeqKv`], which is what lets the engine keep several sequences (prefix reuse, batching) side by side.

mod batch;
pub mod gemma3;
mod layers;
pub mod llama;
pub mod phi3;
pub mod qwen2;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};

use super::cpu::model::{BatchSeq, CpuModel};
use super::error::{EngineError, Result};
use super::gguf::GgufFile;
use super::kv::SeqKv;
use super::ops::Kernels;
use super::paged_kv::{DeviceBlocks, PagedStore};
use layers::{DecoderLayer, LayerCache, LoadCtx, RmsNorm, Rotary, Step};

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

/// How quantized weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// As stored in the file. On the CPU the CPU engine (`engine::cpu`) runs every type on its own kernel
    /// (types without one as f32 rows); elsewhere candle's kernels.
    #[default]
    Auto,
    /// As stored, always on candle's forward pass and kernels (on the CPU too: the reference path).
    Native,
    /// Requantise every quantized matrix to Q8_0.
    Q8_0,
}

impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "q8_0" | "q8-0" => Ok(Self::Q8_0),
            other => Err(format!(
                "unknown weight format `{other}` (auto, native, q8_0)"
            )),
        }
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Q8_0 => "q8_0",
        })
    }
}

/// A loaded model: weights on one device, no sequence state.
pub struct Model {
    pub config: DecoderConfig,
    pub vocab_size: usize,
    device: Device,
    backend: Backend,
    /// Weight bytes streamed per decoded token (for benchmarks and notes).
    pub weight_bytes: usize,
}

/// Which forward pass runs the model.
enum Backend {
    /// candle's ops on any device (CUDA, Metal; on the CPU with `--weights native`).
    Candle(CandleModel),
    /// The CPU engine's own kernels (`engine::cpu`).
    Cpu(Box<CpuModel>),
}

struct CandleModel {
    embed: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    output: layers::Linear,
    rotary: Rotary,
    /// The sliding-window layers' tables (their own base), when there are such layers.
    rotary_swa: Option<Rotary>,
    embed_scale: Option<f64>,
    softcap: Option<f64>,
    window: Option<usize>,
    /// candle's ops or our fused kernels (`engine::ops`).
    kernels: Kernels,
}

/// Longest chunk of prompt tokens fed in one forward pass; bounds the attention matrix's memory.
const PREFILL_CHUNK: usize = 512;

impl Model {
    /// Loads the weights of a supported architecture from an opened GGUF: on the CPU (unless `format` is
    /// `Native`) for the CPU engine with `threads` threads, elsewhere for candle.
    pub fn load(gguf: &GgufFile, device: &Device, format: WeightFormat) -> Result<Self> {
        Self::load_with_threads(gguf, device, format, super::device::cpu_threads())
    }

    pub fn load_with_threads(
        gguf: &GgufFile,
        device: &Device,
        format: WeightFormat,
        threads: usize,
    ) -> Result<Self> {
        let arch = Architecture::from_name(gguf.architecture()?)?;
        let config = match arch {
            Architecture::Llama => llama::config(gguf)?,
            Architecture::Qwen2 => qwen2::config(gguf)?,
            Architecture::Qwen3 => qwen2::qwen3_config(gguf)?,
            Architecture::Gemma3 => gemma3::config(gguf)?,
            Architecture::Phi3 => phi3::config(gguf)?,
            Architecture::Qwen3Moe => qwen2::qwen3moe_config(gguf)?,
        };
        if device.is_cpu() && format != WeightFormat::Native {
            let m = CpuModel::load(gguf, config.clone(), format == WeightFormat::Q8_0, threads)?;
            return Ok(Self {
                config,
                vocab_size: m.vocab_size,
                device: device.clone(),
                weight_bytes: m.weight_bytes,
                backend: Backend::Cpu(Box::new(m)),
            });
        }
        let mut reader = gguf.reader()?;
        let mut ctx = LoadCtx {
            gguf,
            reader: &mut reader,
            device,
            format,
            weight_bytes: 0,
        };
        let embed_q = ctx.raw("token_embd.weight")?;
        let (vocab_size, hidden) = embed_q.shape().dims2()?;
        config.check_embedding_width(gguf, hidden)?;
        let embed = embed_q.dequantize(device)?;
        let output = if gguf.content.tensor_infos.contains_key("output.weight") {
            ctx.matmul("output.weight")?
        } else {
            // Tied embeddings: the output head reuses token_embd.
            ctx.matmul("token_embd.weight")?
        };
        let norm = ctx.norm("output_norm.weight", config.rms_eps)?;
        let layers = (0..config.n_layer)
            .map(|i| DecoderLayer::load(&mut ctx, &config, i))
            .collect::<Result<Vec<_>>>()?;
        let rotary = Rotary::new(&config, device)?;
        let rotary_swa = Rotary::swa(&config, device)?;
        let embed_scale = config.embed_scale.map(f64::from);
        let softcap = config.final_logit_softcap.map(f64::from);
        let window = config.sliding_window.as_ref().map(|w| w.size);
        let weight_bytes = ctx.weight_bytes;
        let kernels = Kernels::for_device(device)?;
        kernels.check(device)?;
        Ok(Self {
            config,
            vocab_size,
            device: device.clone(),
            backend: Backend::Candle(CandleModel {
                embed,
                layers,
                norm,
                output,
                rotary,
                rotary_swa,
                embed_scale,
                softcap,
                window,
                kernels,
            }),
            weight_bytes,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes one block of a paged KV store takes, when this model runs continuous batches over one: the CPU
    /// engine, and candle's forward pass with the fused ops (CUDA). `None`: one pass per sequence over its own
    /// buffers (candle's ops: Metal, `--weights native`).
    pub fn paged_block_bytes(&self) -> Option<usize> {
        match &self.backend {
            Backend::Cpu(m) => Some(m.kv_block_bytes()),
            Backend::Candle(m) if m.kernels == Kernels::Fused => {
                Some(DeviceBlocks::bytes_per_block(
                    self.config.n_layer,
                    self.config.n_kv_head,
                    self.config.head_dim,
                ))
            }
            Backend::Candle(_) => None,
        }
    }

    /// A paged KV store of `n_blocks` blocks for [`forward_batch`](Self::forward_batch).
    pub fn new_paged_store(&self, n_blocks: usize) -> Result<PagedStore> {
        match &self.backend {
            Backend::Cpu(m) => Ok(PagedStore::Cpu(m.new_blocks(n_blocks))),
            Backend::Candle(m) if m.kernels == Kernels::Fused => {
                Ok(PagedStore::Device(DeviceBlocks::new(
                    n_blocks,
                    self.config.n_layer,
                    self.config.n_kv_head,
                    self.config.head_dim,
                    &self.device,
                )?))
            }
            Backend::Candle(_) => Err(EngineError::Internal(
                "candle's ops run one sequence per pass, without a paged store".into(),
            )),
        }
    }

    /// One continuous-batching step over the paged store: each sequence's new tokens at its position, the
    /// logits of the last token of those that ask (empty vectors for the others).
    pub fn forward_batch(
        &self,
        store: &mut PagedStore,
        batch: &[BatchSeq<'_>],
    ) -> Result<Vec<Vec<f32>>> {
        match (&self.backend, store) {
            (Backend::Cpu(m), PagedStore::Cpu(store)) => m.forward_batch(store, batch),
            (Backend::Candle(m), PagedStore::Device(store)) => {
                m.forward_batch(store, batch, self.config.context_length, &self.device)
            }
            _ => Err(EngineError::Internal(
                "a paged store of the other forward pass".into(),
            )),
        }
    }

    /// The ops candle's forward pass runs; `None` on the CPU engine.
    pub fn kernels(&self) -> Option<Kernels> {
        match &self.backend {
            Backend::Candle(m) => Some(m.kernels),
            Backend::Cpu(_) => None,
        }
    }

    /// Switches candle's forward pass between candle's ops and our fused kernels (an error on the CPU engine,
    /// which has its own, and for fused kernels on Metal).
    pub fn set_kernels(&mut self, kernels: Kernels) -> Result<()> {
        kernels.check(&self.device)?;
        match &mut self.backend {
            Backend::Candle(m) => {
                m.kernels = kernels;
                Ok(())
            }
            Backend::Cpu(_) => Err(EngineError::Device(
                "the CPU engine runs its own kernels; load with --weights native for candle's path"
                    .into(),
            )),
        }
    }

    /// The CPU engine running this model, if it is the one.
    pub fn cpu_engine(&self) -> Option<&CpuModel> {
        match &self.backend {
            Backend::Cpu(m) => Some(m),
            Backend::Candle(_) => None,
        }
    }

    /// A fresh, empty KV state for one sequence.
    pub fn new_sequence(&self) -> SeqKv {
        match &self.backend {
            Backend::Cpu(m) => SeqKv::cpu(m.new_kv()),
            Backend::Candle(_) => SeqKv::new(self.config.n_layer),
        }
    }

    /// Feeds `tokens` after what `kv` already holds; returns the logits (f32, `[vocab]`) of the last position.
    /// Long inputs are split into chunks so the attention matrix stays small.
    pub fn forward(&self, tokens: &[u32], kv: &mut SeqKv) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let total = kv.len() + tokens.len();
        if total > self.config.context_length {
            return Err(EngineError::PromptTooLong {
                tokens: total,
                limit: self.config.context_length,
            });
        }
        let mut last = None;
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            last = Some(match &self.backend {
                Backend::Candle(m) => m.forward_chunk(chunk, kv, &self.device)?,
                Backend::Cpu(m) => {
                    let pos = kv.len();
                    let cpu = kv.cpu_mut().ok_or_else(|| {
                        EngineError::Internal(
                            "a candle KV cache was given to the CPU engine".into(),
                        )
                    })?;
                    let logits = m.forward_one(chunk, cpu, pos)?;
                    kv.extend(chunk);
                    let n = logits.len();
                    Tensor::from_vec(logits, n, &Device::Cpu)?
                }
            });
        }
        last.ok_or(EngineError::EmptyPrompt)
    }
}

impl CandleModel {
    fn forward_chunk(&self, tokens: &[u32], kv: &mut SeqKv, device: &Device) -> Result<Tensor> {
        let t = tokens.len();
        let pos = kv.len();
        let ids = Tensor::new(tokens, device)?;
        let mut x = self.embed.index_select(&ids, 0)?.unsqueeze(0)?;
        if let Some(scale) = self.embed_scale {
            x = (x * scale)?;
        }
        let rope = self.rotary.at(pos, t)?;
        let rope_swa = match &self.rotary_swa {
            Some(r) => Some(r.at(pos, t)?),
            None => None,
        };
        // Masks for candle's attention; the fused kernel applies causality and the window itself.
        let masked = self.kernels == Kernels::Candle;
        let mask = if t > 1 && masked {
            Some(causal_mask(t, pos, None, device)?)
        } else {
            None
        };
        // The window masks keys on its layers even for one token.
        let window_mask = match self.window {
            Some(w) if pos + t > w && masked => Some(causal_mask(t, pos, Some(w), device)?),
            _ => mask.clone(),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_kv = kv.layer_mut(i).ok_or_else(|| {
                EngineError::Internal(
                    "a CPU-engine KV cache was given to candle's forward pass".into(),
                )
            })?;
            let (rope, mask) = match layer.swa {
                true => (rope_swa.as_ref().unwrap_or(&rope), window_mask.as_ref()),
                false => (&rope, mask.as_ref()),
            };
            let step = Step {
                rope,
                mask,
                window: if layer.swa { self.window } else { None },
                pos,
                kernels: self.kernels,
            };
            x = layer.forward(&x, &step, LayerCache::Own(layer_kv))?;
        }
        kv.extend(tokens);
        let x = x.narrow(1, t - 1, 1)?;
        let x = self.norm.forward(&x, self.kernels)?;
        let mut logits = self.output.forward(&x)?;
        if let Some(cap) = self.softcap {
            logits = ((logits / cap)?.tanh()? * cap)?;
        }
        Ok(logits.flatten_all()?.to_dtype(DType::F32)?)
    }
}

/// Additive mask `[t, pos + t]`: 0 where query `i` (absolute `pos + i`) may see key `j` — not after it, and
/// with a `window`, not `window` or more positions before it — −∞ elsewhere.
pub(crate) fn causal_mask(
    t: usize,
    pos: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Tensor> {
    let kv_len = pos + t;
    let data: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..kv_len).map(move |j| {
                let q = pos + i;
                let hidden = j > q || window.is_some_and(|w| q - j >= w);
                if hidden {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(data, (t, kv_len), device)?)
}

/// Reads the fused matrix `name` and splits it by rows into matrices of `parts` rows each (in order), placed on
/// `device`. Quantized blocks run along a row, so a split moves whole rows: nothing is requantised.
pub(crate) fn split_rows<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    parts: &[usize],
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (rows, cols) = q.shape().dims2().map_err(|e| invalid(e.to_string()))?;
    if rows != parts.iter().sum::<usize>() {
        return Err(invalid(format!(
            "{rows} rows cannot be split into {parts:?}"
        )));
    }
    let shapes: Vec<(usize, usize)> = parts.iter().map(|&n| (n, cols)).collect();
    slice_rows(&q, rows, &shapes, device)
}

/// Reads Phi-3's fused `ffn_up` (the gate's rows, then the up projection's) as its two halves.
pub(crate) fn split_gate_up<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (rows, cols) = q.shape().dims2().map_err(|e| invalid(e.to_string()))?;
    if !rows.is_multiple_of(2) {
        return Err(invalid(format!(
            "{rows} rows do not split into gate and up"
        )));
    }
    slice_rows(&q, rows, &[(rows / 2, cols); 2], device)
}

/// Reads a 3-D expert tensor `name` (`[experts, rows, cols]`) as one matrix per expert, placed on `device`.
pub(crate) fn split_experts<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (experts, rows, cols) = q.shape().dims3().map_err(|e| invalid(e.to_string()))?;
    slice_rows(&q, experts * rows, &vec![(rows, cols); experts], device)
}

/// A tensor read on the CPU, and the error for it.
fn read_on_cpu<'a, R: std::io::Read + std::io::Seek>(
    gguf: &'a GgufFile,
    reader: &mut R,
    name: &'a str,
) -> Result<(QTensor, impl Fn(String) -> EngineError + 'a)> {
    let invalid = move |message: String| EngineError::InvalidGguf {
        path: gguf.path.clone(),
        message: format!("tensor `{name}`: {message}"),
    };
    let q = gguf
        .content
        .tensor(reader, name, &Device::Cpu)
        .map_err(|e| invalid(e.to_string()))?;
    Ok((q, invalid))
}

/// Consecutive row ranges of `q` (`total_rows` rows) as matrices of the given shapes, on `device`.
fn slice_rows(
    q: &QTensor,
    total_rows: usize,
    shapes: &[(usize, usize)],
    device: &Device,
) -> Result<Vec<QTensor>> {
    let data = q.data()?;
    let row_bytes = data.len() / total_rows.max(1);
    let mut at = 0;
    let mut out = Vec::with_capacity(shapes.len());
    for &(rows, cols) in shapes {
        let bytes = &data[at * row_bytes..(at + rows) * row_bytes];
        out.push(candle_core::quantized::ggml_file::qtensor_from_ggml(
            q.dtype(),
            bytes,
            vec![rows, cols],
            device,
        )?);
        at += rows;
    }
    Ok(out)
}

/// Whether `format` asks for `dtype` to be requantised to Q8_0 on candle's path.
fn requantise(format: WeightFormat, dtype: GgmlDType, _device: &Device) -> bool {
    let quantized = !matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
    format == WeightFormat::Q8_0 && quantized && dtype != GgmlDType::Q8_0
}

fn to_q8_0(q: QTensor, device: &Device) -> Result<QTensor> {
    let f = q.dequantize(device)?;
    Ok(QTensor::quantize(&f, GgmlDType::Q8_0)?)
}
