//! Codex CLI (Responses API). A model Codex's own catalog does not know gets "fallback metadata" (a warning on
//! every run, and a 272k window): a catalog file (`model_catalog_json`) describes the served model instead,
//! with its window, its compaction trigger and our short instructions for a local model; `config.toml` names
//! the provider (Codex refuses `wire_api = "chat"`) and waits long enough for a CPU's prefill.

use super::{pretty_json, v1, Budget, ClientSetup, ConfigFile, Served};

/// The instructions the catalog gives the served model (Codex's `base_instructions`).
const INSTRUCTIONS: &str = include_str!("codex_instructions.md");
/// How long Codex waits for the next streamed event: a long prompt's prefill on a CPU takes minutes.
const STREAM_IDLE_MS: u64 = 1_800_000;

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let key_line = match served.api_key {
        Some(_) => "env_key = \"AGENTD_API_KEY\"\n",
        None => "",
    };
    let config = format!(
        "model = \"{model}\"\nmodel_provider = \"agentd\"\nmodel_catalog_json = \"agentd-models.json\"\n\
         model_context_window = {window}\nmodel_auto_compact_token_limit = {compact}\n\n\
         [model_providers.agentd]\nname = \"agentd\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\n\
         {key_line}stream_idle_timeout_ms = {STREAM_IDLE_MS}\n",
        model = served.model,
        window = budget.window,
        compact = budget.compact_at,
        base = v1(served),
    );
    let catalog = serde_json::json!({"models": [{
        "slug": served.model,
        "display_name": served.model,
        "description": "served by agentd",
        "supported_reasoning_levels": [],
        "shell_type": "default",
        "visibility": "list",
        "supported_in_api": true,
        "priority": 1,
        "upgrade": null,
        "base_instructions": INSTRUCTIONS,
        "supports_reasoning_summaries": false,
        "support_verbosity": false,
        "default_verbosity": null,
        "apply_patch_tool_type": null,
        "truncation_policy": {"mode": "bytes", "limit": 10000},
        "supports_parallel_tool_calls": false,
        "context_window": budget.window,
        "auto_compact_token_limit": budget.compact_at,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
    }]});
    let mut env = Vec::new();
    if let Some(key) = &served.api_key {
        env.push(("AGENTD_API_KEY".to_string(), key.clone()));
    }
    ClientSetup {
        name: "codex",
        title: "Codex CLI",
        api: "OpenAI Responses (/v1/responses)",
        env,
        files: vec![
            ConfigFile {
                path: "~/.codex/config.toml".into(),
                dir_env: Some("CODEX_HOME".into()),
                content: config,
                merge: "merge: these keys and the [model_providers.agentd] table".into(),
            },
            ConfigFile {
                path: "~/.codex/agentd-models.json".into(),
                dir_env: Some("CODEX_HOME".into()),
                content: pretty_json(&catalog),
                merge: "new file beside config.toml (its path is relative to it)".into(),
            },
        ],
        command: vec!["codex".into(), "--model".into(), served.model.clone()],
        notes: vec![format!(
            "Window {} tokens; Codex compacts at {} tokens. Non-interactive: `codex exec --skip-git-repo-check \"…\"`.",
            budget.window, budget.compact_at
        )],
    }
}
