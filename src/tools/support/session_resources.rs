//! What a session's tool calls leave behind and the session cleans up when it ends: the process groups bash
//! started (background jobs such as `server &` keep running after their call returns) and bash's overflow logs
//! (the full output of long commands, kept in the temp directory so the model can read it).
//!
//! The session owner makes one [`SessionResources`] per session, puts a clone into every call's context
//! ([`crate::tools::tool::ToolContext::with_resources`]), and calls [`SessionResources::close`] when the session ends;
//! dropping the last clone closes it too. Closing kills the process groups that are still running (SIGKILL to the
//! group) and deletes the logs. A call that registers something after the close has it cleaned at once.
//!
//! A process-group id is reused only after the whole group is gone; before signalling a group whose leader still
//! exists, `close` checks (Linux `/proc`) that the leader is the process bash started, not a newcomer with the same
//! id. A background job that left its group (`setsid`, `setpgid`) is out of reach.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// A process group bash started: its id and its leader's start time (clock ticks since boot, from
/// `/proc/<pid>/stat`), which tells the leader from a later process that got the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Group {
    pgid: i32,
    leader_start: Option<u64>,
}

#[derive(Debug, Default)]
struct Tracked {
    closed: bool,
    groups: Vec<Group>,
    files: Vec<PathBuf>,
}

/// What closing cleaned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Process groups that still had running processes and were killed.
    pub killed_groups: usize,
    /// Overflow logs deleted.
    pub removed_files: usize,
}

/// One session's tool resources; clones share them. See the module docs for who calls what.
#[derive(Debug, Clone, Default)]
pub struct SessionResources {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    tracked: Mutex<Tracked>,
}

impl SessionResources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tracks the process group bash just started (`pgid` is the shell's pid; call it before the shell is reaped,
    /// so its start time can be read). Groups that are already gone are forgotten here, so the list stays short.
    /// After `close`, the group is killed at once.
    pub fn track_process_group(&self, pgid: i32) {
        if pgid <= 1 {
            return;
        }
        let group = Group {
            pgid,
            leader_start: process_start_time(pgid),
        };
        let mut tracked = self.inner.lock();
        if tracked.closed {
            drop(tracked);
            kill_group(group);
            return;
        }
        tracked.groups.retain(|g| group_exists(g.pgid));
        tracked.groups.push(group);
    }

    /// Tracks a file to delete when the session ends (bash's overflow log). After `close`, it is deleted at once.
    pub fn track_file(&self, path: PathBuf) {
        let mut tracked = self.inner.lock();
        if tracked.closed {
            drop(tracked);
            let _ = std::fs::remove_file(path);
            return;
        }
        tracked.files.push(path);
    }

    /// The overflow logs tracked so far.
    pub fn files(&self) -> Vec<PathBuf> {
        self.inner.lock().files.clone()
    }

    /// Ends the session's resources: kills the tracked process groups still running and deletes the tracked
    /// files. Idempotent; later registrations are cleaned at once. Call it when the session ends (after its last
    /// run finished or was aborted).
    pub fn close(&self) -> Cleaned {
        self.inner.close()
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tracked> {
        // A panic while holding this lock leaves plain data behind; keep using it.
        self.tracked.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) -> Cleaned {
        let (groups, files) = {
            let mut tracked = self.lock();
            tracked.closed = true;
            (
                std::mem::take(&mut tracked.groups),
                std::mem::take(&mut tracked.files),
            )
        };
        let killed_groups = groups.into_iter().filter(|g| kill_group(*g)).count();
        let removed_files = files
            .into_iter()
            .filter(|f| std::fs::remove_file(f).is_ok())
            .count();
        if killed_groups + removed_files > 0 {
            tracing::debug!(
                killed_groups,
                removed_files,
                "session tool resources closed"
            );
        }
        Cleaned {
            killed_groups,
            removed_files,
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether any process still has process-group id `pgid`.
fn group_exists(pgid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks for existence; a negative pid addresses the group.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// SIGKILLs the group unless its id now belongs to someone else; `true` when a live group was signalled.
fn kill_group(group: Group) -> bool {
    if group.pgid <= 1 || !group_exists(group.pgid) {
        return false;
    }
    // While any member lives the id is not reused. If a process with the leader's pid exists, it must be the
    // leader bash started (same start time), else the id was reused and the group is someone else's.
    if let Some(now) = process_start_time(group.pgid) {
        if group.leader_start != Some(now) {
            return false;
        }
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the process group.
    unsafe { libc::kill(-group.pgid, libc::SIGKILL) == 0 }
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), `None` when it does not exist or `/proc`
/// is not there.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain spaces: count fields after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state); field 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}
