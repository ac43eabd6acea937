//! [`JsonlStore`]: a session kept in one JSONL file. Sessions live in `$AGENTD_HOME/sessions/<cwd slug>/` as
//! `<timestamp>_<uuid>.jsonl` (Pi's layout), with the grounding blobs in `refs/` beside them.
//!
//! Appends go through the file's writer thread (see [`super::file`]) and are applied to the in-memory tree only
//! once acknowledged, so the tree never holds an entry the file lacks. The leaf pointer is not persisted (as in
//! Pi): a reopened session continues from its last entry.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::blobs::BlobStore;
use super::entry::{iso_now, EntryKind, SessionEntry, SessionHeader};
use super::file::{self, FsyncPolicy};
use super::tree::{SessionContext, SessionTree};
use super::writer::Writer;
use super::{Location, SessionError, SessionStore};
use crate::transcript::AgentMessage;

/// How a store writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreOptions {
    pub fsync: FsyncPolicy,
}

/// `$AGENTD_HOME/sessions/<slug of cwd>`: `/home/me/proj` → `--home-me-proj--` (Pi's encoding).
pub fn sessions_dir(cwd: &Path) -> PathBuf {
    sessions_dir_in(&crate::env::agentd_home(), cwd)
}

/// `<home>/sessions/<slug of cwd>` (see [`sessions_dir`]).
pub fn sessions_dir_in(home: &Path, cwd: &Path) -> PathBuf {
    let text = cwd.to_string_lossy();
    let trimmed = text.trim_start_matches(['/', '\\']);
    let slug: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    home.join("sessions").join(format!("--{slug}--"))
}

/// A session file, summarised for a picker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub path: PathBuf,
    pub id: String,
    pub cwd: String,
    /// The latest `session_info` name.
    pub name: Option<String>,
    pub parent_session: Option<String>,
    pub created: String,
    /// The latest entry's timestamp (the header's when there is none).
    pub modified: String,
    pub message_count: usize,
    /// The first user message (shortened), or `(no messages)`.
    pub first_message: String,
}

struct State {
    tree: SessionTree,
    leaf: Option<String>,
}

/// A session in one JSONL file. Share it with `Arc`.
pub struct JsonlStore {
    path: PathBuf,
    state: Mutex<State>,
    /// Held across a whole append (id, write, acknowledgement, insert) so appends apply in order.
    append_lock: tokio::sync::Mutex<()>,
    writer: Writer,
    blobs: BlobStore,
}

