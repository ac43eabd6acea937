//! The writers of open session files: one exclusive lock per file and one small pool of threads for all of them.
//!
//! **Single writer.** A file is opened for appending once per process, under an exclusive advisory lock
//! (`flock`): a second process that opens the same session gets [`SessionError::Locked`] instead of interleaving
//! its lines; a second store of the same file in this process shares the first one's handle, so lines are still
//! written whole and in order.
//!
//! **Durability.** An append is one line (the entry's JSON and `\n`) written with a single `write_all` to a file
//! opened in append mode, then — under [`FsyncPolicy::Always`], the default — `fdatasync`ed before the caller
//! is acknowledged (jobs already queued when a thread wakes are written and synced together). An append that was
//! acknowledged is on disk: a `kill -9` of the process cannot lose it, and with `Always` neither can a power loss.
//!
//! **Bounded threads.** [`POOL_THREADS`] threads serve every open file (a file always goes to the same thread, so
//! its lines keep their order); a thousand open sessions cost a thousand file handles, not a thousand threads.
//! A file is closed when its last [`Writer`] is dropped and its queued lines are written.
//!
//! **A full disk.** A write that fails (no space, a quota) is cut back to the file's last whole line and only
//! that append is refused, with the reason: the entries before it stay whole, and appends succeed again once
//! there is room. A failed sync (or a failed cut) leaves the file's state unknown, so that file refuses every
//! later append.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::file::FsyncPolicy;
use super::SessionError;

/// Threads writing session files, for the whole process.
pub const POOL_THREADS: usize = 2;

/// One open, locked session file.
struct OpenFile {
    path: PathBuf,
    file: File,
    /// Set once a sync or a cut failed: later appends are refused with it.
    broken: Mutex<Option<String>>,
    /// The length of the file's whole lines written so far (a failed write is cut back to it).
    good_len: Mutex<u64>,
    /// Which pool thread writes this file.
    lane: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The files this process holds open, by canonical path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<OpenFile>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<OpenFile>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Where a job's outcome goes.
type Ack = oneshot::Sender<Result<(), String>>;

enum Job {
    Append {
        file: Arc<OpenFile>,
        line: Vec<u8>,
        policy: FsyncPolicy,
        ack: Ack,
    },
    /// Acknowledged once everything queued before it for `file` is written and synced.
    Sync { file: Arc<OpenFile>, ack: Ack },
}

/// The pool's queues, one per thread (started on first use).
fn lanes() -> Result<&'static [mpsc::Sender<Job>], SessionError> {
    static LANES: OnceLock<Result<Vec<mpsc::Sender<Job>>, String>> = OnceLock::new();
    let lanes = LANES.get_or_init(|| {
        (0..POOL_THREADS)
            .map(|i| {
                let (tx, rx) = mpsc::channel();
                std::thread::Builder::new()
                    .name(format!("agentd-session-writer-{i}"))
                    .spawn(move || run(rx))
                    .map(|_| tx)
                    .map_err(|e| format!("cannot start a session writer thread: {e}"))
            })
            .collect()
    });
    match lanes {
        Ok(l) => Ok(l.as_slice()),
        Err(message) => Err(SessionError::WriterFailed {
            path: PathBuf::new(),
            message: message.clone(),
        }),
    }
}

/// The handle to an open session file. Cheap to clone; the file closes when the last handle is dropped.
#[derive(Clone)]
pub struct Writer {
    file: Arc<OpenFile>,
    policy: FsyncPolicy,
}

impl Writer {
    /// Opens `path` for appending under the exclusive lock (or shares this process's open handle), cutting a torn
    /// tail back to `valid_len` first when the file is opened here for the first time.
    pub fn open(path: &Path, valid_len: u64, policy: FsyncPolicy) -> Result<Self, SessionError> {
        let key = std::fs::canonicalize(path).map_err(|e| SessionError::io(path, e))?;
        let mut open = lock(registry());
        open.retain(|_, f| f.strong_count() > 0);
        if let Some(file) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(Self { file, policy });
        }
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| SessionError::io(path, e))?;
        // SAFETY: `flock` on a descriptor this `File` owns and keeps open; no memory is shared with the call.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EWOULDBLOCK) => SessionError::Locked {
                    path: path.to_path_buf(),
                },
                _ => SessionError::io(path, err),
            });
        }
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
        let lane = lane_of(&key);
        lanes()?;
        let file = Arc::new(OpenFile {
            path: path.to_path_buf(),
            file,
            broken: Mutex::new(None),
            good_len: Mutex::new(len.min(valid_len)),
            lane,
        });
        open.insert(key, Arc::downgrade(&file));
        Ok(Self { file, policy })
    }

    /// Appends one line (without its newline) and waits until it is stored under the fsync policy.
    pub async fn append(&self, line: String) -> Result<(), SessionError> {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let (ack, done) = oneshot::channel();
        let job = Job::Append {
            file: self.file.clone(),
            line: bytes,
            policy: self.policy,
            ack,
        };
        self.send(job, done).await
    }

    /// Waits until every append queued so far is written and synced (whatever the policy).
    pub async fn sync(&self) -> Result<(), SessionError> {
        let (ack, done) = oneshot::channel();
        let job = Job::Sync {
            file: self.file.clone(),
            ack,
        };
        self.send(job, done).await
    }

    async fn send(
        &self,
        job: Job,
        done: oneshot::Receiver<Result<(), String>>,
    ) -> Result<(), SessionError> {
        let failed = |message: String| SessionError::WriterFailed {
            path: self.file.path.clone(),
            message,
        };
        let lanes = lanes()?;
        lanes[self.file.lane % lanes.len()]
            .send(job)
            .map_err(|_| failed("the writer thread is gone".into()))?;
        done.await
            .map_err(|_| failed("the writer thread stopped before acknowledging".into()))?
            .map_err(failed)
    }
}

