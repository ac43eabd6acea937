//! How a folder maps onto llama.cpp's GGUF, per architecture: the architecture `config.json` names, the
//! metadata keys it gives, each tensor's llama.cpp name and the transform of its bytes on the way (llama's q/k
//! rows permuted, Gemma's norms shifted by one), and rope factors computed from the config.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde_json::Value as Json;

use super::{bad, get_usize};
use crate::engine::arch::Architecture as Arch;
use crate::engine::error::Result;
use crate::engine::files::gguf_write::TensorEntry;

#[derive(Debug, Clone, Copy)]
pub(super) enum Transform {
    /// Copied as stored.
    Copy,
    /// Converted to f32 (1-D tensors: norms, biases).
    F32,
    /// f32 plus one (Gemma's `1 + w` norms).
    F32PlusOne,
    /// Rows permuted for interleaved rotation (llama's q and k), `heads` heads of `rows / heads`.
    Permute { heads: usize },
}

pub(super) struct Planned {
    pub(super) source: String,
    pub(super) entry: TensorEntry,
    pub(super) transform: Transform,
    /// Values computed from `config.json` (rope factors) instead of a safetensors tensor.
    pub(super) values: Option<Vec<f32>>,
}

impl Planned {
    /// An f32 vector computed here.
    fn values(name: &str, values: Vec<f32>) -> Self {
        Self {
            source: String::new(),
            entry: TensorEntry {
                name: name.into(),
                dims: vec![values.len() as u64],
                type_id: 0,
                bytes: values.len() as u64 * 4,
            },
            transform: Transform::Copy,
            values: Some(values),
        }
    }
}

/// (head width, rotated dimensions) from `config.json`.
fn head_dims(c: &Json) -> (usize, usize) {
    let heads = get_usize(c, "num_attention_heads").unwrap_or(1).max(1);
    let hidden = get_usize(c, "hidden_size").unwrap_or(0);
    let head_dim = get_usize(c, "head_dim").unwrap_or(hidden / heads);
    let rope_dims = match c["partial_rotary_factor"].as_f64() {
        Some(f) => (head_dim as f64 * f) as usize,
        None => head_dim,
    };
    (head_dim, rope_dims)
}

/// Rope frequency factors that llama.cpp stores as tensors: Llama 3.1's (`rope_freqs`), Phi-3's LongRoPE
/// (`rope_factors_long` / `_short`).
fn rope_factor_tensors(folder: &Path, c: &Json) -> Result<Vec<Planned>> {
    let scaling = &c["rope_scaling"];
    let (_, rope_dims) = head_dims(c);
    let kind = scaling["rope_type"].as_str().or(scaling["type"].as_str());
    let floats = |key: &str| -> Result<Vec<f32>> {
        let list = scaling[key]
            .as_array()
            .ok_or_else(|| bad(folder, format!("rope_scaling has no `{key}` list")))?;
        let v: Vec<f32> = list
            .iter()
            .filter_map(|x| x.as_f64().map(|x| x as f32))
            .collect();
        match v.len() == rope_dims / 2 {
            true => Ok(v),
            false => Err(bad(
                folder,
                format!(
                    "rope_scaling.{key} has {} values, expected {}",
                    v.len(),
                    rope_dims / 2
                ),
            )),
        }
    };
    Ok(match kind {
        Some("llama3") => {
            let f = |k: &str, d: f64| scaling[k].as_f64().unwrap_or(d) as f32;
            vec![Planned::values(
                "rope_freqs.weight",
                crate::engine::files::synth::llama3_rope_factors_with(
                    c["rope_theta"].as_f64().unwrap_or(10_000.0) as f32,
                    rope_dims,
                    f("factor", 8.0),
                    get_usize(scaling, "original_max_position_embeddings").unwrap_or(8192),
                    f("low_freq_factor", 1.0),
                    f("high_freq_factor", 4.0),
                ),
            )]
        }
        Some("longrope") | Some("su") => vec![
            Planned::values("rope_factors_long.weight", floats("long_factor")?),
            Planned::values("rope_factors_short.weight", floats("short_factor")?),
        ],
        _ => Vec::new(),
    })
}

/// What a folder's `config.json` says, per architecture (Qwen3-MoE folders, whose experts are separate tensors,
/// are refused).
impl Arch {
    pub(super) fn of(folder: &Path, c: &Json) -> Result<Self> {
        let name = c["architectures"][0].as_str().unwrap_or_default();
        let model_type = c["model_type"].as_str().unwrap_or_default();
        Ok(match (name, model_type) {
            ("LlamaForCausalLM" | "MistralForCausalLM", _) | (_, "llama" | "mistral") => Self::Llama,
            ("Qwen2ForCausalLM", _) | (_, "qwen2") => Self::Qwen2,
            ("Qwen3ForCausalLM", _) | (_, "qwen3") => Self::Qwen3,
            ("Gemma3ForCausalLM", _) | (_, "gemma3_text") => Self::Gemma3,
            ("Phi3ForCausalLM", _) | (_, "phi3") => Self::Phi3,
            _ => {
                return Err(bad(
                    folder,
                    format!(
                        "architecture `{name}` (model_type `{model_type}`) is not supported (Llama/Mistral, \
                         Qwen2, Qwen3, Gemma3 text, Phi3)"
                    ),
                ))
            }
        })
    }