impl std::fmt::Debug for JsonlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("JsonlStore")
            .field("path", &self.path)
            .field("id", &state.tree.header().id)
            .field("entries", &state.tree.len())
            .field("leaf", &state.leaf)
            .finish()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl JsonlStore {
    /// Starts a new session for `cwd` in `dir` (created if needed).
    pub fn create(dir: &Path, cwd: &Path, options: StoreOptions) -> Result<Self, SessionError> {
        Self::create_with(dir, SessionHeader::new(cwd.to_string_lossy()), &[], options)
    }

    /// Starts a new session for `cwd` in its default directory ([`sessions_dir`]).
    pub fn create_for_cwd(cwd: &Path, options: StoreOptions) -> Result<Self, SessionError> {
        Self::create(&sessions_dir(cwd), cwd, options)
    }

    fn create_with(
        dir: &Path,
        header: SessionHeader,
        entries: &[SessionEntry],
        options: StoreOptions,
    ) -> Result<Self, SessionError> {
        std::fs::create_dir_all(dir).map_err(|e| SessionError::io(dir, e))?;
        let stamp = header.timestamp.replace([':', '.'], "-");
        let path = dir.join(format!("{stamp}_{}.jsonl", header.id));
        let mut lines = vec![header.to_line()];
        lines.extend(entries.iter().map(SessionEntry::to_line));
        let mut tree = SessionTree::new(header);
        for e in entries {
            tree.insert(e.clone(), &Location::append(Some(path.clone())))?;
        }
        file::create(&path, &lines)?;
        let valid_len = std::fs::metadata(&path)
            .map_err(|e| SessionError::io(&path, e))?
            .len();
        Self::start(path, tree, valid_len, options, false)
    }

    /// Opens an existing session file; the leaf is its last entry.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Self, SessionError> {
        let loaded = file::load(path)?;
        Self::start(
            path.to_path_buf(),
            loaded.tree,
            loaded.valid_len,
            options,
            true,
        )
    }

    fn start(
        path: PathBuf,
        tree: SessionTree,
        valid_len: u64,
        options: StoreOptions,
        resumed: bool,
    ) -> Result<Self, SessionError> {
        let writer = Writer::open(&path, valid_len, options.fsync)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let leaf = tree.last_id().map(str::to_string);
        tracing::info!(
            name: "session.start",
            session_id = %tree.header().id,
            path = %path.display(),
            cwd = %tree.header().cwd,
            resumed,
            entries = tree.len(),
        );
        Ok(Self {
            path,
            state: Mutex::new(State { tree, leaf }),
            append_lock: tokio::sync::Mutex::new(()),
            writer,
            blobs: BlobStore::beside(&dir),
        })
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until every acknowledged append is also synced (useful under a lax fsync policy).
    pub async fn sync(&self) -> Result<(), SessionError> {
        self.writer.sync().await
    }

    /// A new session file in the same directory holding the path from the root to `leaf` (`None`: the current
    /// leaf) — Pi's "fork": the branch continues on its own. Labels on that path are kept.
    pub fn fork(
        &self,
        leaf: Option<&str>,
        options: StoreOptions,
    ) -> Result<JsonlStore, SessionError> {
        let (header, entries) = {
            let state = lock(&self.state);
            let leaf = leaf.map(str::to_string).or_else(|| state.leaf.clone());
            let path = state.tree.path(leaf.as_deref())?;
            let on_path: std::collections::HashSet<&str> =
                path.iter().map(|e| e.id.as_str()).collect();
            // The path without its label entries (relinked into one chain), then the labels that still apply.
            let mut entries: Vec<SessionEntry> = Vec::new();
            let mut parent: Option<String> = None;
            for e in path
                .iter()
                .filter(|e| !matches!(e.kind, EntryKind::Label { .. }))
            {
                let mut e = (*e).clone();
                e.parent_id = parent.replace(e.id.clone());
                entries.push(e);
            }
            let mut labels: Vec<(&str, &str)> = state
                .tree
                .labels()
                .into_iter()
                .filter(|(t, _)| on_path.contains(t))
                .collect();
            labels.sort();
            for (target, label) in labels {
                let id = state.tree.new_id();
                entries.push(SessionEntry::new(
                    id.clone(),
                    parent.replace(id),
                    EntryKind::Label {
                        target_id: target.to_string(),
                        label: Some(label.to_string()),
                    },
                ));
            }
            let mut header = SessionHeader::new(state.tree.header().cwd.clone());
            header.parent_session = Some(self.path.display().to_string());
            (header, entries)
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        Self::create_with(dir, header, &entries, options)
    }

    /// The sessions in `dir`, newest activity first. A missing directory has none; one that cannot be read is
    /// an error. Files that are not sessions are skipped with a warning.
    pub fn list(dir: &Path) -> Result<Vec<SessionInfo>, SessionError> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SessionError::UnreadableDir {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        let mut out = Vec::new();
        for item in rd {
            let item = item.map_err(|source| SessionError::UnreadableDir {
                path: dir.to_path_buf(),
                source,
            })?;
            let path = item.path();
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                continue;
            }
            // The file's own modification time breaks ties between entries stamped in the same millisecond.
            let touched = item.metadata().and_then(|m| m.modified()).ok();
            match file::load(&path) {
                Ok(loaded) => out.push((info(path, &loaded.tree), touched)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable session file")
                }
            }
        }
        out.sort_by(|(a, at), (b, bt)| {
            b.modified
                .cmp(&a.modified)
                .then(bt.cmp(at))
                .then(b.created.cmp(&a.created))
        });
        Ok(out.into_iter().map(|(i, _)| i).collect())
    }

    /// The sessions of working directory `cwd` ([`sessions_dir`]).
    pub fn list_for_cwd(cwd: &Path) -> Result<Vec<SessionInfo>, SessionError> {
        Self::list(&sessions_dir(cwd))
    }

    fn leaf_or_current(&self, leaf: Option<&str>) -> Option<String> {
        leaf.map(str::to_string)
            .or_else(|| lock(&self.state).leaf.clone())
    }
}

