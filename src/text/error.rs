//! `TextError`: every way reading a model's text side (its GGUF metadata, tokenizer, chat template, tool-call
//! format) can fail. Each names the offending key, file, token or template line; none is a panic.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A file could not be read. Check the path and permissions.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a usable GGUF (wrong magic, truncated, malformed header). Re-download it.
    #[error("invalid GGUF file {path}: {message}")]
    InvalidGguf { path: PathBuf, message: String },
    /// A metadata key the tokenizer or template needs is absent or of another type.
    #[error("GGUF metadata key `{key}` is missing or has the wrong type")]
    MissingMetadata { key: String },
    /// `tokenizer.ggml.pre` names a pre-tokenizer we do not implement; we never guess one.
    #[error("unsupported tokenizer pre-tokenizer `{pre}` (supported: {})", supported.join(", "))]
    UnsupportedPretokenizer { pre: String, supported: Vec<String> },
    /// The tokenizer could not be built or could not encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A tool-call format name no implementation knows.
    #[error("unknown tool-call format `{name}` (known: {})", known.join(", "))]
    UnknownToolCallFormat { name: String, known: Vec<String> },
}

impl TextError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TextError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = TextError> = std::result::Result<T, E>;
