//! `agentd bench …`: benchmarks. Speed is measured here, never asserted in tests.

mod constraint;
mod engine;
mod schemas;
pub mod stats;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Prefill and decode speed of the local engine.
    Engine(engine::EngineBenchArgs),
    /// Grammar-constraint overhead: mask time per sampled token, decode speed with and without a grammar.
    Constraint(constraint::ConstraintBenchArgs),
    /// The JSON Schema validity suite: admission, grammar vs. test documents, constrained generations.
    Schemas(schemas::SchemasBenchArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Engine(args) => engine::run(args),
        BenchCommand::Constraint(args) => constraint::run(args),
        BenchCommand::Schemas(args) => schemas::run(args),
    }
}
