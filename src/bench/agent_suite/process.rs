//! A child process with a deadline: its own process group (so a timeout kills whatever it started), both pipes
//! drained on their own threads (a chatty child never blocks), and the group killed when the deadline passes.

use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a child ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The deadline passed and the process group was killed.
    pub timed_out: bool,
    pub seconds: f64,
}

/// Runs `cmd` (stdin as the caller set it; stdout and stderr captured) until it exits or `timeout` passes.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> std::io::Result<Finished> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let pid = child.id() as libc::pid_t;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() >= timeout {
            timed_out = true;
            // SAFETY: killpg only sends a signal; `pid` leads the group the child was started in.
            unsafe {
                libc::killpg(pid, libc::SIGKILL);
            }
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the child left running in its group goes too (a server it started, a stuck job).
    // SAFETY: as above; the group may already be gone (ESRCH is fine).
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    Ok(Finished {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
        seconds: started.elapsed().as_secs_f64(),
    })
}
