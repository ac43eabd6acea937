//! Synthetic checkpoints (vLLM's `--load-format dummy`, as GGUF files): a model of a supported architecture's
//! (llama and Mistral, qwen2, qwen3, gemma3, phi3) real shape — tensor names, metadata keys, the Q4_K_M quant mix — filled with seeded random weights, and the
//! tokenizer (every `tokenizer.*` key, chat template included) of a real model we have. No download: tiny files
//! (a few MB) for correctness checks that compare engines on the same weights, real-size files for measuring
//! speed and memory at sizes we cannot fetch.
//!
//! Weights are written block by block as valid quantized blocks (random quants, scales chosen so weights stay
//! within about ±0.05), streamed to the file: a 7B file needs no more memory than a block. The writer is GGUF v3
//! with 32-byte alignment, as llama.cpp writes it.
//!
//! Q4_K_M's mix, as llama.cpp makes it: `output.weight` Q6_K; `attn_v` and `ffn_down` Q6_K in the first and last
//! eighth of the layers and every third layer between, Q4_K elsewhere; every other matrix Q4_K; norms and biases
//! F32. A matrix whose rows are not a multiple of 256 (K-quants' block) falls back as llama.cpp's does: Q4_K to
//! Q5_0, Q6_K to Q8_0.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::engine::arch::Architecture;
use crate::engine::error::{EngineError, Result};
use crate::engine::files::gguf_write::{self, TensorEntry};
use crate::engine::gguf::{candle_value, GgufFile};
use crate::text::Metadata;

mod presets;
mod tensors;

use presets::presets;
pub(crate) use tensors::llama3_rope_factors_with;
use tensors::{plan, write_data, TensorPlan};

/// How the matrices are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthQuant {
    /// llama.cpp's Q4_K_M mix (see the module docs).
    Q4KM,
    /// Every matrix Q8_0.
    Q8_0,
}

/// The shape of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthShape {
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub context: usize,
    pub rope_theta: f32,
    /// The output head is the embedding (`tie_word_embeddings`): no `output.weight`.
    pub tied: bool,
    /// The width of a head when it is not `hidden / heads` (Qwen3's 128).
    pub head_dim: Option<usize>,
    /// Llama 3.1+'s rope scaling (factor, original context), written as `rope_freqs.weight` as llama.cpp's
    /// converter does.
    pub llama3_rope: Option<(f32, usize)>,
    /// Rotated dimensions per head when not all (Phi-4-mini's 3/4).
    pub rope_dims: Option<usize>,
    /// Sliding window size and (Gemma 3) the layer period: every `n`-th layer global.
    pub sliding_window: Option<(usize, Option<u32>)>,
    /// Linear rope scaling factor of the global layers (Gemma 3 4B+: 8).
    pub rope_scale_linear: Option<f32>,
    /// Phi-3's LongRoPE: the original context (long and short factors are written).
    pub longrope: Option<usize>,
    /// Mixture of experts: (experts, experts used per token, each expert's hidden width).
    pub moe: Option<(usize, usize, usize)>,
}

impl SynthShape {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden / self.heads.max(1))
    }
}

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub arch: Architecture,
    /// The size's name (`tiny`, `0.5b`, `7b`, …), for file names and reports.
    pub size: String,
    pub shape: SynthShape,
    pub quant: SynthQuant,
    pub seed: u64,
}

impl SynthSpec {
    /// `ARCH:SIZE` (`qwen2:0.5b`, `llama:8b`, `qwen2:tiny`, …) with the Q4_K_M mix and seed 0.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |message: String| EngineError::Synth(message);
        let (arch, size) = spec
            .trim()
            .split_once(':')
            .ok_or_else(|| bad(format!("`{spec}` is not ARCH:SIZE (e.g. qwen2:0.5b)")))?;
        let arch = match arch.to_ascii_lowercase().as_str() {
            "qwen2.5" => Architecture::Qwen2,
            name => Architecture::from_name(name).map_err(|_| {
                bad(format!(
                    "no synthetic `{name}` architecture (known: {})",
                    Architecture::SUPPORTED.join(", ")
                ))
            })?,
        };
        let size = size.to_ascii_lowercase();
        let known = presets(arch);
        let shape = known
            .iter()
            .find(|(name, _)| *name == size)
            .map(|(_, shape)| *shape)
            .ok_or_else(|| {
                let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
                bad(format!(
                    "no size `{size}` for {} (known: {})",
                    arch.name(),
                    names.join(", ")
                ))
            })?;
        Ok(Self {
            arch,
            size,
            shape,
            quant: SynthQuant::Q4KM,
            seed: 0,
        })
    }

    /// A file name naming everything that makes the file (`qwen2-0.5b-q4_k_m-s0-v151936.gguf`).
    pub fn file_name(&self, vocab: usize) -> String {
        let quant = match self.quant {
            SynthQuant::Q4KM => "q4_k_m",
            SynthQuant::Q8_0 => "q8_0",
        };
        format!(
            "{}-{}-{quant}-s{}-v{vocab}.gguf",
            self.arch.name(),
            self.size,
            self.seed
        )
    }
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synthesized {
    pub path: PathBuf,
    pub bytes: u64,
    pub parameters: u64,
    pub tensors: usize,
    pub vocab: usize,
}

/// Every `tokenizer.*` key of `source` (vocabulary, merges, special tokens, chat template), sorted by name.
fn tokenizer_keys(source: &GgufFile) -> Vec<(String, Value)> {
    let meta = source.metadata();
    let mut keys: Vec<(String, Value)> = meta
        .keys()
        .filter(|key| key.starts_with("tokenizer."))
        .filter_map(|k| Some((k.to_string(), candle_value(meta.value(k)?))))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys
}