fn info(path: PathBuf, tree: &SessionTree) -> SessionInfo {
    let header = tree.header();
    let mut name = None;
    let mut message_count = 0;
    let mut first_message = None;
    for e in tree.entries() {
        match &e.kind {
            EntryKind::SessionInfo { name: Some(n) } if !n.trim().is_empty() => {
                name = Some(n.trim().to_string())
            }
            EntryKind::Message { message } => {
                message_count += 1;
                if let (None, AgentMessage::User { content, .. }) = (&first_message, message) {
                    first_message = Some(content.chars().take(200).collect::<String>());
                }
            }
            _ => {}
        }
    }
    SessionInfo {
        path,
        id: header.id.clone(),
        cwd: header.cwd.clone(),
        name,
        parent_session: header.parent_session.clone(),
        created: header.timestamp.clone(),
        modified: tree
            .entries()
            .last()
            .map_or_else(|| header.timestamp.clone(), |e| e.timestamp.clone()),
        message_count,
        first_message: first_message.unwrap_or_else(|| "(no messages)".into()),
    }
}

impl Drop for JsonlStore {
    fn drop(&mut self) {
        let state = lock(&self.state);
        tracing::info!(
            name: "session.end",
            session_id = %state.tree.header().id,
            path = %self.path.display(),
            entries = state.tree.len(),
        );
    }
}

#[async_trait::async_trait]
impl SessionStore for JsonlStore {
    fn header(&self) -> SessionHeader {
        lock(&self.state).tree.header().clone()
    }

    fn leaf(&self) -> Option<String> {
        lock(&self.state).leaf.clone()
    }

    fn entries(&self) -> Vec<SessionEntry> {
        lock(&self.state).tree.entries().to_vec()
    }

    fn entry(&self, id: &str) -> Option<SessionEntry> {
        lock(&self.state).tree.get(id).cloned()
    }

    async fn append(&self, kind: EntryKind) -> Result<SessionEntry, SessionError> {
        let _turn = self.append_lock.lock().await;
        let entry = {
            let state = lock(&self.state);
            SessionEntry {
                id: state.tree.new_id(),
                parent_id: state.leaf.clone(),
                timestamp: iso_now(),
                kind,
            }
        };
        self.write(entry.clone()).await?;
        Ok(entry)
    }

    async fn append_entry(&self, entry: SessionEntry) -> Result<(), SessionError> {
        let _turn = self.append_lock.lock().await;
        self.write(entry).await
    }

    fn branch(&self, from: Option<&str>) -> Result<(), SessionError> {
        let mut state = lock(&self.state);
        if let Some(id) = from {
            if state.tree.get(id).is_none() {
                return Err(SessionError::UnknownEntry(id.to_string()));
            }
        }
        state.leaf = from.map(str::to_string);
        Ok(())
    }

    fn checkout(&self, leaf: &str) -> Result<(), SessionError> {
        let mut state = lock(&self.state);
        if state.tree.get(leaf).is_none() {
            return Err(SessionError::UnknownEntry(leaf.to_string()));
        }
        if !state.tree.is_leaf(leaf) {
            return Err(SessionError::NotALeaf(leaf.to_string()));
        }
        state.leaf = Some(leaf.to_string());
        Ok(())
    }

    fn rewind(&self, n: usize) -> Result<Option<String>, SessionError> {
        let mut state = lock(&self.state);
        let target = state.tree.rewind_target(state.leaf.as_deref(), n)?;
        state.leaf = target.clone();
        Ok(target)
    }

    fn build_context(&self, leaf: Option<&str>) -> Result<SessionContext, SessionError> {
        let leaf = self.leaf_or_current(leaf);
        lock(&self.state).tree.build_context(leaf.as_deref())
    }

    fn render_tree(&self) -> String {
        let state = lock(&self.state);
        state.tree.render(state.leaf.as_deref())
    }

    fn blobs(&self) -> BlobStore {
        self.blobs.clone()
    }
}

impl JsonlStore {
    /// Validates, writes (acknowledged), then applies `entry` and moves the leaf to it. Callers hold `append_lock`.
    async fn write(&self, entry: SessionEntry) -> Result<(), SessionError> {
        let at = Location::append(Some(self.path.clone()));
        lock(&self.state).tree.validate(&entry, &at)?;
        self.writer.append(entry.to_line()).await?;
        let mut state = lock(&self.state);
        state.leaf = Some(entry.id.clone());
        state.tree.insert(entry, &at)
    }
}
