//! `AppError`: every way building or driving a coding session can fail, classified so each door can answer in
//! its own terms (the CLI's exit codes, the server's HTTP statuses).

use crate::session::SessionError;

/// What went wrong in the application layer. What a caller should do is written on each variant.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A setting or argument is wrong: an unknown tool or policy tag, a workspace that does not exist, an
    /// unreadable prompt file, a session that cannot be found. Fix the input (CLI exit 2, HTTP 400).
    #[error("{0}")]
    Usage(String),
    /// The thing named does not exist (a saved session id, an entry of the tree). CLI exit 2, HTTP 404.
    #[error("{0}")]
    NotFound(String),
    /// The model backend cannot be had: the model does not load, the remote server is unreachable or refuses.
    /// Fix the model or the server (CLI exit 3, HTTP 503).
    #[error("{0}")]
    Backend(String),
    /// The agent is running and the operation needs it idle. Wait for it or abort it (HTTP 409).
    #[error("{0}")]
    Busy(String),
    /// The session file could not be read or written, or a tree operation was refused.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The operation failed for another reason (a failed compaction, a failed model switch).
    #[error("{0}")]
    Failed(String),
}

impl AppError {
    pub fn usage(message: impl Into<String>) -> Self {
        AppError::Usage(message.into())
    }

    pub fn failed(message: impl Into<String>) -> Self {
        AppError::Failed(message.into())
    }
}
