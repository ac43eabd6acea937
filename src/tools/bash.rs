//! `bash {command, timeout?}`: runs `bash -c` (or `sh -c` where bash is missing) in the working directory, in its
//! own process group. Stdout and stderr share one pipe, so the output keeps its arrival order; every chunk is
//! streamed through `ToolContext::updates` (bounded: a slow consumer gets merged chunks, or only the latest tail,
//! never unbounded buffering). Every call has a timeout ([`DEFAULT_BASH_TIMEOUT`] unless the call or the
//! configuration says otherwise, at most [`MAX_BASH_TIMEOUT`]); a timeout or an abort kills the whole process
//! group. The result keeps the last 2,000 lines / 50 KB; memory holds only a bounded tail while longer output
//! streams to a temp file named in the result (its first [`MAX_OUTPUT_LOG_BYTES`]). A non-zero exit is an error
//! result carrying the output and the exit code.
//!
//! A command that leaves background processes holding the output pipe (`server &`) returns shortly after the
//! shell exits; those processes keep running until a timeout, an abort, or the end of the session: with
//! `ToolContext::resources` set, the call's process group and its output log are tracked there and cleaned when
//! the session closes them (see [`super::support::session_resources`]).

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt as _;
use tokio::time::Instant;

use super::support::session_resources::SessionResources;
use super::support::truncate::{format_size, truncate_tail, Limits, TruncatedBy};
use super::support::update_channel::CoalescedUpdates;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// Timeout of a call that gives none (2 minutes).
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest timeout a call may ask for by default (30 minutes); longer requests are lowered to it.
pub const MAX_BASH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How much of a long output the overflow log keeps (100 MiB, its start); the result holds the tail anyway.
pub const MAX_OUTPUT_LOG_BYTES: u64 = 100 * 1024 * 1024;
/// How long the last streamed update may wait for the consumer when the command ended.
const FINAL_UPDATE_WAIT: Duration = Duration::from_millis(100);

/// How long to keep reading after the shell exited, for output still in flight (or held by background jobs).
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// How long to keep reading after the process group was killed.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// Arguments of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashArgs {
    /// The bash command to run, in the working directory.
    pub command: String,
    /// Timeout in seconds (default 120); when it expires the command and every process it started are killed.
    #[serde(default)]
    pub timeout: Option<f64>,
}

/// The `bash` tool.
pub struct BashTool {
    spec: ToolSpec,
    default_timeout: Option<Duration>,
    max_timeout: Duration,
    limits: Limits,
}

impl BashTool {
    /// Calls without a timeout get [`DEFAULT_BASH_TIMEOUT`]; a call may ask for up to [`MAX_BASH_TIMEOUT`];
    /// 2,000 lines / 50 KB kept.
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<BashArgs>(
                "bash",
                "Execute a bash command in the current working directory. Returns stdout and stderr interleaved. \
                 Output is truncated to the last 2000 lines or 50KB (whichever is hit first); if truncated, the \
                 full output is saved to a file named in the result. Optionally provide a timeout in seconds \
                 (default 120).",
            ),
            default_timeout: Some(DEFAULT_BASH_TIMEOUT),
            max_timeout: MAX_BASH_TIMEOUT,
            limits: Limits::default(),
        }
    }

    /// Timeout used when a call gives none; `None` lets such calls run up to the maximum timeout.
    pub fn with_default_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The longest a call may run, whatever it asks for (also the timeout of calls without one when there is no
    /// default).
    pub fn with_max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout = timeout;
        self
    }

    /// The timeout a call that gives none gets.
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
            .unwrap_or(self.max_timeout)
            .min(self.max_timeout)
    }

    /// The timeout a call gets: its own (positive, finite seconds) or the default, never above the maximum.
    pub fn timeout_for(&self, requested: Option<f64>) -> Result<Duration, ToolError> {
        match requested {
            None => Ok(self.default_timeout()),
            Some(secs) if secs.is_finite() && secs > 0.0 => Ok(Duration::try_from_secs_f64(secs)
                .unwrap_or(Duration::MAX)
                .min(self.max_timeout)),
            Some(secs) => Err(ToolError::RespondToModel(format!(
                "timeout must be a positive number of seconds, got {secs}."
            ))),
        }
    }

    /// How much output goes back to the model.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

