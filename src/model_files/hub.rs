//! The hf-hub source: download one file of a model repository with the `hf-hub` crate's blocking API.
//!
//! The crate has no timeouts of its own, so before downloading we check that its host (or the proxy from the
//! environment) accepts a TCP connection within [`FetchOptions::hub_connect_timeout`], and the download runs on
//! a worker thread that is abandoned when no byte arrives for [`FetchOptions::hub_stall_timeout`]: an
//! unreachable or silent hub fails in seconds and resolution falls through to the next source. `HF_HUB_OFFLINE` skips the
//! source. The download goes to a temporary hub cache inside the model's cache folder (locked while in use; see
//! [`staging`]), so the verified blob can be renamed into place.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hf_hub::api::sync::{ApiBuilder, ApiRepo};
use hf_hub::{Repo, RepoType};

use super::source::{shows_progress, FetchOptions, StageGuard, Staged};
use super::staging;

/// Download `repo`/`file` at `revision` (default `main`) into a temporary folder under `dir`.
pub(crate) fn stage(
    repo: &str,
    file: &str,
    revision: Option<&str>,
    dir: &Path,
    opts: &FetchOptions,
) -> Result<Staged, String> {
    if opts.hub_offline {
        return Err("skipped: HF_HUB_OFFLINE is set".to_string());
    }
    let (stage_dir, lock) = staging::locked_tempdir(dir, ".hf-hub-")
        .map_err(|e| format!("creating a temporary folder in {}: {e}", dir.display()))?;
    let mut builder = ApiBuilder::from_env()
        .with_cache_dir(stage_dir.path().to_path_buf())
        .with_progress(shows_progress(opts));
    if let Some(endpoint) = &opts.hub_endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let api = builder
        .build()
        .map_err(|e| format!("cannot build the client: {e}"))?;
    let api_repo = api.repo(Repo::with_revision(
        repo.to_string(),
        RepoType::Model,
        revision.unwrap_or("main").to_string(),
    ));
    let url = api_repo.url(file);
    probe(&url, opts.hub_connect_timeout)?;
    let pointer = download_watched(api_repo, file, stage_dir.path(), opts.hub_stall_timeout)?;
    // The crate returns a snapshot symlink to the blob; move the blob itself.
    let blob = std::fs::canonicalize(&pointer)
        .map_err(|e| format!("resolving {}: {e}", pointer.display()))?;
    Ok(Staged {
        path: blob,
        sha256: None,
        _guard: StageGuard::Dir(stage_dir, lock),
    })
}

/// Run the crate's download on a worker thread and give up when no byte arrives for `stall_timeout` (the crate
/// sets no read timeout, so a server that accepts and then stays silent would otherwise block for ever). The
/// worker is left behind in that case; its files go with the stage folder.
fn download_watched(
    api_repo: ApiRepo,
    file: &str,
    stage_dir: &Path,
    stall_timeout: Duration,
) -> Result<PathBuf, String> {
    let (tx, rx) = mpsc::channel();
    let worker_file = file.to_string();
    std::thread::Builder::new()
        .name("hf-hub-download".into())
        .spawn(move || {
            let _ = tx.send(api_repo.download(&worker_file));
        })
        .map_err(|e| format!("cannot start the download: {e}"))?;
    let mut seen = 0u64;
    let mut last_progress = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(result) => return result.map_err(|e| format!("request failed: {e}")),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the download thread stopped without an answer".to_string())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = bytes_under(stage_dir);
                if now > seen {
                    seen = now;
                    last_progress = Instant::now();
                } else if last_progress.elapsed() > stall_timeout {
                    return Err(format!(
                        "no data for {:.1}s after {seen} bytes; giving up",
                        stall_timeout.as_secs_f32()
                    ));
                }
            }
        }
    }
}

/// Total size of the files under `dir` (the crate writes its partial download there).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Fail fast unless the host serving `url` (or the configured proxy) accepts a TCP connection within `timeout`.
fn probe(url: &str, timeout: Duration) -> Result<(), String> {
    let https = url.starts_with("https://");
    let proxy = proxy_from_env(https);
    let (host, port) = match &proxy {
        Some(proxy_url) => host_port(proxy_url, 80),
        None => host_port(url, if https { 443 } else { 80 }),
    }
    .ok_or_else(|| format!("cannot tell the host of {url}"))?;
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let what = if proxy.is_some() { "proxy" } else { "host" };
    let (tx, rx) = mpsc::channel();
    let worker_target = target.clone();
    // Name resolution can block for long; the worker is left behind when it overruns the deadline.
    std::thread::Builder::new()
        .name("hf-hub-probe".into())
        .spawn(move || {
            let _ = tx.send(connect_any(&worker_target, timeout));
        })
        .map_err(|e| format!("cannot start the connection check: {e}"))?;
    match rx.recv_timeout(timeout + Duration::from_millis(500)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("unreachable: {what} {target}: {e}")),
        Err(_) => Err(format!(
            "unreachable: {what} {target} did not answer within {:.1}s",
            timeout.as_secs_f32()
        )),
    }
}

fn connect_any(target: &str, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = target
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the name: {e}"))?
        .collect();
    let mut last = "no address".to_string();
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(last)
}

fn proxy_from_env(https: bool) -> Option<String> {
    let names: &[&str] = if https {
        &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    };
    names
        .iter()
        .filter_map(|n| std::env::var(n).ok())
        .find(|v| !v.trim().is_empty())
}

/// `scheme://user@host:port/path` → (host, port); `default_port` when the URL names none.
fn host_port(url: &str, default_port: u16) -> Option<(String, u16)> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    Some((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use crate::model_files::hub::host_port;

    #[test]
    fn host_port_reads_urls() {
        assert_eq!(
            host_port("https://example.test/a/b", 443),
            Some(("example.test".into(), 443))
        );
        assert_eq!(
            host_port("http://u:p@127.0.0.1:8080/x", 80),
            Some(("127.0.0.1".into(), 8080))
        );
        assert_eq!(host_port("http://[::1]:9/x", 80), Some(("::1".into(), 9)));
        assert_eq!(
            host_port("proxy.test:3128", 80),
            Some(("proxy.test".into(), 3128))
        );
        assert_eq!(host_port("https:///x", 443), None);
    }
}
