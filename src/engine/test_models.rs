//! The real models the engine's unit tests run on, found as the integration suite finds them
//! (`tests/suite/common.rs`): by manifest name, in `$AGENTD_HOME`'s model cache (fetched there once if missing).
//! The one place the engine's unit tests name where model files come from.

use std::path::PathBuf;

use crate::engine::{DeviceSpec, Engine, EngineOptions};
use crate::model_files::fetch::{self, FetchOptions, ModelSelector};

/// Path of a known model's GGUF, fetched into the cache if needed.
pub(crate) fn model_path(name: &str) -> PathBuf {
    fetch::resolve(&ModelSelector::Name(name.into()), &FetchOptions::default())
        .unwrap_or_else(|e| panic!("model {name}: {e}"))
        .path
}

pub(crate) fn smollm2_path() -> PathBuf {
    model_path("smollm2-135m-instruct")
}

pub(crate) fn qwen_path() -> PathBuf {
    model_path("qwen2.5-coder-0.5b-instruct")
}

/// An engine on the CPU for a model file (default options otherwise).
pub(crate) fn cpu_engine(path: PathBuf) -> Engine {
    Engine::load(EngineOptions {
        model: ModelSelector::Path(path.clone()),
        device: DeviceSpec::Cpu,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("load {}: {e}", path.display()))
}
