//! Command-line interface: clap definitions and one file per subcommand. The only place (with `main.rs`)
//! that uses `anyhow`.

pub mod bench;
pub mod engine_args;
pub mod generate;
pub mod model;
pub mod tokenize;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentd",
    version,
    about = "GPU-local inference-plus-agent appliance"
)]
pub struct Cli {
    /// CPU threads for the model (default: the machine's logical cores, or RAYON_NUM_THREADS).
    #[arg(long, global = true, env = "AGENTD_THREADS")]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Stream a completion of PROMPT to stdout.
    Generate(generate::GenerateArgs),
    /// Print the token ids of TEXT as a JSON array.
    Tokenize(tokenize::TokenizeArgs),
    /// Manage model files: list, pull, path.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Model(cmd) => model::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
    }
}