impl Default for BashTool {
    fn default() -> Self {
        Self::new()
    }
}

/// `bash` from `PATH`, else `/bin/sh`.
fn find_shell() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("bash"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

/// Kills process group `pgid` with SIGKILL.
fn kill_group(pgid: i32) {
    // Never signal group 0 (our own) or 1 / -1 (everything).
    if pgid > 1 {
        // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Kills the group if the call is dropped before the command finished (e.g. the agent loop went away).
struct GroupGuard {
    pgid: Option<i32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}

/// Where a trailing incomplete UTF-8 sequence starts (`bytes.len()` when there is none).
fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(3) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back { n - back } else { n };
    }
    n
}

/// Collects the output: counts everything, keeps a bounded tail in memory, and spills the output to a temp file
/// (up to [`MAX_OUTPUT_LOG_BYTES`]) once it exceeds the limits.
struct OutputSink {
    limits: Limits,
    tail: Vec<u8>,
    tail_trimmed: bool,
    total_bytes: u64,
    newlines: u64,
    last_byte: Option<u8>,
    spill: Option<(PathBuf, std::fs::File)>,
    spill_error: Option<String>,
    /// Bytes written to the spill file.
    spilled: u64,
    /// The spill file reached [`MAX_OUTPUT_LOG_BYTES`] and stopped growing.
    spill_capped: bool,
    /// Where the spill file is tracked for deletion when the session ends.
    resources: Option<SessionResources>,
    /// Bytes received but not yet streamed (an incomplete UTF-8 sequence).
    pending: Vec<u8>,
}

impl OutputSink {
    fn new(limits: Limits, resources: Option<SessionResources>) -> Self {
        Self {
            limits,
            tail: Vec::new(),
            tail_trimmed: false,
            total_bytes: 0,
            newlines: 0,
            last_byte: None,
            spill: None,
            spill_error: None,
            spilled: 0,
            spill_capped: false,
            resources,
            pending: Vec::new(),
        }
    }

    /// Appends to the spill file, up to [`MAX_OUTPUT_LOG_BYTES`] in all.
    fn spill_write(&mut self, bytes: &[u8]) {
        let Some((_, file)) = &mut self.spill else {
            return;
        };
        let room = MAX_OUTPUT_LOG_BYTES.saturating_sub(self.spilled);
        let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if n < bytes.len() {
            self.spill_capped = true;
        }
        if n == 0 {
            return;
        }
        match file.write_all(&bytes[..n]) {
            Ok(()) => self.spilled += n as u64,
            Err(e) => {
                self.spill_error.get_or_insert(e.to_string());
            }
        }
    }

    fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    fn over_limits(&self) -> bool {
        self.total_bytes > self.limits.max_bytes as u64
            || self.total_lines() > self.limits.max_lines as u64
    }

    /// Records a chunk; returns the text to stream (complete UTF-8 only).
    fn push(&mut self, chunk: &[u8]) -> String {
        self.total_bytes += chunk.len() as u64;
        self.newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&b) = chunk.last() {
            self.last_byte = Some(b);
        }
        self.tail.extend_from_slice(chunk);
        // Small writes to a local temp file: blocking for microseconds, not worth a thread hop.
        if self.spill.is_some() {
            if self.spill_error.is_none() && !self.spill_capped {
                self.spill_write(chunk);
            }
        } else if self.over_limits() && self.spill_error.is_none() {
            self.start_spill();
        }
        let keep = 2 * self.limits.max_bytes.max(1024);
        if self.tail.len() > 2 * keep {
            self.tail.drain(..self.tail.len() - keep);
            self.tail_trimmed = true;
        }
        self.pending.extend_from_slice(chunk);
        let cut = complete_utf8_prefix(&self.pending);
        let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
        self.pending.drain(..cut);
        text
    }

    fn start_spill(&mut self) {
        let made = tempfile::Builder::new()
            .prefix("agentd-bash-")
            .suffix(".log")
            .tempfile()
            .and_then(|f| f.keep().map_err(|e| e.error));
        match made {
            Ok((file, path)) => {
                if let Some(resources) = &self.resources {
                    resources.track_file(path.clone());
                }
                self.spill = Some((path, file));
                // The tail holds everything so far: spilling starts before the first trim.
                let so_far = std::mem::take(&mut self.tail);
                self.spill_write(&so_far);
                self.tail = so_far;
            }
            Err(e) => self.spill_error = Some(e.to_string()),
        }
    }

    /// The text for the model (tail-truncated, with a note) and the details.
    fn finish(mut self) -> (String, serde_json::Value) {
        if let Some((_, file)) = &mut self.spill {
            let _ = file.flush();
        }
        let mut bytes: &[u8] = &self.tail;
        if self.tail_trimmed {
            // The cut may have split a character: skip continuation bytes.
            while let Some((&b, rest)) = bytes.split_first() {
                if b & 0xC0 != 0x80 {
                    break;
                }
                bytes = rest;
            }
        }
        let text = String::from_utf8_lossy(bytes);
        let truncation = truncate_tail(&text, self.limits);
        let full_path = self.spill.as_ref().map(|(p, _)| p.clone());
        let mut out = truncation.content.clone();
        if truncation.truncated() {
            let total = self.total_lines();
            let end = total;
            let start = end.saturating_sub(truncation.output_lines as u64) + 1;
            let full = match (&full_path, &self.spill_error) {
                (Some(p), None) if self.spill_capped => format!(
                    "The first {} of the output: {}",
                    format_size(usize::try_from(self.spilled).unwrap_or(usize::MAX)),
                    p.display()
                ),
                (Some(p), None) => format!("Full output: {}", p.display()),
                (Some(p), Some(e)) => format!(
                    "Part of the output is in {} (writing the rest failed: {e})",
                    p.display()
                ),
                (None, Some(e)) => format!("The full output could not be saved: {e}"),
                (None, None) => "The full output was not saved".to_string(),
            };
            let note = if truncation.last_line_partial {
                format!(
                    "[Showing the last {} of line {end}. {full}]",
                    format_size(truncation.output_bytes)
                )
            } else if truncation.truncated_by == Some(TruncatedBy::Bytes) {
                format!(
                    "[Showing lines {start}-{end} of {total} ({} limit). {full}]",
                    format_size(self.limits.max_bytes)
                )
            } else {
                format!("[Showing lines {start}-{end} of {total}. {full}]")
            };
            out = format!("{out}\n\n{note}");
        }
        let details = json!({
            "total_bytes": self.total_bytes,
            "total_lines": self.total_lines(),
            "truncation": truncation.truncated().then_some(&truncation),
            "full_output_path": full_path,
            "full_output_capped": self.spill_capped,
        });
        (out, details)
    }
}

