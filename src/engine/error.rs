//! `EngineError`: every way the engine boundary (fetching, loading, tokenizing, templating, generating) can fail.
//!
//! What a caller should do with each variant is written on it. None of them is a panic: bad input of any
//! kind ends here as a value with a message that names the offending thing.

use std::path::PathBuf;

use crate::model_files::FilesError;
use crate::schema::SchemaError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read or written. Check the path and permissions.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a usable GGUF (wrong magic, truncated, unreadable tensor). Re-download it.
    #[error("invalid GGUF file {path}: {message}")]
    InvalidGguf { path: PathBuf, message: String },
    /// A Hugging Face model folder that cannot be converted (missing or malformed files, unsupported parts).
    #[error("model folder {path}: {message}")]
    InvalidModelFolder { path: PathBuf, message: String },
    /// A metadata key the architecture needs is absent from the GGUF.
    #[error("GGUF metadata key `{key}` is missing or has the wrong type")]
    MissingMetadata { key: String },
    /// The GGUF's `general.architecture` has no implementation here.
    #[error("unsupported architecture `{arch}` (supported: {})", supported.join(", "))]
    UnsupportedArchitecture {
        arch: String,
        supported: Vec<String>,
    },
    /// The tokenizer could not be built or could not encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A synthetic checkpoint cannot be made as asked (unknown architecture or size, inconsistent shape).
    #[error("synthetic model: {0}")]
    Synth(String),
    /// Finding, fetching or verifying the model file failed (see [`FilesError`]'s variants).
    #[error(transparent)]
    Files(#[from] FilesError),
    /// The requested device is not available in this build or on this machine.
    #[error("device: {0}")]
    Device(String),
    /// A sampling parameter is out of range. Fix the request.
    #[error("invalid sampling parameter: {0}")]
    InvalidSampling(String),
    /// The prompt (plus at least one generated token) does not fit the model's context window.
    #[error("prompt is {tokens} tokens, but the model's context window is {limit} tokens")]
    PromptTooLong { tokens: usize, limit: usize },
    /// The request needs more KV positions than the whole KV cache holds, even with nothing else running.
    #[error(
        "the request needs {tokens} KV positions but the KV cache holds {capacity} (raise --kv-cache-memory)"
    )]
    KvCacheTooSmall { tokens: usize, capacity: usize },
    /// Engine settings that contradict each other or make no sense.
    #[error("invalid engine settings: {0}")]
    Config(String),
    /// An empty prompt: there is nothing to condition on.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A tool, schema, `tool_choice` or `response_format` was refused (see [`SchemaError`]'s variants). Fix the
    /// request.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The model's text side (metadata, tokenizer, template, tool-call format) failed.
    #[error(transparent)]
    Text(#[from] crate::text::TextError),
    /// A tensor operation failed inside candle (shape mismatch, device error). An internal error.
    #[error("tensor: {0}")]
    Candle(#[from] candle_core::Error),
    /// A bug: an invariant broke inside the engine. Report it; the engine keeps serving other requests.
    #[error("internal engine error: {0}")]
    Internal(String),
    /// The engine thread has stopped; no further requests can be served.
    #[error("the engine thread has stopped")]
    EngineGone,
}

impl EngineError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EngineError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
