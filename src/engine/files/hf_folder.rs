//! Hugging Face model folders (vLLM's world): `config.json`, `*.safetensors` (f32/f16/bf16; sharded with
//! `model.safetensors.index.json` or not), `tokenizer.json` and `tokenizer_config.json` (its chat template), and
//! the hf-hub cache layout (`models--org--name/snapshots/<rev>/`) when a model is named `org/name` offline.
//!
//! A folder is converted once into a GGUF in the cache (`$AGENTD_HOME/converted/`), as llama.cpp's
//! `convert_hf_to_gguf.py` would write it: llama.cpp's tensor names, llama's q/k rows permuted for interleaved
//! rotation, Gemma's norm weights shifted by one, Llama 3 rope factors computed, the tokenizer's vocabulary,
//! merges and pre-tokenizer written as `tokenizer.ggml.*`. Weights keep their type (f16/bf16/f32; `--weights
//! q8_0` requantises at load as for any GGUF). Everything after loading — both forward passes, the tokenizer,
//! templates, grammars — is then the GGUF path, so a folder and its GGUF twin give the same logits. The
//! converted file is keyed on the folder's files (names, sizes, modification times), so an edited folder is
//! converted again.
//!
//! Tokenizers: byte-level BPE (Llama 3, Qwen, SmolLM, GPT-2 style) and SentencePiece-style BPE with byte
//! fallback (Llama 2, Mistral, Gemma, Phi-3), see [`tokenizer_metadata`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use serde_json::Value as Json;
use sha2::Digest as _;

/// A folder's architecture: the engine's own (Qwen3-MoE folders, whose experts are separate tensors, are refused).
use crate::engine::arch::Architecture as Arch;
use crate::engine::error::{EngineError, Result};
use crate::engine::files::gguf_write::{self, TensorEntry};

/// Bumped when the conversion's output changes, so cached conversions are redone.
const CONVERTER_VERSION: u32 = 1;

/// Whether `path` is a Hugging Face model folder.
pub fn is_folder(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// The snapshot folder of `repo` (`org/name`) in the local hf-hub cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`,
/// else `~/.cache/huggingface/hub`): the revision `refs/main` names, else the only snapshot.
pub fn hub_snapshot(repo: &str) -> Option<PathBuf> {
    let root = std::env::var_os("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
        })?;
    hub_snapshot_in(&root, repo)
}

