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

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use sha2::Digest as _;

use crate::engine::arch::Architecture as Arch;
use crate::engine::error::{EngineError, Result};
use crate::engine::files::gguf_write::{self, TensorEntry};

mod mapping;
mod tokenizer;

pub use tokenizer::tokenizer_metadata;

/// Bumped when the conversion's output changes, so cached conversions are redone.
const CONVERTER_VERSION: u32 = 1;

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
