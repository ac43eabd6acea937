//! `agentd model synth ARCH:SIZE` and `agentd model vocab`: synthetic checkpoints (random weights, a real model's
//! tokenizer; see `agentd::engine::files::synth`) and tokenizer-only GGUFs. Both need the engine.

use agentd::engine::files::synth;
use agentd::model_files::fetch::{FetchOptions, ModelSelector};
use std::time::Instant;

use anyhow::Context;

use super::model_files::human_size;

#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// ARCH:SIZE — qwen2:tiny|0.5b|1.5b|7b, qwen3:tiny|0.6b|8b, qwen3moe:tiny|30b-a3b, gemma3:tiny|1b|4b,
    /// phi3:tiny|mini|4-mini, llama:tiny|tiny3|mistral-tiny|mistral-7b|135m|1b|8b (tiny3, 1b, 8b: Llama 3 rope).
    pub spec: String,
    /// The file to write.
    #[arg(long, value_name = "FILE.gguf")]
    pub out: std::path::PathBuf,
    /// The model whose tokenizer and chat template to copy (a known name or a GGUF path). Default: Qwen2.5-Coder
    /// for qwen2 and qwen3, SmolLM2 for llama.
    #[arg(long, value_name = "MODEL")]
    pub tokenizer_from: Option<String>,
    /// q4_k_m (llama.cpp's mix) or q8_0.
    #[arg(long, default_value = "q4_k_m")]
    pub quant: String,
    /// Seed of the random weights (the same seed writes the same file).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use only the model cache for the tokenizer's model; fetch nothing.
    #[arg(long)]
    pub offline: bool,
}

/// The spec `args` describe.
pub fn synth_spec(spec: &str, quant: &str, seed: u64) -> anyhow::Result<synth::SynthSpec> {
    let mut spec = synth::SynthSpec::parse(spec)?;
    spec.quant = match quant.to_ascii_lowercase().as_str() {
        "q4_k_m" => synth::SynthQuant::Q4KM,
        "q8_0" => synth::SynthQuant::Q8_0,
        other => anyhow::bail!("--quant {other}: known are q4_k_m and q8_0"),
    };
    spec.seed = seed;
    Ok(spec)
}

/// Opens the GGUF whose tokenizer a synthetic `arch` model copies (`from`, else the default for the architecture).
pub fn tokenizer_source(
    arch: agentd::engine::Architecture,
    from: Option<&str>,
    offline: bool,
) -> anyhow::Result<agentd::engine::GgufFile> {
    let name = from.unwrap_or(match arch {
        agentd::engine::Architecture::Qwen2
        | agentd::engine::Architecture::Qwen3
        | agentd::engine::Architecture::Qwen3Moe => "qwen2.5-coder-0.5b-instruct",
        // Gemma's and Phi's own tokenizers are SentencePiece models we do not have; any vocabulary will do
        // for comparing engines on the same weights.
        agentd::engine::Architecture::Llama
        | agentd::engine::Architecture::Gemma3
        | agentd::engine::Architecture::Phi3 => "smollm2-135m-instruct",
    });
    open_gguf(name, offline)
}

/// A known model (fetched into the cache unless `offline`) or a GGUF path, opened.
fn open_gguf(name: &str, offline: bool) -> anyhow::Result<agentd::engine::GgufFile> {
    let opts = FetchOptions {
        progress: true,
        offline,
        ..FetchOptions::default()
    };
    let resolved = agentd::engine::files::resolve(&ModelSelector::parse(name), &opts)
        .with_context(|| format!("resolving the tokenizer's model `{name}`"))?;
    Ok(agentd::engine::GgufFile::open(&resolved.path)?)
}

pub fn vocab(from: &str, out: &std::path::Path, offline: bool) -> anyhow::Result<()> {
    let source = open_gguf(from, offline)?;
    let bytes = synth::write_vocabulary(&source, out)
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "{}: the tokenizer of {from} ({} tokens), {:.1} MiB",
        out.display(),
        source.get_array("tokenizer.ggml.tokens")?.len(),
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

pub fn synth(args: &SynthArgs) -> anyhow::Result<()> {
    let spec = synth_spec(&args.spec, &args.quant, args.seed)?;
    let source = tokenizer_source(spec.arch, args.tokenizer_from.as_deref(), args.offline)?;
    let started = Instant::now();
    let made = synth::write(&spec, &source, &args.out)?;
    println!(
        "{}: {} {} ({} tensors, {:.2} B parameters, vocabulary {} from {}), {} in {:.1} s",
        made.path.display(),
        spec.arch.name(),
        spec.size,
        made.tensors,
        made.parameters as f64 / 1e9,
        made.vocab,
        source.path.display(),
        human_size(made.bytes),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