    pub(super) fn metadata(
        self,
        folder: &Path,
        c: &Json,
        stem: &str,
    ) -> Result<Vec<(String, Value)>> {
        let arch = self.name();
        let need = |key: &str| {
            get_usize(c, key).ok_or_else(|| bad(folder, format!("config.json has no `{key}`")))
        };
        let k = |key: &str| format!("{arch}.{key}");
        let heads = need("num_attention_heads")?;
        let hidden = need("hidden_size")?;
        let (head_dim, rope_dims) = head_dims(c);
        let context = need("max_position_embeddings")?;
        let mut m: Vec<(String, Value)> = vec![
            ("general.architecture".into(), Value::String(arch.into())),
            ("general.name".into(), Value::String(stem.into())),
            (k("context_length"), Value::U32(context as u32)),
            (k("embedding_length"), Value::U32(hidden as u32)),
            (
                k("block_count"),
                Value::U32(need("num_hidden_layers")? as u32),
            ),
            (
                k("feed_forward_length"),
                Value::U32(need("intermediate_size")? as u32),
            ),
            (k("attention.head_count"), Value::U32(heads as u32)),
            (
                k("attention.head_count_kv"),
                Value::U32(get_usize(c, "num_key_value_heads").unwrap_or(heads) as u32),
            ),
            (k("attention.key_length"), Value::U32(head_dim as u32)),
            (k("attention.value_length"), Value::U32(head_dim as u32)),
            (k("rope.dimension_count"), Value::U32(rope_dims as u32)),
            (
                k("rope.freq_base"),
                Value::F32(c["rope_theta"].as_f64().unwrap_or(10_000.0) as f32),
            ),
            (
                k("attention.layer_norm_rms_epsilon"),
                Value::F32(c["rms_norm_eps"].as_f64().unwrap_or(1e-6) as f32),
            ),
        ];
        let scaling = &c["rope_scaling"];
        let scaling_type = scaling["rope_type"].as_str().or(scaling["type"].as_str());
        if let (Some("linear"), Some(f)) = (scaling_type, scaling["factor"].as_f64()) {
            m.push((k("rope.scaling.type"), Value::String("linear".into())));
            m.push((k("rope.scaling.factor"), Value::F32(f as f32)));
        }
        match self {
            Self::Llama => {
                if let Some(w) = get_usize(c, "sliding_window") {
                    m.push((k("attention.sliding_window"), Value::U32(w as u32)));
                }
            }
            Self::Gemma3 => {
                if let Some(w) = get_usize(c, "sliding_window") {
                    m.push((k("attention.sliding_window"), Value::U32(w as u32)));
                }
                if let Some(types) = c["layer_types"].as_array() {
                    let flags = types
                        .iter()
                        .map(|t| Value::Bool(t.as_str() == Some("sliding_attention")))
                        .collect();
                    m.push((k("attention.sliding_window_pattern"), Value::Array(flags)));
                } else if let Some(n) = get_usize(c, "sliding_window_pattern") {
                    m.push((k("attention.sliding_window_pattern"), Value::U32(n as u32)));
                }
                if let Some(b) = c["rope_local_base_freq"].as_f64() {
                    m.push((k("rope.freq_base_swa"), Value::F32(b as f32)));
                }
                if let Some(cap) = c["final_logit_softcapping"].as_f64() {
                    m.push((k("final_logit_softcapping"), Value::F32(cap as f32)));
                }
            }
            Self::Phi3 => {
                if let Some(orig) = get_usize(c, "original_max_position_embeddings") {
                    m.push((
                        k("rope.scaling.original_context_length"),
                        Value::U32(orig as u32),
                    ));
                    if scaling_type == Some("longrope") && context > orig {
                        let scale = context as f64 / orig as f64;
                        let attn = (1.0 + scale.ln() / (orig as f64).ln()).sqrt();
                        m.push((k("rope.scaling.attn_factor"), Value::F32(attn as f32)));
                    }
                }
            }
            Self::Qwen2 | Self::Qwen3 | Self::Qwen3Moe => {}
        }
        Ok(m)
    }