/// The pool thread a file belongs to (stable, so one file's lines keep their order).
fn lane_of(path: &Path) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    (h.finish() % POOL_THREADS as u64) as usize
}

/// A file written but not yet synced under a periodic policy.
struct Dirty {
    file: Arc<OpenFile>,
    since: Instant,
    interval: Duration,
}

/// One pool thread: takes the queued jobs, writes the appends, syncs per each file's policy, acknowledges them.
fn run(rx: mpsc::Receiver<Job>) {
    let mut dirty: Vec<Dirty> = Vec::new();
    loop {
        let first = match dirty.iter().map(|d| d.since + d.interval).min() {
            Some(due) => match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
        };
        let mut batch: Vec<Job> = first.into_iter().collect();
        while batch.len() < 1024 {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        // Write everything, note which files need a sync now, then acknowledge after the syncs.
        let mut sync_now: Vec<Arc<OpenFile>> = Vec::new();
        let mut acks: Vec<(Arc<OpenFile>, Ack, Result<(), String>)> = Vec::new();
        for job in batch {
            match job {
                Job::Append {
                    file,
                    line,
                    policy,
                    ack,
                } => {
                    let written = match lock(&file.broken).clone() {
                        Some(b) => Err(b),
                        None => write_line(&file, &line),
                    };
                    match policy {
                        FsyncPolicy::Always => push_unique(&mut sync_now, &file),
                        FsyncPolicy::Periodic { interval_ms } => {
                            if !dirty.iter().any(|d| Arc::ptr_eq(&d.file, &file)) {
                                dirty.push(Dirty {
                                    file: file.clone(),
                                    since: Instant::now(),
                                    interval: Duration::from_millis(interval_ms),
                                });
                            }
                        }
                        FsyncPolicy::Never => {}
                    }
                    acks.push((file, ack, written));
                }
                Job::Sync { file, ack } => {
                    push_unique(&mut sync_now, &file);
                    acks.push((file, ack, Ok(())));
                }
            }
        }
        let now = Instant::now();
        dirty.retain(|d| {
            let due =
                now >= d.since + d.interval || sync_now.iter().any(|f| Arc::ptr_eq(f, &d.file));
            if due {
                push_unique(&mut sync_now, &d.file);
            }
            !due
        });
        for file in &sync_now {
            if lock(&file.broken).is_none() {
                if let Err(e) = file.file.sync_data() {
                    *lock(&file.broken) = Some(format!("fsync failed: {e}"));
                }
            }
        }
        for (file, ack, written) in acks {
            let result = written.and_then(|()| lock(&file.broken).clone().map_or(Ok(()), Err));
            if let Err(e) = &result {
                tracing::error!(path = %file.path.display(), error = %e, "session writer failed");
            }
            let _ = ack.send(result);
        }
    }
}

/// Writes one whole line; a failed write is cut back to the last whole line (so the file stays whole and a
/// later append can succeed), and a failed cut breaks the file.
fn write_line(file: &OpenFile, line: &[u8]) -> Result<(), String> {
    let mut good = lock(&file.good_len);
    match (&file.file).write_all(line) {
        Ok(()) => {
            *good += line.len() as u64;
            Ok(())
        }
        Err(e) => match file.file.set_len(*good) {
            Ok(()) => Err(format!("write failed: {e} (the entry was not stored)")),
            Err(cut) => {
                let b = format!("write failed: {e}; cutting the partial line failed too: {cut}");
                *lock(&file.broken) = Some(b.clone());
                Err(b)
            }
        },
    }
}

fn push_unique(files: &mut Vec<Arc<OpenFile>>, file: &Arc<OpenFile>) {
    if !files.iter().any(|f| Arc::ptr_eq(f, file)) {
        files.push(file.clone());
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        // The last handle is gone: whatever a periodic policy left unsynced goes to disk before the close.
        if lock(&self.broken).is_none() {
            let _ = self.file.sync_data();
        }
    }
}
