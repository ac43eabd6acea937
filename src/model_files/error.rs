//! `FilesError`: every way finding, fetching or verifying a model file can fail.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A file could not be read or written. Check the path and permissions.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A model name that no manifest knows.
    #[error("unknown model `{name}` (known models: {})", known.join(", "))]
    UnknownModel { name: String, known: Vec<String> },
    /// A model manifest is malformed.
    #[error("model manifest {name}: {message}")]
    Manifest { name: String, message: String },
    /// No source could provide the model file; `attempts` says what each source answered.
    #[error("could not fetch model `{name}`:\n  {}", attempts.join("\n  "))]
    Fetch { name: String, attempts: Vec<String> },
    /// Downloaded or cached bytes do not match the manifest's digest. The file was not used.
    #[error("sha256 mismatch for {path}: expected {expected}, got {actual}")]
    Sha256Mismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    /// An embedding model asked for where a model that generates text is needed.
    #[error(
        "`{0}` is an embedding model: it cannot generate text; serve it (`agentd serve --model {0}`) and ask \
         /v1/embeddings"
    )]
    EmbeddingModel(String),
}

impl FilesError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        FilesError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = FilesError> = std::result::Result<T, E>;
