//! Staging entries in a model's cache folder: the temporary folders and files a fetch downloads into before the
//! verified file is renamed into place. This module creates them *locked*, makes what is renamed into the cache
//! durable, and sweeps the ones an earlier, crashed fetch left behind.
//!
//! **What is stale.** A staging entry is one of `.hf-hub-*` (hf-hub download folders), `.pip-*` (wheel
//! folders), `.<file name>.*.partial` (the pip source's output) and `.marker-*` (a verification marker being
//! written). While a fetch uses one it holds an exclusive `flock` on it (on the folder's
//! [`STAGE_LOCK_FILE`], or on the partial file itself); the kernel drops that lock when the process ends,
//! however it ends. So an entry is stale when nobody holds its lock **and** it is older than [`STALE_AFTER`]
//! (that grace covers the instant between creating an entry and locking it; a marker is never locked and lives
//! for microseconds). A live fetch's entries are never removed, however long its download takes. Where `flock`
//! does not exist (non-Unix) nothing is locked and only entries older than [`STALE_AFTER_UNLOCKED`] go.
//! `flock` on network file systems may be advisory-only or absent; the age rule still applies there.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Name of the lock file inside a staging folder.
pub const STAGE_LOCK_FILE: &str = ".agentd-stage.lock";
/// An unlocked staging entry younger than this is left alone (it may be about to be locked).
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// Without `flock` (non-Unix) a staging entry is stale only after this long.
pub const STALE_AFTER_UNLOCKED: Duration = Duration::from_secs(24 * 3600);

/// Prefixes of staging folders (and of marker temp files).
const FOLDER_PREFIXES: [&str; 2] = [".hf-hub-", ".pip-"];
const MARKER_PREFIX: &str = ".marker-";
const PARTIAL_SUFFIX: &str = ".partial";

/// A temporary folder in `dir` named `prefix…`, with its lock held until the returned handle is dropped (drop
/// the folder first, or together).
pub fn locked_tempdir(dir: &Path, prefix: &str) -> io::Result<(tempfile::TempDir, File)> {
    let folder = tempfile::Builder::new().prefix(prefix).tempdir_in(dir)?;
    let lock = File::create(folder.path().join(STAGE_LOCK_FILE))?;
    if !try_lock(&lock)? {
        return Err(io::Error::other(
            "a fresh staging folder is locked by someone else",
        ));
    }
    Ok((folder, lock))
}

/// Locks an open staging file (the pip source's partial output) for as long as `file`, or any clone of it
/// (`try_clone` shares the lock), stays open.
pub fn lock_file(file: &File) -> io::Result<()> {
    if try_lock(file)? {
        Ok(())
    } else {
        Err(io::Error::other(
            "a fresh staging file is locked by someone else",
        ))
    }
}

/// Removes the stale staging entries (see the module docs) of the model file `file_name` from its cache folder
/// `dir`; returns what was removed. Failures are logged and skipped: sweeping is housekeeping, never a reason
/// for a fetch to fail.
pub fn sweep_stale(dir: &Path, file_name: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let partial_prefix = format!(".{file_name}.");
    let mut removed = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        let is_folder = kind.is_dir() && FOLDER_PREFIXES.iter().any(|p| name.starts_with(p));
        let is_file = kind.is_file()
            && (name.starts_with(MARKER_PREFIX)
                || (name.starts_with(&partial_prefix) && name.ends_with(PARTIAL_SUFFIX)));
        if !is_folder && !is_file {
            continue;
        }
        match is_stale(&path, is_folder) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::debug!("cannot tell whether {} is stale: {e}", path.display());
                continue;
            }
        }
        let result = if is_folder {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match result {
            Ok(()) => {
                tracing::info!("removed {}, left by an interrupted fetch", path.display());
                removed.push(path);
            }
            Err(e) => tracing::warn!("cannot remove stale {}: {e}", path.display()),
        }
    }
    removed
}

/// Unlocked and old enough. The lock taken to find out is released when this returns (before the removal,
/// which is harmless: a fetch never re-locks an existing entry, it makes a new one).
fn is_stale(path: &Path, is_folder: bool) -> io::Result<bool> {
    let age = SystemTime::now()
        .duration_since(fs::symlink_metadata(path)?.modified()?)
        .unwrap_or_default();
    if !cfg!(unix) {
        return Ok(age > STALE_AFTER_UNLOCKED);
    }
    if age <= STALE_AFTER {
        return Ok(false);
    }
    let lock_path = if is_folder {
        path.join(STAGE_LOCK_FILE)
    } else {
        path.to_path_buf()
    };
    match File::open(&lock_path) {
        Ok(file) => try_lock(&file),
        // A folder without a lock file: left by an older version, or its fetch died before locking it.
        Err(e) if e.kind() == io::ErrorKind::NotFound && is_folder => Ok(true),
        Err(e) => Err(e),
    }
}

/// Takes an exclusive `flock` without waiting: `Ok(false)` when another open file holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `flock` only reads the descriptor number, which `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(err)
    }
}

#[cfg(not(unix))]
fn try_lock(_file: &File) -> io::Result<bool> {
    Ok(true)
}

/// Makes a file's contents durable before it is renamed into the cache.
pub(crate) fn sync_file(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// Makes a rename into `dir` durable (a no-op where folders cannot be opened, i.e. not on Unix).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    if cfg!(unix) {
        File::open(dir)?.sync_all()
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    fn age(path: &Path, by: Duration) {
        let file = File::open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn sweeps_only_unlocked_old_staging_entries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let old = Duration::from_secs(7200);
        // Left by a crashed fetch: old, unlocked.
        let stale_dir = d.join(".hf-hub-crashed");
        fs::create_dir(&stale_dir).unwrap();
        fs::write(stale_dir.join("blob"), b"partial").unwrap();
        fs::write(stale_dir.join(STAGE_LOCK_FILE), b"").unwrap();
        age(&stale_dir, old);
        let stale_partial = d.join(".m.gguf.abc.partial");
        fs::write(&stale_partial, b"x").unwrap();
        age(&stale_partial, old);
        let stale_marker = d.join(".marker-xyz");
        fs::write(&stale_marker, b"x").unwrap();
        age(&stale_marker, old);
        // A concurrent fetch's: locked (and made to look old, so only the lock protects it).
        let (live_dir, _live_lock) = locked_tempdir(d, ".pip-").unwrap();
        age(live_dir.path(), old);
        let live_partial = d.join(".m.gguf.live.partial");
        let live_file = File::create(&live_partial).unwrap();
        lock_file(&live_file).unwrap();
        age(&live_partial, old);
        // Just created, not yet locked: within the grace.
        let young = d.join(".hf-hub-young");
        fs::create_dir(&young).unwrap();
        // Not staging at all.
        fs::write(d.join("m.gguf"), b"model").unwrap();
        fs::write(d.join("m.gguf.sha256-verified"), b"x").unwrap();
        fs::write(d.join(".other.gguf.abc.partial"), b"x").unwrap();
        age(&d.join(".other.gguf.abc.partial"), old);

        let mut removed = sweep_stale(d, "m.gguf");
        removed.sort();
        let mut want = vec![stale_dir, stale_partial, stale_marker];
        want.sort();
        assert_eq!(removed, want);
        for kept in [
            live_dir.path().to_path_buf(),
            live_partial.clone(),
            young,
            d.join("m.gguf"),
            d.join("m.gguf.sha256-verified"),
            d.join(".other.gguf.abc.partial"),
        ] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        // Once its owner lets go, the old entry is stale too.
        drop(live_file);
        assert_eq!(sweep_stale(d, "m.gguf"), vec![live_partial]);
    }
}
