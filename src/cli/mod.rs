//! Command-line interface: clap definitions and one file per subcommand. The only place (with `main.rs`)
//! that uses `anyhow`.

pub mod model;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentd",
    version,
    about = "GPU-local inference-plus-agent appliance"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage model files: list, pull, path.
    #[command(subcommand)]
    Model(model::ModelCommand),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Model(cmd) => model::run(cmd),
    }
}
