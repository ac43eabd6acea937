//! Pi's coding agent (Chat Completions). `models.json` declares the provider and the model with its window and
//! reply size (Pi assumes 128,000 tokens otherwise); `settings.json` makes agentd the default and sets the
//! compaction reserve, which Pi subtracts from the window to decide when to compact.

use super::{key_or_placeholder, pretty_json, v1, Budget, ClientSetup, ConfigFile, Served};

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let models = serde_json::json!({"providers": {"agentd": {
        "baseUrl": v1(served),
        "api": "openai-completions",
        "apiKey": key_or_placeholder(served),
        "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
        "models": [{
            "id": served.model,
            "name": served.model,
            "reasoning": false,
            "input": ["text"],
            "contextWindow": budget.window,
            "maxTokens": budget.max_output,
        }],
    }}});
    let settings = serde_json::json!({
        "defaultProvider": "agentd",
        "defaultModel": served.model,
        "compaction": {
            "enabled": true,
            "reserveTokens": budget.reserve(),
            "keepRecentTokens": budget.keep_recent,
        },
    });
    ClientSetup {
        name: "pi",
        title: "Pi",
        api: "OpenAI Chat Completions (/v1/chat/completions)",
        env: Vec::new(),
        files: vec![
            ConfigFile {
                path: "~/.pi/agent/models.json".into(),
                dir_env: Some("PI_CODING_AGENT_DIR".into()),
                content: pretty_json(&models),
                merge: "merge: the `agentd` provider into `providers`".into(),
            },
            ConfigFile {
                path: "~/.pi/agent/settings.json".into(),
                dir_env: Some("PI_CODING_AGENT_DIR".into()),
                content: pretty_json(&settings),
                merge: "merge: these keys".into(),
            },
        ],
        command: vec![
            "pi".into(),
            "--provider".into(),
            "agentd".into(),
            "--model".into(),
            served.model.clone(),
        ],
        notes: vec![format!(
            "Window {} tokens; replies up to {}; Pi compacts past {} tokens, keeping the last {}.",
            budget.window, budget.max_output, budget.compact_at, budget.keep_recent
        )],
    }
}
