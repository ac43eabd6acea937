//! `agentd bench parity`: one GGUF on the CPU engine and on a device (CUDA with our kernels), logits compared
//! position by position, and each CUDA kernel against its CPU twin. Prints one JSON object; exits non-zero
//! when anything disagrees. The comparison is `agentd::engine::parity` and `agentd::engine::kernel_check`.

use agentd::engine::parity::{self, ParityOptions};
use agentd::engine::{
    kernel_check as check, select_device, DeviceSpec, GgufFile, Model, WeightFormat,
};
use anyhow::{bail, Context};
use serde_json::json;

#[derive(Debug, clap::Args)]
// The model flags here are the other commands' less `--weights` and `--chat-template`: parity always compares the
// CPU engine (weights as stored) with candle's forward pass, on logits, not on a chat prompt.
pub struct ParityBenchArgs {
    /// A known model (`agentd model list`, fetched and cached on first use) or a GGUF path to compare.
    #[arg(long, conflicts_with_all = ["dummy", "model_path"])]
    pub model: Option<String>,
    /// The GGUF to compare.
    #[arg(long, value_name = "FILE.gguf", conflicts_with = "dummy")]
    pub model_path: Option<std::path::PathBuf>,
    /// A synthetic model of this shape instead (see `agentd model synth`); default qwen2:tiny.
    #[arg(long, value_name = "ARCH:SIZE")]
    pub dummy: Option<String>,
    /// With --dummy: the model whose tokenizer to copy (a known name, or a GGUF from `agentd model vocab`).
    #[arg(long, value_name = "MODEL")]
    pub tokenizer_from: Option<String>,
    /// The device to check against the CPU engine: cuda, cuda:N, cpu (candle's path with the fused ops' CPU
    /// twins), metal.
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// Tokens fed one at a time, then as one chunk.
    #[arg(long, default_value_t = 24)]
    pub tokens: usize,
    /// Largest |Δ| allowed on a logit.
    #[arg(long, default_value_t = 0.25)]
    pub tolerance: f32,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
}

pub fn run(args: ParityBenchArgs) -> anyhow::Result<()> {
    if args.tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    let path = match (&args.model_path, &args.model) {
        (Some(p), _) => p.clone(),
        (None, Some(m)) => {
            let options = agentd::model_files::fetch::FetchOptions {
                progress: true,
                offline: args.offline,
                ..Default::default()
            };
            agentd::engine::files::resolve(
                &agentd::model_files::fetch::ModelSelector::parse(m),
                &options,
            )?
            .path
        }
        (None, None) => super::engine::dummy_model(
            args.dummy.as_deref().unwrap_or("qwen2:tiny"),
            args.tokenizer_from.as_deref(),
            args.offline,
        )?,
    };
    let gguf = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let spec: DeviceSpec = args.device.parse()?;
    let selected = select_device(spec);
    if let Some(note) = &selected.fallback_note {
        eprintln!("note: {note}");
    }
    let reference = Model::load(&gguf, &candle_core::Device::Cpu, WeightFormat::Auto)?;
    let mut candidate = Model::load(&gguf, &selected.device, WeightFormat::Native)?;
    if selected.device.is_cpu() {
        // On the CPU, check candle's path with the fused ops (their twins) rather than against itself.
        candidate.set_kernels(agentd::engine::Kernels::Fused)?;
    }
    let mut opts = ParityOptions::spread(args.tokens, reference.vocab_size);
    opts.tolerance = args.tolerance;
    let report = parity::compare(&reference, &candidate, &opts)?;
    let kernels = if selected.device.is_cuda() {
        check::against_twins(&selected.device)?
    } else {
        Vec::new()
    };
    let kernels_passed = kernels.iter().all(|k| k.passed);
    // A device asked for and not started is a failed check, not a pass on the CPU.
    let started = selected.fallback_note.is_none();
    let passed = report.passed && kernels_passed && started;
    let out = json!({
        "model": path.display().to_string(),
        "device": selected.describe(),
        "fallback": selected.fallback_note,
        "logits": report,
        "kernels": kernels,
        "kernel_tolerance": check::TOLERANCE,
        "kernels_checked": !kernels.is_empty(),
        "passed": passed,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    if !started {
        bail!("{} did not start (see the JSON above)", args.device);
    }
    if !passed {
        bail!("the device disagrees with the CPU (see the JSON above)");
    }
    Ok(())
}
