//! Continue's CLI, `cn` (and its editor extensions, which read the same file): a model entry with the
//! provider `openai` at agentd's address, its context length and reply size, and tool use declared.

use super::{key_or_placeholder, v1, Budget, ClientSetup, ConfigFile, Served};

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let config = format!(
        "name: agentd\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: {model} (agentd)\n    provider: openai\n    \
         model: {model}\n    apiBase: {base}\n    apiKey: {key}\n    roles: [chat, edit, apply]\n    \
         capabilities: [tool_use]\n    defaultCompletionOptions:\n      contextLength: {window}\n      \
         maxTokens: {out}\n",
        model = served.model,
        base = v1(served),
        key = key_or_placeholder(served),
        window = budget.window,
        out = budget.max_output,
    );
    ClientSetup {
        name: "continue",
        title: "Continue (cn)",
        api: "OpenAI Chat Completions (/v1/chat/completions)",
        env: Vec::new(),
        files: vec![ConfigFile {
            path: "~/.continue/config.yaml".into(),
            dir_env: None,
            content: config,
            merge: "merge: the model into `models`".into(),
        }],
        command: vec![
            "cn".into(),
            "--config".into(),
            "~/.continue/config.yaml".into(),
        ],
        notes: vec![format!(
            "Window {} tokens; replies up to {}. Headless: `cn -p \"…\" --auto`.",
            budget.window, budget.max_output
        )],
    }
}
