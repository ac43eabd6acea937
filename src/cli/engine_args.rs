//! Flags shared by every subcommand that loads a model: which model, which device, how weights are kept.

use std::path::PathBuf;

use agentd::engine::device::DeviceSpec;
use agentd::engine::fetch::{FetchOptions, ModelSelector};
use agentd::engine::model::WeightFormat;
use agentd::engine::{Engine, EngineOptions};
use anyhow::Context;

#[derive(Debug, Clone, clap::Args)]
pub struct EngineArgs {
    /// A known model name (see `agentd model list`).
    #[arg(long, default_value = agentd::engine::manifest::DEFAULT_MODEL, env = "AGENTD_MODEL")]
    pub model: String,
    /// A GGUF file to load instead of a named model (any supported architecture).
    #[arg(long, value_name = "FILE.gguf", conflicts_with = "model")]
    pub model_path: Option<PathBuf>,
    /// auto | cpu | cuda | cuda:N | metal
    #[arg(long, default_value = "auto", env = "AGENTD_DEVICE")]
    pub device: String,
    /// How quantized weights are kept: auto (as stored; on the CPU our own engine and kernels), native (as
    /// stored, on candle's forward pass and kernels: the reference path), q8_0 (requantise everything to Q8_0).
    #[arg(long, default_value = "auto")]
    pub weights: WeightFormat,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
}

impl EngineArgs {
    pub fn selector(&self) -> ModelSelector {
        match &self.model_path {
            Some(p) => ModelSelector::Path(p.clone()),
            None => ModelSelector::parse(&self.model),
        }
    }

    pub fn options(&self) -> anyhow::Result<EngineOptions> {
        let device: DeviceSpec = self.device.parse()?;
        Ok(EngineOptions {
            model: self.selector(),
            device,
            weight_format: self.weights,
            fetch: FetchOptions {
                progress: true,
                offline: self.offline,
                ..FetchOptions::default()
            },
            ..EngineOptions::default()
        })
    }

    /// Loads the engine, printing a device fallback note to stderr if there is one.
    pub fn load(&self) -> anyhow::Result<Engine> {
        let engine = Engine::load(self.options()?).context("loading the model")?;
        if let Some(note) = &engine.info().device_note {
            eprintln!("note: {note}");
        }
        Ok(engine)
    }
}
