//! Shared test helpers: the real default model (fetched and cached once) and the reference data.
#![allow(dead_code)]

use std::path::PathBuf;

use agentd::model_files::fetch::{self, FetchOptions, ModelSelector};

/// `../shared/refdata/NAME`, parsed.
pub fn refdata(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/refdata")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Path of a known model's GGUF, fetched into the cache if needed.
pub fn model_path(name: &str) -> PathBuf {
    fetch::resolve(&ModelSelector::Name(name.into()), &FetchOptions::default())
        .unwrap_or_else(|e| panic!("model {name}: {e}"))
        .path
}

pub fn smollm2_path() -> PathBuf {
    model_path("smollm2-135m-instruct")
}

pub fn gemma_path() -> PathBuf {
    model_path("gemma-3-270m")
}

pub fn qwen_path() -> PathBuf {
    model_path("qwen2.5-coder-0.5b-instruct")
}

/// One engine on the default model, shared by every test in the binary (jobs run one at a time).
#[cfg(feature = "local")]
pub fn engine() -> &'static agentd::engine::Engine {
    static ENGINE: std::sync::OnceLock<agentd::engine::Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| cpu_engine(smollm2_path()))
}

/// An engine on the CPU for a model file (default options otherwise).
#[cfg(feature = "local")]
pub fn cpu_engine(path: PathBuf) -> agentd::engine::Engine {
    agentd::engine::Engine::load(agentd::engine::EngineOptions {
        model: ModelSelector::Path(path.clone()),
        device: agentd::engine::DeviceSpec::Cpu,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("load {}: {e}", path.display()))
}

/// A `read {path}` tool spec for provider and prompt tests.
pub fn read_tool() -> agentd::schema::ToolSpec {
    agentd::schema::ToolSpec::new(
        "read",
        "Read a file",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    )
    .unwrap()
}

/// A greedy request for `max_tokens` tokens after `prompt`.
#[cfg(feature = "local")]
pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> agentd::engine::GenerateRequest {
    agentd::engine::GenerateRequest {
        prompt,
        sampling: agentd::engine::SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ..Default::default()
    }
}

/// One engine on Qwen2.5-Coder-0.5B (its own chat template), shared by the tests that need the second tokenizer.
#[cfg(feature = "local")]
pub fn qwen_engine() -> &'static agentd::engine::Engine {
    static ENGINE: std::sync::OnceLock<agentd::engine::Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| cpu_engine(qwen_path()))
}

/// A GGUF's metadata, every key and value sorted, as text (NaN equals NaN there).
pub fn metadata_listing(m: &agentd::text::GgufMetadata) -> Vec<String> {
    use agentd::text::Metadata;
    let mut out: Vec<String> = m
        .keys()
        .map(|k| format!("{k} = {:?}", m.value(k)))
        .collect();
    out.sort();
    out
}