    /// Every tensor to write: llama.cpp's name, its source, dims, type and transform.
    pub(super) fn plan(
        self,
        folder: &Path,
        c: &Json,
        tensors: &candle_core::safetensors::MmapedSafetensors,
    ) -> Result<Vec<Planned>> {
        let heads = get_usize(c, "num_attention_heads").unwrap_or(1);
        let kv_heads = get_usize(c, "num_key_value_heads").unwrap_or(heads);
        let mut by_name: BTreeMap<String, Planned> = BTreeMap::new();
        for (source, view) in tensors.tensors() {
            let Some(name) = self.gguf_name(&source) else {
                tracing::debug!(tensor = %source, "not used by the GGUF model; skipped");
                continue;
            };
            let shape = view.shape().to_vec();
            let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
            let elems: u64 = dims.iter().product();
            let (type_id, width) = match format!("{:?}", view.dtype()).as_str() {
                "F32" => (0, 4),
                "F16" => (1, 2),
                "BF16" => (30, 2),
                other => {
                    return Err(bad(
                        folder,
                        format!("{source}: dtype {other} is not supported (f32, f16, bf16)"),
                    ))
                }
            };
            let norm = name.ends_with("norm.weight");
            let transform = match (shape.len(), self, norm) {
                (1, Self::Gemma3, true) => Transform::F32PlusOne,
                (1, _, _) => Transform::F32,
                (_, Self::Llama, _) if name.ends_with("attn_q.weight") => {
                    Transform::Permute { heads }
                }
                (_, Self::Llama, _) if name.ends_with("attn_k.weight") => {
                    Transform::Permute { heads: kv_heads }
                }
                _ => Transform::Copy,
            };
            let (type_id, bytes) = match transform {
                Transform::F32 | Transform::F32PlusOne => (0, elems * 4),
                _ => (type_id, elems * width),
            };
            by_name.insert(
                name.clone(),
                Planned {
                    source,
                    entry: TensorEntry {
                        name,
                        dims,
                        type_id,
                        bytes,
                    },
                    transform,
                    values: None,
                },
            );
        }
        for p in rope_factor_tensors(folder, c)? {
            by_name.insert(p.entry.name.clone(), p);
        }
        if !by_name.contains_key("token_embd.weight") {
            return Err(bad(folder, "no model.embed_tokens.weight"));
        }
        if c["tie_word_embeddings"].as_bool() == Some(true) {
            by_name.remove("output.weight");
        }
        Ok(by_name.into_values().collect())
    }

    /// llama.cpp's name of a Hugging Face tensor (`None`: not part of the model we run).
    fn gguf_name(self, hf: &str) -> Option<String> {
        match hf {
            "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
            "model.norm.weight" => return Some("output_norm.weight".into()),
            "lm_head.weight" => return Some("output.weight".into()),
            _ => {}
        }
        let rest = hf.strip_prefix("model.layers.")?;
        let (layer, part) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let (stem, suffix) = part.rsplit_once('.')?;
        let gemma = self == Self::Gemma3;
        let mapped = match stem {
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" if gemma => "post_attention_norm",
            "post_attention_layernorm" => "ffn_norm",
            "pre_feedforward_layernorm" => "ffn_norm",
            "post_feedforward_layernorm" => "post_ffw_norm",
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.o_proj" => "attn_output",
            "self_attn.qkv_proj" => "attn_qkv",
            "self_attn.q_norm" => "attn_q_norm",
            "self_attn.k_norm" => "attn_k_norm",
            "mlp.gate_proj" => "ffn_gate",
            "mlp.up_proj" => "ffn_up",
            "mlp.gate_up_proj" => "ffn_up",
            "mlp.down_proj" => "ffn_down",
            _ => return None,
        };
        Some(format!("blk.{layer}.{mapped}.{suffix}"))
    }
}

impl Transform {
    pub(super) fn apply(
        self,
        data: &[u8],
        dtype: safetensors::Dtype,
        entry: &TensorEntry,
    ) -> std::io::Result<Vec<u8>> {
        let to_f32 = || -> Vec<f32> {
            match dtype {
                safetensors::Dtype::F16 => data
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                safetensors::Dtype::BF16 => data
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                _ => data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        };
        Ok(match self {
            Transform::Copy => data.to_vec(),
            Transform::F32 => to_f32().iter().flat_map(|v| v.to_le_bytes()).collect(),
            Transform::F32PlusOne => to_f32()
                .iter()
                .flat_map(|v| (v + 1.0).to_le_bytes())
                .collect(),
            Transform::Permute { heads } => {
                // Row (h, a, j) of the halves layout goes to (h, j, a): llama.cpp's `permute`.
                let rows = entry.dims.get(1).copied().unwrap_or(1) as usize;
                let row_bytes = data.len() / rows.max(1);
                let per_head = rows / heads.max(1);
                let half = per_head / 2;
                if heads == 0 || !rows.is_multiple_of(heads) || !per_head.is_multiple_of(2) {
                    return Err(std::io::Error::other(format!(
                        "{}: {rows} rows do not split into {heads} heads of rotated pairs",
                        entry.name
                    )));
                }
                let mut out = vec![0u8; data.len()];
                for h in 0..heads {
                    for a in 0..2 {
                        for j in 0..half {
                            let from = h * per_head + a * half + j;
                            let to = h * per_head + 2 * j + a;
                            out[to * row_bytes..(to + 1) * row_bytes]
                                .copy_from_slice(&data[from * row_bytes..(from + 1) * row_bytes]);
                        }
                    }
                }
                out
            }
        })
    }
}
