//! OpenCode: a provider through the AI SDK's OpenAI-compatible package, the model with its `limit` (without
//! one OpenCode takes the window as 0 and never compacts), and compaction on with the reserve that puts its
//! trigger at ours.

use super::{key_or_placeholder, pretty_json, v1, Budget, ClientSetup, ConfigFile, Served};

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let config = serde_json::json!({
        "provider": {"agentd": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "agentd",
            "options": {"baseURL": v1(served), "apiKey": key_or_placeholder(served)},
            "models": {served.model.clone(): {
                "name": served.model,
                "tool_call": true,
                "limit": {"context": budget.window, "output": budget.max_output},
            }},
        }},
        "model": format!("agentd/{}", served.model),
        "compaction": {"auto": true, "reserved": budget.reserve()},
    });
    ClientSetup {
        name: "opencode",
        title: "OpenCode",
        api: "OpenAI Chat Completions (/v1/chat/completions)",
        env: Vec::new(),
        files: vec![ConfigFile {
            path: "~/.config/opencode/opencode.json".into(),
            dir_env: None,
            content: pretty_json(&config),
            merge: "merge: the `agentd` provider, `model` and `compaction` (or put it in the project's \
                    opencode.json)"
                .into(),
        }],
        command: vec!["opencode".into()],
        notes: vec![format!(
            "Window {} tokens; replies up to {}; OpenCode compacts {} tokens before the window. Headless: \
             `opencode run \"…\"`.",
            budget.window,
            budget.max_output,
            budget.reserve()
        )],
    }
}
