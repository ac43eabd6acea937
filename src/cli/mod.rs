//! Command-line interface: clap definitions and one file per subcommand. The only place (with `main.rs`)
//! that uses `anyhow`.

pub mod agent_setup;
pub mod bench;
pub mod chat;
pub mod clients;
pub mod config;
pub mod engine_args;
pub mod export;
#[cfg(feature = "local")]
pub mod generate;
pub mod model_files;
#[cfg(feature = "local")]
pub mod model_synth;
pub mod run;
pub mod serve;
#[cfg(feature = "local")]
pub mod tokenize;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentd",
    version,
    about = "GPU-local inference-plus-agent appliance"
)]
pub struct Cli {
    /// CPU threads for the model (default: the machine's physical cores, at most the CPUs this process may use;
    /// or RAYON_NUM_THREADS).
    #[arg(long, global = true, env = "AGENTD_THREADS")]
    pub threads: Option<usize>,
    /// Write logs as JSON lines (the structured events: llm.request_*, tool.*_invoke, session.*, compaction).
    #[arg(long, global = true, env = "AGENTD_LOG_JSON")]
    pub log_json: bool,
    /// Append logs to this file instead of stderr (level from RUST_LOG, default info).
    #[arg(long, global = true, value_name = "FILE", env = "AGENTD_LOG_FILE")]
    pub log_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the OpenAI-compatible HTTP API and agent sessions (the main job).
    Serve(serve::ServeArgs),
    /// Stream a completion of PROMPT to stdout.
    #[cfg(feature = "local")]
    Generate(generate::GenerateArgs),
    /// Print the token ids of TEXT as a JSON array.
    #[cfg(feature = "local")]
    Tokenize(tokenize::TokenizeArgs),
    /// Manage model files: list, pull, path.
    #[command(subcommand)]
    Model(model_files::ModelCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The interactive coding assistant (terminal UI).
    Chat(chat::ChatArgs),
    /// The coding agent without a UI: print the answer (-p), stream events (--mode json) or speak RPC.
    Run(run::RunArgs),
    /// Write a session's whole tree as a self-contained HTML page (default) or Markdown.
    Export(export::ExportArgs),
    /// The settings of `chat` and `run`: `agentd config show`.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Settings for coding clients (Claude Code, Codex, Pi, aider, Continue, OpenCode, Ollama's clients) that
    /// tell them the served model's window.
    Clients(clients::ClientsArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        #[cfg(feature = "local")]
        Command::Generate(args) => generate::run(args),
        #[cfg(feature = "local")]
        Command::Tokenize(args) => tokenize::run(args),
        Command::Model(cmd) => model_files::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Chat(args) => chat::run(args),
        Command::Run(args) => run::run(args),
        Command::Export(args) => export::run(args),
        Command::Config(cmd) => config::run(cmd),
        Command::Clients(args) => clients::run(args),
    }
}
