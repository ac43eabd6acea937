//! A session file on disk: loading it (header checked, every entry validated; a torn last line — a write cut
//! short by a crash — is skipped with a warning and cut off before appending, while a bad line before the last is
//! an error naming the line), and the writer actor that owns the file while it is open.
//!
//! **Durability.** One writer thread owns each open file. An append is one line (the entry's JSON and `\n`)
//! written with a single `write_all` to a file opened in append mode, then — under [`FsyncPolicy::Always`], the
//! default — `fdatasync`ed before the caller is acknowledged (jobs already queued when the thread wakes are
//! written and synced together). An append that was acknowledged is on disk: a `kill -9` of the process cannot
//! lose it, and with `Always` neither can a power loss.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use super::entry::{SessionEntry, SessionHeader, SESSION_VERSION};
use super::tree::SessionTree;
use super::{Location, SessionError};

/// When appended lines are forced to stable storage. In TOML: `fsync = "always"`, `"never"`, or
/// `{ periodic = { interval_ms = 200 } }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// Every append is fsynced before it is acknowledged. Survives power loss.
    #[default]
    Always,
    /// At most every `interval_ms`; appends are acknowledged once written to the OS. Survives a process crash;
    /// a power loss may lose the last interval.
    Periodic { interval_ms: u64 },
    /// Never forced; acknowledged once written to the OS. Survives a process crash, not a power loss.
    Never,
}

/// A file read back: its header, the validated tree, and the torn tail that was skipped, if any.
#[derive(Debug)]
pub struct Loaded {
    pub tree: SessionTree,
    /// Byte length of the valid part; a file longer than this has a torn last line to cut before appending.
    pub valid_len: u64,
    /// The 1-based number of the torn line that was skipped.
    pub torn_line: Option<usize>,
}

/// Reads and validates a session file.
pub fn load(path: &Path) -> Result<Loaded, SessionError> {
    let bytes = std::fs::read(path).map_err(|e| SessionError::io(path, e))?;
    parse(path, &bytes)
}

/// Parses the bytes of a session file (see [`load`]).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, SessionError> {
    // Complete lines end in '\n'; what follows the last '\n' was never acknowledged.
    let mut lines: Vec<(usize, &[u8], u64)> = Vec::new(); // (line number, bytes, end offset incl. '\n')
    let mut start = 0usize;
    let mut torn_tail = None;
    for (n, chunk) in bytes.split(|&b| b == b'\n').enumerate() {
        let end = start + chunk.len();
        if end < bytes.len() {
            lines.push((n + 1, chunk, (end + 1) as u64));
        } else if !chunk.is_empty() {
            torn_tail = Some((n + 1, start as u64));
        }
        start = end + 1;
    }
    // Skip blank lines; they carry nothing.
    lines.retain(|(_, l, _)| !l.iter().all(u8::is_ascii_whitespace));
    let Some(&(first_no, first, mut valid_len)) = lines.first() else {
        let message = if torn_tail.is_some() {
            "the header line is incomplete"
        } else {
            "the file is empty"
        };
        return Err(SessionError::NotASession {
            path: path.to_path_buf(),
            message: message.into(),
        });
    };
    let header = parse_header(path, first_no, first)?;
    let mut tree = SessionTree::new(header);
    let mut torn_line = torn_tail.map(|(n, _)| n);
    if let Some((_, offset)) = torn_tail {
        valid_len = offset;
    }
    let count = lines.len();
    for (i, &(no, line, end)) in lines.iter().enumerate().skip(1) {
        let parsed: Result<Value, _> = serde_json::from_slice(line);
        let value = match parsed {
            Ok(v) => v,
            // The last complete line is unreadable: treat it as torn too (nothing after it to lose).
            Err(_) if i + 1 == count && torn_tail.is_none() => {
                torn_line = Some(no);
                valid_len = end - line.len() as u64 - 1;
                break;
            }
            Err(e) => {
                return Err(SessionError::Corrupt {
                    location: Location::line(path, no),
                    message: format!("not JSON: {e}"),
                })
            }
        };
        let entry: SessionEntry =
            serde_json::from_value(value).map_err(|e| SessionError::Corrupt {
                location: Location::line(path, no),
                message: e.to_string(),
            })?;
        tree.insert(entry, &Location::line(path, no))?;
        if torn_tail.is_none() && i + 1 == count {
            valid_len = end;
        }
    }
    if let Some(n) = torn_line {
        tracing::warn!(
            path = %path.display(),
            line = n,
            "skipping the torn last line of a session file (a write cut short by a crash)"
        );
    }
    Ok(Loaded {
        tree,
        valid_len,
        torn_line,
    })
}

