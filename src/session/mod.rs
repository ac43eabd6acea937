//! Sessions (Pi's session tree, JSONL v3): every message, model change, compaction and label of a conversation is
//! an entry `{type, id, parentId, timestamp, …}` appended to one file; a branch is a new child of an old entry, so
//! history is never rewritten. What the model sees is rebuilt from any leaf with [`SessionStore::build_context`].
//!
//! - [`entry`]: the header and the entry types (the file format).
//! - [`tree`]: the in-memory tree — validation, paths, `build_context`, rewind, the printed tree.
//! - [`file`](mod@file): loading a file (a torn last line is skipped, a corrupt middle line is an error naming
//!   the line), creating one, the fsync policy.
//! - [`writer`]: appending — an exclusive lock per file, one small thread pool for all files, acknowledged
//!   appends.
//! - [`jsonl`]: [`JsonlStore`], the store over one file, plus listing, forking and where sessions live.
//! - [`pi`]: reading files Pi wrote (its message shapes rewritten into ours as they load).
//! - [`blobs`]: content-addressed tool results dropped by compaction (grounding; read back by the `recall` tool).
//!
//! The store knows messages ([`crate::transcript`]) but not the agent: keeping a store in step with an agent is
//! the application layer's `Recorder`.

pub mod blobs;
pub mod entry;
pub mod file;
pub mod jsonl;
pub mod pi;
pub mod tree;
pub mod writer;

use std::fmt;
use std::path::PathBuf;

pub use blobs::BlobStore;
pub use entry::{EntryKind, SessionEntry, SessionHeader, SESSION_VERSION};
pub use file::FsyncPolicy;
pub use jsonl::{sessions_dir, sessions_dir_in, JsonlStore, SessionInfo, StoreOptions};
pub use tree::{ModelRef, SessionContext, SessionTree};

/// Where a problem was found: a file and line while loading, or an operation on a live store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: Option<PathBuf>,
    /// 1-based line number in the file.
    pub line: Option<usize>,
}

impl Location {
    /// A line of a file being loaded.
    pub fn line(path: impl Into<PathBuf>, line: usize) -> Self {
        Self {
            path: Some(path.into()),
            line: Some(line),
        }
    }

    /// An append to a live store (no line yet).
    pub fn append(path: Option<PathBuf>) -> Self {
        Self { path, line: None }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (Some(p), Some(l)) => write!(f, "{}:{l}", p.display()),
            (Some(p), None) => write!(f, "{} (append)", p.display()),
            (None, Some(l)) => write!(f, "line {l}"),
            (None, None) => f.write_str("append"),
        }
    }
}

