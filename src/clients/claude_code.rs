//! Claude Code (Anthropic Messages API). Told the window (`CLAUDE_CODE_MAX_CONTEXT_TOKENS`, which also stops
//! its "doesn't recognize the model" notice; its auto-compaction then works from the window less the reply),
//! the reply size (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`; it asks for 32,000 otherwise) and our compaction trigger
//! (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`; `CLAUDE_CODE_AUTO_COMPACT_WINDOW` too for windows it accepts). Every
//! model name it uses, the small background one included, is the served model.

use super::{key_or_placeholder, pretty_json, Budget, ClientSetup, ConfigFile, Served};

/// The smallest `CLAUDE_CODE_AUTO_COMPACT_WINDOW` Claude Code takes (a smaller value is raised to it, which would
/// move compaction past a small window): below it the window and the percentage do the work.
const SMALLEST_COMPACT_WINDOW: u64 = 100_000;

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let mut env: Vec<(String, String)> = vec![
        ("ANTHROPIC_BASE_URL".into(), served.root.clone()),
        ("ANTHROPIC_AUTH_TOKEN".into(), key_or_placeholder(served)),
        ("ANTHROPIC_MODEL".into(), served.model.clone()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL".into(), served.model.clone()),
        (
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS".into(),
            budget.window.to_string(),
        ),
    ];
    if budget.window >= SMALLEST_COMPACT_WINDOW {
        env.push((
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(),
            budget.window.to_string(),
        ));
    }
    env.extend([
        (
            "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE".into(),
            budget.compact_percent().to_string(),
        ),
        (
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS".into(),
            budget.max_output.to_string(),
        ),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
    ]);
    let block: serde_json::Map<String, serde_json::Value> = env
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let settings = serde_json::json!({ "env": block });
    ClientSetup {
        name: "claude-code",
        title: "Claude Code",
        api: "Anthropic Messages (/v1/messages)",
        files: vec![ConfigFile {
            path: "~/.claude/settings.json".into(),
            dir_env: Some("CLAUDE_CONFIG_DIR".into()),
            content: pretty_json(&settings),
            merge: "instead of the environment variables: merge this `env` block into the file"
                .into(),
        }],
        command: vec!["claude".into(), "--model".into(), served.model.clone()],
        notes: vec![format!(
            "Window {} tokens; replies up to {}; auto-compaction at {}% of the window.",
            budget.window,
            budget.max_output,
            budget.compact_percent()
        )],
        env,
    }
}