/// [`hub_snapshot`] in the hub cache at `root`.
pub fn hub_snapshot_in(root: &Path, repo: &str) -> Option<PathBuf> {
    let (org, name) = repo.split_once('/')?;
    if org.is_empty() || name.is_empty() || name.contains('/') || org.starts_with('.') {
        return None;
    }
    let dir = root.join(format!("models--{org}--{name}"));
    let snapshots = dir.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(dir.join("refs/main")) {
        let snap = snapshots.join(rev.trim());
        if snap.is_dir() {
            return Some(snap);
        }
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    (all.len() == 1).then(|| all.remove(0))
}

fn bad(folder: &Path, message: impl Into<String>) -> EngineError {
    EngineError::InvalidModelFolder {
        path: folder.to_path_buf(),
        message: message.into(),
    }
}

fn read_json(folder: &Path, name: &str) -> Result<Option<Json>> {
    let path = folder.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| bad(folder, format!("{name}: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EngineError::io(format!("reading {}", path.display()), e)),
    }
}

/// The safetensors files of a folder, in name order; with an index, exactly the files it names.
fn weight_files(folder: &Path) -> Result<Vec<PathBuf>> {
    if let Some(index) = read_json(folder, "model.safetensors.index.json")? {
        let map = index["weight_map"]
            .as_object()
            .ok_or_else(|| bad(folder, "model.safetensors.index.json has no weight_map"))?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        files.sort();
        files.dedup();
        return files
            .into_iter()
            .map(|f| {
                let p = folder.join(&f);
                match p.is_file() {
                    true => Ok(p),
                    false => Err(bad(
                        folder,
                        format!("the index names {f}, which is missing"),
                    )),
                }
            })
            .collect();
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder)
        .map_err(|e| EngineError::io(format!("listing {}", folder.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad(folder, "no *.safetensors files"));
    }
    Ok(files)
}

/// Converts `folder` into a GGUF under `home/converted/` (once; later calls return the cached file).
pub fn convert(folder: &Path, home: &Path) -> Result<PathBuf> {
    let config = read_json(folder, "config.json")?.ok_or_else(|| bad(folder, "no config.json"))?;
    let files = weight_files(folder)?;
    let mut key = sha2::Sha256::new();
    key.update(CONVERTER_VERSION.to_le_bytes());
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        key.update(std::fs::read(folder.join(name)).unwrap_or_default());
    }
    for f in &files {
        let meta = std::fs::metadata(f).map_err(|e| EngineError::io(f.display().to_string(), e))?;
        key.update(f.file_name().unwrap_or_default().as_encoded_bytes());
        key.update(meta.len().to_le_bytes());
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        key.update(mtime.map_or(0, |d| d.as_nanos()).to_le_bytes());
    }
    let stem = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let out = home.join("converted").join(format!(
        "{stem}-{}.gguf",
        &hex::encode(key.finalize())[..16]
    ));
    if out.is_file() {
        return Ok(out);
    }
    check_config(folder, &config)?;
    let arch = Arch::of(folder, &config)?;
    let mut metadata = arch.metadata(folder, &config, &stem)?;
    metadata.extend(tokenizer_metadata(folder)?);
    // SAFETY: the files are mapped read-only for the length of this conversion; a file changed underneath by
    // another process is that process's fault, as with any model file, and is caught by the size checks below.
    let tensors = unsafe { candle_core::safetensors::MmapedSafetensors::multi(&files) }
        .map_err(|e| bad(folder, format!("reading the safetensors: {e}")))?;
    let plan = arch.plan(folder, &config, &tensors)?;
    let entries: Vec<TensorEntry> = plan.iter().map(|p| p.entry.clone()).collect();
    tracing::info!(folder = %folder.display(), out = %out.display(), tensors = entries.len(), "converting a Hugging Face folder to GGUF");
    gguf_write::write(&out, &metadata, &entries, |i, w| {
        let p = &plan[i];
        if let Some(values) = &p.values {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            return w.write_all(&bytes);
        }
        let view = tensors
            .get(&p.source)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let bytes = p.transform.apply(view.data(), view.dtype(), &p.entry)?;
        w.write_all(&bytes)
    })?;
    Ok(out)
}

/// What happens to a tensor's bytes on the way.
#[derive(Debug, Clone, Copy)]
enum Transform {
    /// Copied as stored.
    Copy,
    /// Converted to f32 (1-D tensors: norms, biases).
    F32,
    /// f32 plus one (Gemma's `1 + w` norms).
    F32PlusOne,
    /// Rows permuted for interleaved rotation (llama's q and k), `heads` heads of `rows / heads`.
    Permute { heads: usize },
}

struct Planned {
    source: String,
    entry: TensorEntry,
    transform: Transform,
    /// Values computed from `config.json` (rope factors) instead of a safetensors tensor.
    values: Option<Vec<f32>>,
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

/// Refuses sizes no real model has before anything is computed or allocated from them (a folder's
/// `config.json` is input from whoever made it): the same bounds as a GGUF file's.
fn check_config(folder: &Path, c: &Json) -> Result<()> {
    use crate::engine::arch::{MAX_CONTEXT, MAX_HEADS, MAX_HEAD_DIM, MAX_HIDDEN, MAX_LAYERS};
    let limits = [
        ("num_hidden_layers", &c["num_hidden_layers"], MAX_LAYERS),
        ("num_attention_heads", &c["num_attention_heads"], MAX_HEADS),
        ("num_key_value_heads", &c["num_key_value_heads"], MAX_HEADS),
        ("head_dim", &c["head_dim"], MAX_HEAD_DIM),
        ("hidden_size", &c["hidden_size"], MAX_HIDDEN),
        ("intermediate_size", &c["intermediate_size"], 8 * MAX_HIDDEN),
        (
            "max_position_embeddings",
            &c["max_position_embeddings"],
            MAX_CONTEXT,
        ),
        ("vocab_size", &c["vocab_size"], 1 << 22),
        (
            "rope_scaling.original_max_position_embeddings",
            &c["rope_scaling"]["original_max_position_embeddings"],
            MAX_CONTEXT,
        ),
    ];
    for (key, value, high) in limits {
        if value.is_null() {
            continue;
        }
        match value.as_u64() {
            Some(v) if (1..=high as u64).contains(&v) => {}
            _ => {
                return Err(bad(
                    folder,
                    format!("config.json: {key} {value} is outside 1..={high}"),
                ))
            }
        }
    }
    let heads = get_usize(c, "num_attention_heads").unwrap_or(1);
    if get_usize(c, "hidden_size").is_some_and(|h| h / heads.max(1) > MAX_HEAD_DIM)
        && c["head_dim"].is_null()
    {
        return Err(bad(
            folder,
            format!("config.json: a head width over {MAX_HEAD_DIM}"),
        ));
    }
    if let Some(f) = c["partial_rotary_factor"].as_f64() {
        if !(f > 0.0 && f <= 1.0) {
            return Err(bad(
                folder,
                format!("config.json: partial_rotary_factor {f} is outside (0, 1]"),
            ));
        }
    }
    Ok(())
}

fn get_usize(c: &Json, key: &str) -> Option<usize> {
    c[key].as_u64().map(|v| v as usize)
}

/// What a folder's `config.json` says, per architecture (methods local to this module).
impl Arch {
    fn of(folder: &Path, c: &Json) -> Result<Self> {
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

    fn metadata(self, folder: &Path, c: &Json, stem: &str) -> Result<Vec<(String, Value)>> {
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
    fn plan(
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
    fn apply(
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

/// `tokenizer.ggml.*` from `tokenizer.json` and `tokenizer_config.json` (and the chat template): byte-level BPE
/// as `gpt2` with its `pre`; SentencePiece-style BPE (byte fallback, `▁`; Llama 2, Mistral, Gemma, Phi-3) as
/// `llama` with scores from the merge order (a merge's rank, negated, is its token's score, so the
/// highest-scoring pair merges as the lowest-ranked merge would) and `add_space_prefix` from a `▁` prepend.
pub fn tokenizer_metadata(folder: &Path) -> Result<Vec<(String, Value)>> {
    let tj =
        read_json(folder, "tokenizer.json")?.ok_or_else(|| bad(folder, "no tokenizer.json"))?;
    let model = &tj["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(bad(
            folder,
            format!(
                "tokenizer.json model {} is not supported (BPE)",
                model["type"]
            ),
        ));
    }
    let sentencepiece = model["byte_fallback"].as_bool() == Some(true)
        || tj["decoder"].to_string().contains("ByteFallback");
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| bad(folder, "tokenizer.json has no model.vocab"))?;
    let mut tokens: BTreeMap<u64, (String, i32)> = vocab
        .iter()
        .filter_map(|(t, id)| id.as_u64().map(|id| (id, (t.clone(), 1))))
        .collect();
    for added in tj["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(content)) = (added["id"].as_u64(), added["content"].as_str()) else {
            continue;
        };
        let kind = if added["special"].as_bool() == Some(true) {
            3
        } else {
            4
        };
        tokens.insert(id, (content.to_owned(), kind));
    }
    let n = tokens.keys().last().map_or(0, |&id| id + 1);
    if n as usize != tokens.len() {
        return Err(bad(folder, "tokenizer.json's ids are not dense"));
    }
    let merges: Vec<Value> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            Json::String(s) => Some(s.clone()),
            Json::Array(pair) => Some(format!(
                "{} {}",
                pair.first()?.as_str()?,
                pair.get(1)?.as_str()?
            )),
            _ => None,
        })
        .map(Value::String)
        .collect();
    let tc = read_json(folder, "tokenizer_config.json")?.unwrap_or(Json::Null);
    let token_text = |v: &Json| v.as_str().or(v["content"].as_str()).map(str::to_owned);
    if sentencepiece {
        // Byte pieces and the unknown token get llama.cpp's token types.
        let unk = token_text(&tc["unk_token"]).or(model["unk_token"].as_str().map(str::to_owned));
        for (text, kind) in tokens.values_mut() {
            if *kind == 1 && crate::text::spm::parse_byte_token(text).is_some() {
                *kind = 6;
            } else if unk.as_deref() == Some(text.as_str()) {
                *kind = 2;
            }
        }
    }
    let id_of = |text: &str| {
        tokens
            .iter()
            .find(|(_, (t, _))| t == text)
            .map(|(&id, _)| id as u32)
    };
    let mut m: Vec<(String, Value)> = Vec::new();
    if sentencepiece {
        let mut score: std::collections::HashMap<String, f32> = std::collections::HashMap::new();
        for (rank, merge) in merges.iter().enumerate() {
            if let Value::String(merge) = merge {
                score
                    .entry(merge.replacen(' ', "", 1))
                    .or_insert(-(rank as f32));
            }
        }
        let scores = tokens
            .values()
            .map(|(t, _)| Value::F32(score.get(t).copied().unwrap_or(0.0)))
            .collect();
        let prepend = tj["normalizer"].to_string().contains("\"Prepend\"")
            || tj["pre_tokenizer"]["prepend_scheme"]
                .as_str()
                .is_some_and(|s| s != "never");
        m.extend([
            ("tokenizer.ggml.model".into(), Value::String("llama".into())),
            ("tokenizer.ggml.scores".into(), Value::Array(scores)),
            (
                "tokenizer.ggml.add_space_prefix".into(),
                Value::Bool(prepend),
            ),
        ]);
    } else {
        let pre = pre_tokenizer_name(&tj["pre_tokenizer"]).ok_or_else(|| {
            bad(
                folder,
                format!("unrecognised pre-tokenizer {}", tj["pre_tokenizer"]),
            )
        })?;
        m.extend([
            ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
            ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
            ("tokenizer.ggml.merges".into(), Value::Array(merges)),
        ]);
    }
    m.extend([
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(
                tokens
                    .values()
                    .map(|(t, _)| Value::String(t.clone()))
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(tokens.values().map(|(_, k)| Value::I32(*k)).collect()),
        ),
    ]);
    for (key, field) in [("bos", "bos_token"), ("eos", "eos_token")] {
        if let Some(id) = token_text(&tc[field]).and_then(|t| id_of(&t)) {
            m.push((format!("tokenizer.ggml.{key}_token_id"), Value::U32(id)));
        }
    }
    if let Some(add) = tc["add_bos_token"].as_bool() {
        m.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(add)));
    }
    let template = match &tc["chat_template"] {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str().map(str::to_owned)),
        _ => std::fs::read_to_string(folder.join("chat_template.jinja")).ok(),
    };
    if let Some(t) = template {
        m.push(("tokenizer.chat_template".into(), Value::String(t)));
    }
    Ok(m)
}

/// llama.cpp's `pre` name for a `tokenizer.json` pre-tokenizer, recognised by its regex (Hugging Face's spelling
/// or llama.cpp's) and shape.
fn pre_tokenizer_name(pre: &Json) -> Option<&'static str> {
    const LLAMA3_HF: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2_HF: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let kind = pre["type"].as_str()?;
    if kind == "ByteLevel" {
        return (pre["use_regex"].as_bool() != Some(false)).then_some("gpt2");
    }
    let parts = pre["pretokenizers"].as_array()?;
    let regex = parts
        .iter()
        .find(|p| p["type"] == "Split")
        .and_then(|p| p["pattern"]["Regex"].as_str());
    match regex {
        Some(r) if r == LLAMA3_HF || r == crate::text::tokenizer::LLAMA3_REGEX => Some("llama-bpe"),
        Some(r) if r == QWEN2_HF || r == crate::text::tokenizer::QWEN2_REGEX => Some("qwen2"),
        Some(_) => None,
        None => parts
            .iter()
            .any(|p| p["type"] == "Digits" && p["individual_digits"] == true)
            .then_some("smollm"),
    }
}
