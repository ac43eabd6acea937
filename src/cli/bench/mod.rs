//! `agentd bench …`: the benchmarks' flags and printing. What they measure, and the arithmetic, is the library's
//! `agentd::bench`; speed is measured there and printed here, never asserted in tests.

mod agent;
mod bfcl;
#[cfg(feature = "local")]
mod constraint;
#[cfg(feature = "local")]
mod engine;
mod fim;
mod load;
#[cfg(feature = "local")]
mod parity;
#[cfg(feature = "local")]
mod schemas;
mod tool_calls;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// The coding-task suite (benches/agent_tasks, dev and held-out parts) under agentd's harness and/or Pi's:
    /// pass rate, tool calls, tool errors and time per category and difficulty, at the defaults and at
    /// temperature 0.
    Agent(agent::AgentBenchArgs),
    /// Prefill and decode speed of the local engine.
    #[cfg(feature = "local")]
    Engine(engine::EngineBenchArgs),
    /// Grammar-constraint overhead: mask time per sampled token, decode speed with and without a grammar.
    #[cfg(feature = "local")]
    Constraint(constraint::ConstraintBenchArgs),
    /// The JSON Schema validity suite: admission, grammar vs. test documents, constrained generations.
    #[cfg(feature = "local")]
    Schemas(schemas::SchemasBenchArgs),
    /// Tool-call latency of any OpenAI-compatible endpoint (agentd --local, vLLM, llama.cpp): TTFT, time to the
    /// call's name and to the complete call, ITL, tok/s, valid share; --compare runs two endpoints A B A B.
    ToolCalls(tool_calls::ToolCallsBenchArgs),
    /// Tool calls on BFCL's functions (the bfcl-eval wheel's data) against any OpenAI-compatible endpoint: questions
    /// answered with a call, schema-valid calls, right function, under tool_choice auto and required.
    Bfcl(bfcl::BfclBenchArgs),
    /// One model on the CPU engine and on a device (CUDA: our kernels), logits compared; each CUDA kernel
    /// against its CPU twin. JSON out; non-zero exit on any disagreement.
    #[cfg(feature = "local")]
    Parity(parity::ParityBenchArgs),
    /// Concurrent streaming clients against `agentd serve` (some hanging up early): throughput, TTFT p50/p99.
    Load(load::LoadBenchArgs),
    /// Completion as you type against `/infill` servers side by side (agentd, llama-server): time to the first
    /// piece and to the whole middle, cache hits, cancelled share; --quality N scores held-out middles.
    Fim(fim::FimBenchArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Agent(args) => agent::run(args),
        #[cfg(feature = "local")]
        BenchCommand::Engine(args) => engine::run(args),
        #[cfg(feature = "local")]
        BenchCommand::Constraint(args) => constraint::run(args),
        #[cfg(feature = "local")]
        BenchCommand::Schemas(args) => schemas::run(args),
        BenchCommand::ToolCalls(args) => tool_calls::run(args),
        BenchCommand::Bfcl(args) => bfcl::run(args),
        BenchCommand::Load(args) => load::run(args),
        #[cfg(feature = "local")]
        BenchCommand::Parity(args) => parity::run(args),
        BenchCommand::Fim(args) => fim::run(args),
    }
}
