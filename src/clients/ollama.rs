//! The clients that speak Ollama's API (`/api/*`): GitHub Copilot Chat's and JetBrains AI Assistant's Ollama
//! providers, Open WebUI, the `ollama` Python and JavaScript libraries and the Ollama CLI (`OLLAMA_HOST`), and
//! Continue with `provider: ollama` (whose CLI reaches the same server's `/v1`). They list the models from
//! `/api/tags` and read each one's window from `/api/show`, so the settings are only where the server is.

use super::{Budget, ClientSetup, ConfigFile, Served};

pub(super) fn setup(served: &Served, budget: &Budget) -> ClientSetup {
    let key = served
        .api_key
        .as_ref()
        .map(|k| format!("    apiKey: {k}\n"))
        .unwrap_or_default();
    let config = format!(
        "name: agentd\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: {model} (agentd, Ollama)\n    \
         provider: ollama\n    model: {model}\n    apiBase: {root}\n{key}    roles: [chat, edit, apply]\n    \
         capabilities: [tool_use]\n    defaultCompletionOptions:\n      contextLength: {window}\n      \
         maxTokens: {out}\n",
        model = served.model,
        root = served.root,
        window = budget.window,
        out = budget.max_output,
    );
    let mut notes = vec![
        format!(
            "Ollama's address is {}: Ollama's clients look at http://localhost:11434 unless told, so \
             `agentd serve --port 11434` needs no setting at all.",
            served.root
        ),
        format!(
            "GitHub Copilot Chat (VS Code): Manage Models › Ollama, or the setting \
             `github.copilot.chat.byok.ollamaEndpoint` = {root}. JetBrains AI Assistant: Settings › Tools › AI \
             Assistant › Models › Ollama, URL {root}. Open WebUI: OLLAMA_BASE_URL={root}.",
            root = served.root
        ),
        format!(
            "Models are listed as `{}:latest` (the bare name works too); /api/show gives each one's window \
             ({} tokens for this one).",
            served.model, budget.window
        ),
    ];
    if let Some(k) = &served.api_key {
        notes.push(format!(
            "The server asks for a key: the libraries send it as a header \
             (`ollama.Client(host, headers={{\"Authorization\": \"Bearer {k}\"}})`); editors that send none need a \
             server started without --api-key."
        ));
    }
    ClientSetup {
        name: "ollama",
        title: "Ollama clients (Copilot, JetBrains, Open WebUI, the ollama libraries, Continue)",
        api: "Ollama (/api/chat, /api/generate, /api/tags, /api/show)",
        env: vec![("OLLAMA_HOST".into(), served.root.clone())],
        files: vec![ConfigFile {
            path: "~/.continue/config.yaml".into(),
            dir_env: None,
            content: config,
            merge: "merge: the model into `models` (Continue with an Ollama model)".into(),
        }],
        command: vec![
            "cn".into(),
            "--config".into(),
            "~/.continue/config.yaml".into(),
        ],
        notes,
    }
}
