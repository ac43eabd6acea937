//! `agentd bench …`: benchmarks. Speed is measured here, never asserted in tests.

mod engine;
pub mod stats;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Prefill and decode speed of the local engine.
    Engine(engine::EngineBenchArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Engine(args) => engine::run(args),
    }
}
