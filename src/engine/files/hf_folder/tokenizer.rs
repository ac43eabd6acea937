//! A folder's tokenizer as llama.cpp's `tokenizer.ggml.*` metadata: byte-level BPE and SentencePiece-style BPE,
//! their merges and scores, the special tokens, the chat template, and the pre-tokenizer recognised by its regex.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde_json::Value as Json;

use super::{bad, read_json};
use crate::engine::error::Result;

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
