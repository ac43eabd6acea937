//! aider (Chat Completions through LiteLLM's `openai/` prefix). A model LiteLLM does not know has no window or
//! output limit ("Unknown context window size" at every start); a model metadata file gives both, so aider sizes
//! its chat-history summaries and repository map to the window.

use super::{key_or_placeholder, pretty_json, v1, Budget, ClientSetup, ConfigFile, Served};

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let name = format!("openai/{}", served.model);
    let metadata = serde_json::json!({ name.clone(): {
        "max_tokens": budget.max_output,
        "max_input_tokens": budget.window - budget.max_output,
        "max_output_tokens": budget.max_output,
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_provider": "openai",
        "mode": "chat",
    }});
    ClientSetup {
        name: "aider",
        title: "aider",
        api: "OpenAI Chat Completions (/v1/chat/completions)",
        env: vec![
            ("OPENAI_API_BASE".into(), v1(served)),
            ("OPENAI_API_KEY".into(), key_or_placeholder(served)),
        ],
        files: vec![ConfigFile {
            path: "~/.aider.model.metadata.json".into(),
            dir_env: None,
            content: pretty_json(&metadata),
            merge: "merge: the model's entry (aider also reads this file from the repository root)"
                .into(),
        }],
        command: vec!["aider".into(), "--model".into(), name],
        notes: vec![format!(
            "Window {} tokens: {} for the prompt, {} for a reply.",
            budget.window,
            budget.window - budget.max_output,
            budget.max_output
        )],
    }
}