/// How the command ended.
enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut(Duration),
    Aborted,
}

fn spawn_error(e: impl std::fmt::Display) -> ToolError {
    ToolError::RespondToModel(format!("Could not start the command: {e}"))
}

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::Exec]
    }

    fn argument_grammar(
        &self,
        _workspace: &super::support::workspace::WorkspaceState,
    ) -> Option<serde_json::Value> {
        // A bounded timeout: an unbounded number lets a small model write digits until the token limit.
        let mut grammar = self.spec.parameters.clone();
        let p = grammar.pointer_mut("/properties/timeout")?;
        p["minimum"] = json!(0);
        p["maximum"] = json!(1800);
        Some(grammar)
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: BashArgs = parse_arguments("bash", args)?;
        let timeout = self.timeout_for(args.timeout)?;
        if !ctx.cwd.is_dir() {
            return Err(ToolError::RespondToModel(format!(
                "The working directory {} does not exist.",
                ctx.cwd.display()
            )));
        }
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::RespondToModel(
                "Command aborted before it started.".into(),
            ));
        }

        let shell = find_shell();
        let (reader, writer) = std::io::pipe().map_err(spawn_error)?;
        let writer2 = writer.try_clone().map_err(spawn_error)?;
        let mut command = tokio::process::Command::new(&shell);
        command
            .arg("-c")
            .arg(&args.command)
            .current_dir(&ctx.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer2))
            .process_group(0)
            .kill_on_drop(true);
        let spawned = command.spawn();
        // Our copies of the pipe's write end must close, or the read side never sees EOF.
        drop(command);
        let mut child = spawned.map_err(spawn_error)?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let mut guard = GroupGuard { pgid };
        if let (Some(resources), Some(pgid)) = (&ctx.resources, pgid) {
            // Not reaped yet, so the shell's start time can be read; background jobs die with the session.
            resources.track_process_group(pgid);
        }
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
            .map_err(spawn_error)?;

        let mut sink = OutputSink::new(self.limits, ctx.resources.clone());
        let mut updates = CoalescedUpdates::default();
        let mut buf = vec![0u8; 64 * 1024];
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let deadline = tokio::time::sleep_until(Instant::now().checked_add(timeout).unwrap_or(far));
        tokio::pin!(deadline);
        let grace = tokio::time::sleep_until(far);
        tokio::pin!(grace);
        let mut status = None;
        let mut eof = false;
        let ending = loop {
            if eof {
                if let Some(status) = status {
                    break Ending::Exited(status);
                }
            }
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => break Ending::Aborted,
                _ = &mut deadline => break Ending::TimedOut(timeout),
                read = pipe.read(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => {
                        let text = sink.push(&buf[..n]);
                        updates.push(ctx, &text);
                    }
                },
                exited = child.wait(), if status.is_none() => {
                    let exited = exited.map_err(|e| ToolError::Fatal(format!("waiting for bash: {e}")))?;
                    // The shell is reaped: its pgid may be reused once the group empties; never signal it now.
                    guard.pgid = None;
                    status = Some(exited);
                    grace.as_mut().reset(Instant::now() + EXIT_GRACE);
                }
                _ = &mut grace, if status.is_some() && !eof => {
                    if let Some(status) = status {
                        break Ending::Exited(status);
                    }
                }
            }
        };

        if !matches!(ending, Ending::Exited(_)) {
            if let Some(pgid) = guard.pgid.take() {
                kill_group(pgid);
            }
            let _ = child.wait().await;
            // Collect what the killed processes had already written.
            let _ = tokio::time::timeout(KILL_GRACE, async {
                while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                    let text = sink.push(&buf[..n]);
                    updates.push(ctx, &text);
                }
            })
            .await;
        }
        let wait = if matches!(ending, Ending::Aborted) {
            Duration::ZERO
        } else {
            FINAL_UPDATE_WAIT
        };
        updates.flush(ctx, wait).await;

        let (output, mut details) = sink.finish();
        let with_note = |note: String| {
            let output = output.trim_end_matches('\n');
            if output.is_empty() {
                note
            } else {
                format!("{output}\n\n{note}")
            }
        };
        match ending {
            Ending::Exited(status) => match status.code() {
                Some(0) => {
                    details["exit_code"] = json!(0);
                    let content = if output.is_empty() {
                        "(no output)".to_string()
                    } else {
                        output
                    };
                    Ok(ToolOutput::new(content, details))
                }
                Some(code) => Err(ToolError::RespondToModel(with_note(format!(
                    "Command exited with code {code}"
                )))),
                None => Err(ToolError::RespondToModel(with_note(format!(
                    "Command was killed by signal {}",
                    status.signal().unwrap_or(0)
                )))),
            },
            Ending::TimedOut(t) => Err(ToolError::RespondToModel(with_note(format!(
                "Command timed out after {} seconds; it and every process it started were killed.",
                t.as_secs_f64()
            )))),
            Ending::Aborted => Err(ToolError::RespondToModel(with_note(
                "Command aborted; it and every process it started were killed.".to_string(),
            ))),
        }
    }
}
