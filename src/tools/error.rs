//! Why a tool call failed: the error every tool, the tool policy and the file helpers return.

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model asked for something that cannot be done (bad path, no match, non-zero exit, …). The caller turns
    /// the text into an `is_error` tool result the model sees, and the loop goes on.
    #[error("{0}")]
    RespondToModel(String),
    /// An invariant broke (the tool itself is unusable). The caller aborts the run.
    #[error("fatal tool error: {0}")]
    Fatal(String),
}