fn parse_header(path: &Path, no: usize, line: &[u8]) -> Result<SessionHeader, SessionError> {
    let not_session = |message: String| SessionError::NotASession {
        path: path.to_path_buf(),
        message,
    };
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| not_session(format!("line {no} (the header) is not JSON: {e}")))?;
    if value.get("type").and_then(Value::as_str) != Some("session") {
        return Err(not_session(format!(
            "line {no} is not a header (expected \"type\": \"session\")"
        )));
    }
    match value.get("version") {
        Some(v) if v.as_u64() == Some(u64::from(SESSION_VERSION)) => {}
        other => {
            return Err(SessionError::UnsupportedVersion {
                path: path.to_path_buf(),
                version: other.map_or_else(|| "(none)".to_string(), Value::to_string),
                expected: SESSION_VERSION,
            })
        }
    }
    serde_json::from_value(value).map_err(|e| not_session(format!("bad header: {e}")))
}

/// Creates a new session file holding only `lines` (the header first), synced, and syncs its directory so the
/// file itself survives a crash. Fails if the file exists.
pub fn create(path: &Path, lines: &[String]) -> Result<(), SessionError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| SessionError::io(path, e))?;
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| SessionError::io(path, e))?;
    if let Some(dir) = path.parent() {
        // Best effort: some filesystems refuse to sync a directory.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

enum Job {
    Append {
        line: Vec<u8>,
        ack: oneshot::Sender<Result<(), String>>,
    },
    /// Acknowledged once everything queued before it is written and synced.
    Sync {
        ack: oneshot::Sender<Result<(), String>>,
    },
}

/// The handle to a file's writer thread. Dropping every handle lets the thread finish its queue and exit.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    path: PathBuf,
}

impl Writer {
    /// Opens `path` for appending (cutting a torn tail back to `valid_len` first) and starts its writer thread.
    pub fn open(path: &Path, valid_len: u64, policy: FsyncPolicy) -> Result<Self, SessionError> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| SessionError::io(path, e))?;
        let len = file
            .metadata()
            .map_err(|e| SessionError::io(path, e))?
            .len();
        if len > valid_len {
            tracing::warn!(path = %path.display(), bytes = len - valid_len, "cutting off the torn last line");
            file.set_len(valid_len)
                .and_then(|()| file.sync_all())
                .map_err(|e| SessionError::io(path, e))?;
        }
        let (tx, rx) = mpsc::channel();
        let thread_path = path.to_path_buf();
        std::thread::Builder::new()
            .name("agentd-session-writer".into())
            .spawn(move || run(file, &thread_path, policy, rx))
            .map_err(|e| SessionError::io(path, e))?;
        Ok(Self {
            tx,
            path: path.to_path_buf(),
        })
    }

    /// Appends one line (without its newline) and waits until it is stored under the fsync policy.
    pub async fn append(&self, line: String) -> Result<(), SessionError> {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let (ack, done) = oneshot::channel();
        self.send(Job::Append { line: bytes, ack }, done).await
    }

    /// Waits until every append queued so far is written and synced (whatever the policy).
    pub async fn sync(&self) -> Result<(), SessionError> {
        let (ack, done) = oneshot::channel();
        self.send(Job::Sync { ack }, done).await
    }

    async fn send(
        &self,
        job: Job,
        done: oneshot::Receiver<Result<(), String>>,
    ) -> Result<(), SessionError> {
        let failed = |message: String| SessionError::WriterFailed {
            path: self.path.clone(),
            message,
        };
        self.tx
            .send(job)
            .map_err(|_| failed("the writer thread is gone".into()))?;
        done.await
            .map_err(|_| failed("the writer thread stopped before acknowledging".into()))?
            .map_err(failed)
    }
}

