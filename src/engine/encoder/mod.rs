//! Text encoders: a Hugging Face folder holding a BERT model (`config.json`, `model.safetensors`,
//! `tokenizer.json`, sentence-transformers' `modules.json` and pooling config) turned into one vector per text.
//!
//! [`Encoder`] owns the weights (candle-transformers' BERT), the tokenizer (WordPiece from `tokenizer.json`,
//! its own padding and truncation switched off: we pad batches and truncate at the window ourselves), the
//! window (`sentence_bert_config.json`'s `max_seq_length`, else `max_position_embeddings`) and the pooling
//! ([`pooling`]). A batch is padded to its longest sequence and run in one forward pass with an attention mask.
//! [`worker`] runs an encoder on its own thread and merges concurrent requests into batches.

pub mod pooling;
pub mod worker;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use serde_json::Value;
use tokenizers::Tokenizer;

pub use pooling::{Pooling, PoolingConfig};

use crate::engine::error::{EngineError, Result};

/// A loaded encoder. See the module docs.
pub struct Encoder {
    model: BertModel,
    tokenizer: EncoderTokenizer,
    pooling: PoolingConfig,
    device: Device,
    info: EncoderInfo,
}

/// What a loaded encoder is.
#[derive(Debug, Clone)]
pub struct EncoderInfo {
    pub folder: PathBuf,
    /// The most tokens one input may have (special tokens included).
    pub window: usize,
    /// The vector's width.
    pub dimensions: usize,
    pub vocab_size: usize,
    pub pooling: PoolingConfig,
    /// Weights in bytes (f32).
    pub weight_bytes: u64,
    pub device: String,
}

/// The folder's tokenizer, with sentence-transformers' lower-casing when it asks for it.
#[derive(Clone)]
pub struct EncoderTokenizer {
    plain: Tokenizer,
    truncating: Tokenizer,
    lower_case: bool,
    window: usize,
}

impl EncoderTokenizer {
    /// The ids of `text` with the special tokens the tokenizer adds (`[CLS] … [SEP]`). Longer than the window:
    /// cut to it when `truncate` (as sentence-transformers does), else [`EngineError::PromptTooLong`].
    pub fn encode(&self, text: &str, truncate: bool) -> Result<Vec<u32>> {
        let ids = self.ids(text)?;
        if ids.len() <= self.window {
            return Ok(ids);
        }
        if !truncate {
            return Err(EngineError::PromptTooLong {
                tokens: ids.len(),
                limit: self.window,
            });
        }
        self.ids_with(&self.truncating, text)
    }

    /// The ids of `text` with the special tokens, whatever its length.
    pub fn ids(&self, text: &str) -> Result<Vec<u32>> {
        self.ids_with(&self.plain, text)
    }

    fn ids_with(&self, tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
        let text = match self.lower_case {
            true => std::borrow::Cow::Owned(text.to_lowercase()),
            false => std::borrow::Cow::Borrowed(text),
        };
        tokenizer
            .encode(text.as_ref(), true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    /// Each id's text.
    pub fn token_strs(&self, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&id| self.plain.id_to_token(id).unwrap_or_default())
            .collect()
    }

    /// The text of `ids`, special tokens kept.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.plain
            .decode(ids, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }
}

fn read_json(folder: &Path, name: &str) -> Result<Option<Value>> {
    let path = folder.join(name);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EngineError::InvalidModelFolder {
            path: folder.to_path_buf(),
            message: format!("{name}: {e}"),
        })
}

/// Whether `folder` holds an encoder this module loads (a BERT `config.json`).
pub fn is_encoder_folder(folder: &Path) -> bool {
    read_json(folder, "config.json")
        .ok()
        .flatten()
        .is_some_and(|c| c["model_type"].as_str() == Some("bert"))
}

impl Encoder {
    /// Loads the encoder in `folder` on `device`.
    pub fn load(folder: &Path, device: &Device) -> Result<Encoder> {
        let bad = |message: String| EngineError::InvalidModelFolder {
            path: folder.to_path_buf(),
            message,
        };
        let config_json =
            read_json(folder, "config.json")?.ok_or_else(|| bad("no config.json".into()))?;
        if config_json["model_type"].as_str() != Some("bert") {
            return Err(bad(format!(
                "model_type {} is not an encoder agentd can load (bert)",
                config_json["model_type"]
            )));
        }
        let config: BertConfig = serde_json::from_value(config_json.clone())
            .map_err(|e| bad(format!("config.json: {e}")))?;
        let st = read_json(folder, "sentence_bert_config.json")?;
        let window = st
            .as_ref()
            .and_then(|s| s["max_seq_length"].as_u64())
            .map_or(config.max_position_embeddings, |n| {
                (n as usize).min(config.max_position_embeddings)
            });
        let lower_case = st
            .as_ref()
            .is_some_and(|s| s["do_lower_case"].as_bool() == Some(true));
        let tokenizer = load_tokenizer(folder, window, lower_case)?;
        let pooling = PoolingConfig::read(folder)?;
        let weights: Vec<PathBuf> = std::fs::read_dir(folder)
            .map_err(|e| EngineError::io(format!("reading {}", folder.display()), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        if weights.is_empty() {
            return Err(bad("no *.safetensors file".into()));
        }
        let weight_bytes = weights
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        // SAFETY: the files are memory-mapped read-only; the cache never rewrites a file in place.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&weights, DType::F32, device)? };
        let model = BertModel::load(vb, &config).map_err(|e| bad(format!("weights: {e}")))?;
        let info = EncoderInfo {
            folder: folder.to_path_buf(),
            window,
            dimensions: config.hidden_size,
            vocab_size: config.vocab_size,
            pooling,
            weight_bytes,
            device: crate::engine::device::describe(device),
        };
        Ok(Encoder {
            model,
            tokenizer,
            pooling,
            device: device.clone(),
            info,
        })
    }

    pub fn info(&self) -> &EncoderInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &EncoderTokenizer {
        &self.tokenizer
    }

    /// One vector per sequence of ids, run as one padded batch. Every sequence must be non-empty, within the
    /// window and the vocabulary (the caller checks).
    pub fn encode_batch(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let longest = batch.iter().map(|s| s.len()).max().unwrap_or(0);
        if batch.is_empty() || longest == 0 {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(batch.len() * longest);
        let mut mask = Vec::with_capacity(batch.len() * longest);
        for seq in batch {
            ids.extend_from_slice(seq);
            ids.extend(std::iter::repeat_n(0u32, longest - seq.len()));
            mask.extend(std::iter::repeat_n(1u32, seq.len()));
            mask.extend(std::iter::repeat_n(0u32, longest - seq.len()));
        }
        let shape = (batch.len(), longest);
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?;
        let lengths: Vec<usize> = batch.iter().map(|s| s.len()).collect();
        let pooled = pooling::pool(&hidden, &mask, &lengths, self.pooling)?;
        Ok(pooled.to_dtype(DType::F32)?.to_vec2()?)
    }
}

fn load_tokenizer(folder: &Path, window: usize, lower_case: bool) -> Result<EncoderTokenizer> {
    let path = folder.join("tokenizer.json");
    let mut plain = Tokenizer::from_file(&path)
        .map_err(|e| EngineError::Tokenizer(format!("{}: {e}", path.display())))?;
    plain.with_padding(None);
    plain
        .with_truncation(None)
        .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
    let mut truncating = plain.clone();
    truncating
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: window,
            ..Default::default()
        }))
        .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
    Ok(EncoderTokenizer {
        plain,
        truncating,
        lower_case,
        window,
    })
}
