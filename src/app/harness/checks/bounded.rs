//! Running a checker program (`python3`, `node`, `rustc`) with a time limit: its stdin written, its output
//! read, and the program killed when it runs past the limit. A program that is missing, fails to start or
//! times out gives `None`, so a caller says "cannot tell" instead of guessing.

use std::io::{Read, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long one checker program may run.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How often a running program is polled.
const POLL: Duration = Duration::from_millis(10);

/// What a finished program said.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` with `stdin` as its input (none when `None`) for at most `timeout`.
pub fn run(mut cmd: Command, stdin: Option<&str>, timeout: Duration) -> Option<Ran> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    // Its own process group, so that whatever it started goes with it when it is stopped.
    .process_group(0);
    let mut child = cmd.spawn().ok()?;
    let pid = child.id() as libc::pid_t;
    // Input and output go through threads: a program that fills its output pipe before reading all of its
    // input would otherwise block us both.
    let writer = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(text)) => {
            let text = text.to_string();
            Some(thread::spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            }))
        }
        _ => None,
    };
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
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
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() < timeout => thread::sleep(POLL),
            // Past the limit, or no longer waitable: stop it and say nothing.
            _ => {
                // SAFETY: killpg only sends a signal; `pid` leads the group the child was started in.
                unsafe {
                    libc::killpg(pid, libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    status.map(|s| Ran {
        code: s.code(),
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_read_and_a_slow_program_is_stopped() {
        let mut cat = Command::new("cat");
        cat.arg("-");
        if let Some(ran) = run(cat, Some("hello"), TIMEOUT) {
            assert_eq!(ran.code, Some(0));
            assert_eq!(ran.stdout, "hello");
        }
        let mut sleep = Command::new("sleep");
        sleep.arg("5");
        let started = Instant::now();
        assert!(run(sleep, None, Duration::from_millis(200)).is_none());
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(run(Command::new("no-such-program-here"), None, TIMEOUT).is_none());
    }
}