/// The writer thread: takes the queued jobs, writes the appends, syncs per the policy, acknowledges them.
fn run(mut file: File, path: &Path, policy: FsyncPolicy, rx: mpsc::Receiver<Job>) {
    let mut broken: Option<String> = None;
    let mut last_sync = Instant::now();
    let mut dirty = false;
    loop {
        let first = match policy {
            FsyncPolicy::Periodic { interval_ms } if dirty => {
                match rx.recv_timeout(Duration::from_millis(interval_ms)) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let _ = file.sync_data();
                        dirty = false;
                        last_sync = Instant::now();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            _ => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut batch = vec![first];
        while batch.len() < 1024 {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut force_sync = false;
        let mut wrote = false;
        let mut acks = Vec::with_capacity(batch.len());
        for job in batch {
            match job {
                Job::Append { line, ack } => {
                    if broken.is_none() {
                        match file.write_all(&line) {
                            Ok(()) => wrote = true,
                            Err(e) => broken = Some(format!("write failed: {e}")),
                        }
                    }
                    acks.push(ack);
                }
                Job::Sync { ack } => {
                    force_sync = true;
                    acks.push(ack);
                }
            }
        }
        dirty |= wrote;
        let sync_now = match policy {
            FsyncPolicy::Always => wrote || force_sync,
            FsyncPolicy::Periodic { interval_ms } => {
                force_sync || (dirty && last_sync.elapsed() >= Duration::from_millis(interval_ms))
            }
            FsyncPolicy::Never => force_sync,
        };
        if sync_now && broken.is_none() {
            if let Err(e) = file.sync_data() {
                broken = Some(format!("fsync failed: {e}"));
            }
            dirty = false;
            last_sync = Instant::now();
        }
        if let Some(b) = &broken {
            tracing::error!(path = %path.display(), error = %b, "session writer failed");
        }
        for ack in acks {
            let _ = ack.send(broken.clone().map_or(Ok(()), Err));
        }
    }
    if dirty && broken.is_none() {
        let _ = file.sync_data();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policy_reads_from_toml() {
        #[derive(Deserialize)]
        struct C {
            fsync: FsyncPolicy,
        }
        let parse = |t: &str| toml::from_str::<C>(t).map(|c| c.fsync);
        assert_eq!(parse("fsync = \"always\"").unwrap(), FsyncPolicy::Always);
        assert_eq!(parse("fsync = \"never\"").unwrap(), FsyncPolicy::Never);
        assert_eq!(
            parse("fsync = { periodic = { interval_ms = 200 } }").unwrap(),
            FsyncPolicy::Periodic { interval_ms: 200 }
        );
        assert!(parse("fsync = \"sometimes\"").is_err());
    }

    #[test]
    fn parse_finds_the_torn_tail_and_the_valid_length() {
        let header = SessionHeader::new("/w").to_line();
        let entry = SessionEntry::new(
            "e1",
            None,
            super::super::EntryKind::SessionInfo { name: None },
        )
        .to_line();
        let good = format!("{header}\n{entry}\n");
        let loaded = parse(Path::new("x.jsonl"), good.as_bytes()).unwrap();
        assert_eq!(
            (loaded.torn_line, loaded.valid_len),
            (None, good.len() as u64)
        );
        let torn = format!("{good}{{\"type\":\"mess");
        let loaded = parse(Path::new("x.jsonl"), torn.as_bytes()).unwrap();
        assert_eq!(
            (loaded.torn_line, loaded.valid_len),
            (Some(3), good.len() as u64)
        );
        let blank_lines = format!("{header}\n\n{entry}\n\n");
        assert_eq!(
            parse(Path::new("x.jsonl"), blank_lines.as_bytes())
                .unwrap()
                .tree
                .len(),
            1
        );
    }
}
