//! A session file on disk: loading it (header checked, every entry validated; a torn last line — a write cut
//! short by a crash — is skipped with a warning and cut off before appending, while a bad line before the last is
//! an error naming the line), creating one, and the fsync policy. Appending is [`super::writer`]'s.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
            Ok(mut v) => {
                super::pi::normalize_entry(&mut v);
                v
            }
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