/// Writes a GGUF holding only `source`'s tokenizer and chat template (no tensors): a few MB that can stand in
/// for the model as `--tokenizer-from` where the model itself cannot travel. Returns the file's size.
pub fn write_vocabulary(source: &GgufFile, out: &Path) -> Result<u64> {
    let keys = tokenizer_keys(source);
    if !keys.iter().any(|(k, _)| k == "tokenizer.ggml.tokens") {
        return Err(EngineError::MissingMetadata {
            key: "tokenizer.ggml.tokens".into(),
        });
    }
    let mut metadata = vec![(
        "general.name".to_string(),
        Value::String("tokenizer only".into()),
    )];
    metadata.extend(keys);
    gguf_write::write(out, &metadata, &[], |_, _| Ok(()))
}

/// Writes the synthetic checkpoint `spec` to `out` with the tokenizer of `tokenizer_from`.
pub fn write(spec: &SynthSpec, tokenizer_from: &GgufFile, out: &Path) -> Result<Synthesized> {
    let tokens = tokenizer_from.get_array("tokenizer.ggml.tokens")?.len();
    if tokens == 0 {
        return Err(EngineError::Synth(format!(
            "{} has an empty tokenizer",
            tokenizer_from.path.display()
        )));
    }
    let sh = spec.shape;
    if sh.heads == 0
        || sh.kv_heads == 0
        || (sh.head_dim.is_none() && !sh.hidden.is_multiple_of(sh.heads))
        || !sh.heads.is_multiple_of(sh.kv_heads)
    {
        return Err(EngineError::Synth(format!(
            "inconsistent shape: {} heads, {} KV heads, width {}",
            sh.heads, sh.kv_heads, sh.hidden
        )));
    }
    let arch = spec.arch.name();
    let k = |key: &str| format!("{arch}.{key}");
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (
            "general.name".into(),
            // Not the architecture's name: llama.cpp keys per-model token attributes on names like "phi3".
            Value::String(format!("synthetic {} (random weights)", spec.size)),
        ),
        (
            "general.file_type".into(),
            Value::U32(match spec.quant {
                SynthQuant::Q4KM => 15,
                SynthQuant::Q8_0 => 7,
            }),
        ),
        (
            "general.alignment".into(),
            Value::U32(gguf_write::ALIGNMENT as u32),
        ),
        (k("context_length"), Value::U32(sh.context as u32)),
        (k("embedding_length"), Value::U32(sh.hidden as u32)),
        (k("block_count"), Value::U32(sh.layers as u32)),
        (k("feed_forward_length"), Value::U32(sh.ffn as u32)),
        (k("attention.head_count"), Value::U32(sh.heads as u32)),
        (k("attention.head_count_kv"), Value::U32(sh.kv_heads as u32)),
        (k("rope.freq_base"), Value::F32(sh.rope_theta)),
        (
            k("rope.dimension_count"),
            Value::U32(sh.rope_dims.unwrap_or(sh.head_dim()) as u32),
        ),
        (k("attention.key_length"), Value::U32(sh.head_dim() as u32)),
        (
            k("attention.value_length"),
            Value::U32(sh.head_dim() as u32),
        ),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("vocab_size"), Value::U32(tokens as u32)),
    ];
    if let Some((experts, used, ff)) = sh.moe {
        metadata.push((k("expert_count"), Value::U32(experts as u32)));
        metadata.push((k("expert_used_count"), Value::U32(used as u32)));
        metadata.push((k("expert_feed_forward_length"), Value::U32(ff as u32)));
    }
    if let Some((window, pattern)) = sh.sliding_window {
        metadata.push((k("attention.sliding_window"), Value::U32(window as u32)));
        if let Some(n) = pattern {
            metadata.push((k("attention.sliding_window_pattern"), Value::U32(n)));
            metadata.push((k("rope.freq_base_swa"), Value::F32(10_000.0)));
        }
    }
    if let Some(factor) = sh.rope_scale_linear {
        metadata.push((k("rope.scaling.type"), Value::String("linear".into())));
        metadata.push((k("rope.scaling.factor"), Value::F32(factor)));
    }
    if let Some(original) = sh.longrope {
        // llama.cpp's converter: attn_factor = sqrt(1 + ln(scale) / ln(original)).
        let scale = sh.context as f32 / original as f32;
        let attn = (1.0 + scale.ln() / (original as f32).ln()).sqrt();
        metadata.push((
            k("rope.scaling.original_context_length"),
            Value::U32(original as u32),
        ));
        metadata.push((k("rope.scaling.attn_factor"), Value::F32(attn)));
    }
    metadata.extend(tokenizer_keys(tokenizer_from));

    let tensors = plan(spec, tokens);
    let entries: Vec<TensorEntry> = tensors
        .iter()
        .map(|t| TensorEntry {
            name: t.name.clone(),
            dims: t.dims.clone(),
            type_id: t.ttype.id(),
            bytes: t.ttype.bytes(t.elements()),
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let bytes = gguf_write::write(out, &metadata, &entries, |i, w| {
        let t = &tensors[i];
        write_data(w, t.ttype, &t.fill, t.elements(), &mut rng)
    })?;
    Ok(Synthesized {
        path: out.to_path_buf(),
        bytes,
        parameters: tensors.iter().map(TensorPlan::elements).sum(),
        tensors: tensors.len(),
        vocab: tokens,
    })
}

#[cfg(test)]
mod tests;
