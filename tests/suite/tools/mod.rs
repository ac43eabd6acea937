//! Tool tests: every rule of the built-in tools, of policy/confinement and of MCP servers as tools, in temp dirs.

mod bash;
mod bash_session;
mod durability;
mod edit;
mod files;
mod limits;
mod mcp;
mod policy;
mod search;
mod special_files;
mod truncate;

use std::path::{Path, PathBuf};

use agentd::tools::tool::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

/// A context rooted at `dir` (no confinement).
pub fn ctx(dir: &Path) -> ToolContext {
    ToolContext::new(dir).with_call_id("call-1")
}

/// Calls `tool`, expecting success.
pub async fn ok(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> ToolOutput {
    match tool.call(args.clone(), ctx).await {
        Ok(out) => out,
        Err(e) => panic!("{} {args} failed: {e}", tool.spec().name),
    }
}

/// Calls `tool`, expecting an error for the model; returns its text.
pub async fn err(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> String {
    match tool.call(args.clone(), ctx).await {
        Ok(out) => panic!("{} {args} succeeded: {}", tool.spec().name, out.content),
        Err(ToolError::RespondToModel(text)) => text,
        Err(e) => panic!(
            "{} {args}: expected RespondToModel, got {e:?}",
            tool.spec().name
        ),
    }
}

/// Writes `content` to `dir/name`, creating parents.
pub fn put(dir: &Path, name: &str, content: impl AsRef<[u8]>) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, content).unwrap();
}

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Unblocks, on drop, a thread stuck opening or reading the FIFO: opening it read-write gives a blocked reader
/// its writer, and closing it again gives the reader end-of-file. Without this a test that hangs on a FIFO would
/// also hang the runtime's shutdown, which waits for blocking threads.
pub struct FifoGuard(pub PathBuf);

impl Drop for FifoGuard {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0);
    }
}

/// Environment variable that lets an ignored probe test run (set only by [`run_probe`]).
pub const PROBE_ENV: &str = "AGENTD_TOOLS_PROBE";

/// Runs the ignored probe test `name` (full path, e.g. `suite::tools::limits::huge_read_probe`) alone in a child
/// process of this test binary, so what it measures about its own memory is not disturbed by other tests running
/// in parallel. Returns the `key=value` pairs it printed on lines starting with `PROBE `.
pub fn run_probe(name: &str) -> std::collections::HashMap<String, String> {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "probe {name} failed:\n{stdout}\n{stderr}"
    );
    let pairs: std::collections::HashMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.split_once("PROBE ").map(|(_, rest)| rest))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        !pairs.is_empty(),
        "probe {name} printed nothing:\n{stdout}\n{stderr}"
    );
    pairs
}

/// Whether this process is a probe child (see [`run_probe`]).
pub fn in_probe() -> bool {
    std::env::var_os(PROBE_ENV).is_some()
}

/// This process's resident memory in KiB (`/proc/self/statm`).
pub fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page / 1024
}

/// This process's peak resident memory in KiB (`VmHWM` in `/proc/self/status`).
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