/// Every way a session operation can fail. What the caller should do is written on each variant.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The file or directory could not be read, created or written (permissions, disk full, missing parent).
    /// Fix the path or the disk; nothing was changed in memory.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The sessions directory exists but cannot be listed (not a directory, no permission). Fix the path or its
    /// permissions (`AGENTD_HOME`).
    #[error("cannot read the session directory {}: {source}", path.display())]
    UnreadableDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with a session header (empty, or not a session file). Open another file.
    #[error("{}: not a session file: {message}", path.display())]
    NotASession { path: PathBuf, message: String },
    /// The header names a format version this build does not read. Use a build that knows it.
    #[error("{}: unsupported session version {version} (this build reads version {expected})", path.display())]
    UnsupportedVersion {
        path: PathBuf,
        version: String,
        expected: u32,
    },
    /// A line that is not a valid entry, before the last line (a torn *last* line is skipped instead). The file
    /// was damaged or edited by hand: repair or remove that line.
    #[error("{location}: corrupt session entry: {message}")]
    Corrupt { location: Location, message: String },
    /// An entry names a parent (or a compaction's first kept entry, or a label's target) that no earlier entry has.
    /// In a file: the file is damaged. On append: pass an existing id.
    #[error("{location}: entry `{id}` refers to `{missing}` ({field}), which does not exist")]
    MissingParent {
        location: Location,
        id: String,
        field: &'static str,
        missing: String,
    },
    /// Two entries share an id. In a file: the file is damaged (ids must be unique). On append: use a fresh id.
    #[error("{location}: entry id `{id}` is already used")]
    DuplicateId { location: Location, id: String },
    /// `branch`/`checkout`/`build_context`/`fork` named an entry that is not in this session. Pass an id from
    /// [`SessionStore::entries`].
    #[error("no entry `{0}` in this session")]
    UnknownEntry(String),
    /// `checkout` named an entry that has children. Check out a leaf, or `branch` from it.
    #[error("entry `{0}` is not a leaf (it has children); use branch to continue from it")]
    NotALeaf(String),
    /// `rewind` asked for more messages than the current path has.
    #[error("cannot rewind {requested} messages: the current path has {available}")]
    RewindTooFar { requested: usize, available: usize },
    /// A write failed earlier, so the store refuses further appends (the file may be missing entries that the
    /// caller was told about in that error). Reopen the session.
    #[error("the session writer for {} stopped: {message}", path.display())]
    WriterFailed { path: PathBuf, message: String },
    /// No stored tool result has this ref (or the prefix is too short). Use a ref from a compaction summary.
    #[error("no stored tool result matches ref `{0}`")]
    UnknownRef(String),
    /// Several stored tool results start with this ref. Give more characters of it.
    #[error("ref `{reference}` is ambiguous: it matches {}", candidates.join(", "))]
    AmbiguousRef {
        reference: String,
        candidates: Vec<String>,
    },
    /// Manual compaction could not be made (nothing to compact, or it was cancelled). Nothing was changed.
    #[error("compaction: {0}")]
    Compaction(String),
    /// The agent is running; tree operations that replace its transcript need it idle. Wait for it.
    #[error("the agent is running; wait for it to finish before changing the session")]
    AgentRunning,
    /// Another process has the session file open for writing (its exclusive lock is held). Close that session
    /// (or that `agentd`) first, or fork the session instead.
    #[error("{}: the session is open in another process (its file is locked)", path.display())]
    Locked { path: PathBuf },
}

impl SessionError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SessionError::Io {
            path: path.into(),
            source,
        }
    }
}

/// A session tree behind some storage. Reads are cheap snapshots; appends are acknowledged only once the entry is
/// stored (for [`JsonlStore`]: written, flushed and — by default — fsynced).
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync {
    /// The header: session id, cwd, format version.
    fn header(&self) -> SessionHeader;

    /// The current leaf: where the next append goes (`None`: before the first entry).
    fn leaf(&self) -> Option<String>;

    /// Every entry, in append order.
    fn entries(&self) -> Vec<SessionEntry>;

    /// One entry by id.
    fn entry(&self, id: &str) -> Option<SessionEntry>;

    /// Appends `kind` as a child of the current leaf, which then moves to it. Returns the stored entry.
    async fn append(&self, kind: EntryKind) -> Result<SessionEntry, SessionError>;

    /// Appends an entry whose id and parent the caller chose (imports, tests). The leaf moves to it.
    /// Errors: [`SessionError::DuplicateId`], [`SessionError::MissingParent`].
    async fn append_entry(&self, entry: SessionEntry) -> Result<(), SessionError>;

    /// Starts a branch: the next append becomes a child of `from` (`None`: a new root). Nothing is written.
    fn branch(&self, from: Option<&str>) -> Result<(), SessionError>;

    /// Makes `leaf` (an entry without children) the current leaf.
    fn checkout(&self, leaf: &str) -> Result<(), SessionError>;

    /// Moves the leaf back past the last `n` messages of the current path; returns the new leaf.
    fn rewind(&self, n: usize) -> Result<Option<String>, SessionError>;

    /// What the model sees from `leaf` (`None`: the current leaf): the path's messages after the latest
    /// compaction on it, and the latest model on it.
    fn build_context(&self, leaf: Option<&str>) -> Result<SessionContext, SessionError>;

    /// The whole tree as text, the current path marked.
    fn render_tree(&self) -> String;

    /// Where dropped tool results of this session are kept (grounding).
    fn blobs(&self) -> BlobStore;

    /// Branches from `from` and records a summary of the branch that was left (Pi's `branch_summary`).
    async fn branch_with_summary(
        &self,
        from: Option<&str>,
        summary: String,
    ) -> Result<SessionEntry, SessionError> {
        self.branch(from)?;
        self.append(EntryKind::BranchSummary {
            from_id: from.unwrap_or("root").to_string(),
            summary,
            details: serde_json::Value::Null,
        })
        .await
    }
}
