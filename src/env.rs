//! What agentd takes from the process's environment: where it keeps its files (`$AGENTD_HOME` and the user's
//! config directory) and what time it is. A leaf: it imports nothing from the rest of agentd.

use std::path::PathBuf;

/// Where agentd keeps its cache (models, sessions, the response cache): `$AGENTD_HOME`, default
/// `~/.cache/agentd`.
pub fn agentd_home() -> PathBuf {
    if let Some(h) = std::env::var_os("AGENTD_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    home_dir().join(".cache").join("agentd")
}

/// The user config directory (`AGENTS.md`, `skills/`): `$AGENTD_HOME` when set (one variable relocates
/// everything; tests rely on it), else `~/.config/agentd`.
pub fn config_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("AGENTD_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    home_dir().join(".config").join("agentd")
}

/// `$HOME`, else the current directory.
fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Milliseconds since the Unix epoch (Pi's timestamps).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Seconds since the Unix epoch (OpenAI's `created`).
pub fn now_unix() -> u64 {
    now_ms() / 1000
}

/// Today's local date, `YYYY-MM-DD`.
pub fn today() -> String {
    chrono::Local::now().format("%Y-%m-%d").to_string()
}
