//! Ready-to-use settings for the coding clients people point at agentd (`agentd clients`): for a served model
//! and its window, each client's environment variables, config files (with their paths) and command line, so
//! that the client knows the model's real window, compacts its conversation before the window is full and asks
//! for replies that fit. Pure data in, text out: the same source renders the terminal output, the JSON a script
//! reads and README's "Coding clients on agentd" section. Clients that speak Ollama's API get the server's
//! address (and a Continue entry with `provider: ollama`).

mod aider;
mod claude_code;
mod codex;
mod continue_cli;
mod ollama;
mod opencode;
mod pi;
mod render;

use serde::Serialize;

pub use render::{markdown, text};

/// What the clients are told about the server and its model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Served {
    /// `http://127.0.0.1:8080` (no trailing slash, no `/v1`).
    pub root: String,
    /// The model id requests name.
    pub model: String,
    /// The window served: prompt and reply together, in the model's tokens.
    pub window: u64,
    /// The server's API key, when it has one.
    pub api_key: Option<String>,
}

/// The token budget every client gets from one window: replies up to `max_output`, compaction once the
/// conversation passes `compact_at` (room for a reply and for the clients' own token estimates to be off),
/// `keep_recent` tokens kept verbatim when it compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    pub window: u64,
    pub max_output: u64,
    pub compact_at: u64,
    pub keep_recent: u64,
}

impl Budget {
    /// The budget for `window` tokens: a reply of an eighth of it (256 to 8,192 tokens, at most a quarter),
    /// compaction a tenth of the window below what is left after the reply, a quarter of the window kept.
    pub fn for_window(window: u64) -> Self {
        let window = window.max(1);
        let max_output = (window / 8).clamp(256, 8192).min(window / 4).max(1);
        let compact_at = window
            .saturating_sub(max_output + window / 10)
            .max(window / 2);
        Self {
            window,
            max_output,
            compact_at,
            keep_recent: window / 4,
        }
    }

    /// What a client that compacts at `window − reserve` must reserve.
    pub fn reserve(&self) -> u64 {
        self.window - self.compact_at
    }

    /// `compact_at` as a whole percentage of the window.
    pub fn compact_percent(&self) -> u64 {
        self.compact_at * 100 / self.window
    }
}

/// A config file a client reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigFile {
    /// Where the client looks for it (`~` is the home directory).
    pub path: String,
    /// The environment variable that moves the directory the path starts in, if there is one
    /// (`CODEX_HOME` for `~/.codex/…`).
    pub dir_env: Option<String>,
    /// The file's whole text.
    pub content: String,
    /// What to do when the file exists already.
    pub merge: String,
}

/// One client's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientSetup {
    /// `claude-code`, `codex`, …: the name `agentd clients NAME` takes.
    pub name: &'static str,
    /// `Claude Code`, …
    pub title: &'static str,
    /// The API it speaks to agentd.
    pub api: &'static str,
    /// Environment variables, in order.
    pub env: Vec<(String, String)>,
    pub files: Vec<ConfigFile>,
    /// The command line, one argument an item.
    pub command: Vec<String>,
    /// A line or two on what the settings do.
    pub notes: Vec<String>,
}

/// The clients, in the order they are printed.
pub const CLIENT_NAMES: [&str; 7] = [
    "claude-code",
    "codex",
    "pi",
    "aider",
    "continue",
    "opencode",
    "ollama",
];

/// Every client's setup for `served`.
pub fn all(served: &Served) -> Vec<ClientSetup> {
    let budget = Budget::for_window(served.window);
    vec![
        claude_code::setup(served, &budget),
        codex::setup(served, &budget),
        pi::setup(served, &budget),
        aider::setup(served, &budget),
        continue_cli::setup(served, &budget),
        opencode::setup(served, &budget),
        ollama::setup(served, &budget),
    ]
}

/// The setup of the client `name` (or one of its other names: `claude`, `cn`, …).
pub fn one(served: &Served, name: &str) -> Option<ClientSetup> {
    let wanted = match name.trim().to_ascii_lowercase().replace('_', "-").as_str() {
        "claude" | "claude-code" | "claudecode" => "claude-code",
        "codex" | "codex-cli" => "codex",
        "pi" | "pi-coding-agent" => "pi",
        "aider" => "aider",
        "continue" | "cn" | "continue-cli" => "continue",
        "opencode" | "open-code" => "opencode",
        "ollama" | "copilot" | "jetbrains" | "open-webui" => "ollama",
        _ => return None,
    };
    all(served).into_iter().find(|c| c.name == wanted)
}

/// The key a client sends: the server's, or a placeholder when it has none (clients insist on one).
fn key_or_placeholder(served: &Served) -> String {
    served
        .api_key
        .clone()
        .unwrap_or_else(|| "agentd-no-key".to_string())
}

/// `http://…/v1`.
fn v1(served: &Served) -> String {
    format!("{}/v1", served.root)
}

/// JSON text, pretty, with a final newline.
fn pretty_json(value: &serde_json::Value) -> String {
    let mut out = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn served(window: u64) -> Served {
        Served {
            root: "http://127.0.0.1:8080".into(),
            model: "qwen2.5-coder-0.5b-instruct".into(),
            window,
            api_key: None,
        }
    }

    #[test]
    fn budgets_leave_room_for_a_reply_and_compact_before_the_window() {
        for window in [512, 2048, 4096, 8192, 32768, 131_072, 1_000_000] {
            let b = Budget::for_window(window);
            assert!(b.max_output >= 1 && b.max_output <= window / 4, "{b:?}");
            assert!(b.compact_at + b.max_output < window, "{b:?}");
            assert!(b.compact_at >= window / 2, "{b:?}");
            assert!(b.keep_recent < b.compact_at, "{b:?}");
        }
        let b = Budget::for_window(32768);
        assert_eq!(
            (b.max_output, b.compact_at, b.keep_recent),
            (4096, 25396, 8192)
        );
    }

    #[test]
    fn every_client_names_the_model_and_its_window() {
        let s = served(8192);
        let all = all(&s);
        assert_eq!(all.iter().map(|c| c.name).collect::<Vec<_>>(), CLIENT_NAMES);
        for c in &all {
            let text = serde_json::to_string(c).unwrap();
            assert!(text.contains("qwen2.5-coder-0.5b-instruct"), "{}", c.name);
            assert!(text.contains("8192"), "{} does not say the window", c.name);
            assert!(text.contains("http://127.0.0.1:8080"), "{}", c.name);
        }
        assert_eq!(one(&s, "claude").map(|c| c.name), Some("claude-code"));
        assert_eq!(one(&s, "cn").map(|c| c.name), Some("continue"));
        assert!(one(&s, "emacs").is_none());
    }

    #[test]
    fn the_servers_key_reaches_every_client() {
        let mut s = served(32768);
        s.api_key = Some("sk-secret-1".into());
        for c in all(&s) {
            let text = serde_json::to_string(&c).unwrap();
            assert!(
                text.contains("sk-secret-1"),
                "{} does not send the key",
                c.name
            );
        }
    }
}
