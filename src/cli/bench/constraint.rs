//! `agentd bench constraint`: what grammar-constrained decoding costs — constraint time per sampled token
//! (p50/p99) and decode tok/s, unconstrained and under grammars. Flags and printing; the measurement (and what
//! each scenario is) is `agentd::bench::constraint`.

use agentd::bench::constraint::{self, ConstraintBenchOptions};
use anyhow::bail;

use crate::cli::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct ConstraintBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ConstraintBenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 || args.max_tokens < 2 {
        bail!("--reps must be >= 1 and --max-tokens >= 2");
    }
    let engine = args.engine.load()?;
    let opts = ConstraintBenchOptions {
        max_tokens: args.max_tokens,
        reps: args.reps,
    };
    let report = constraint::run(&engine, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} on {} — greedy, max {} tokens, {} reps; parser factory built in {:.0} ms",
        report.model,
        report.device,
        report.max_tokens,
        report.reps,
        report.parser_factory_build_secs * 1e3
    );
    println!(
        "  {:<42} {:>6} {:>10} {:>9} {:>9} {:>9} {:>17} {:>9} {:>9}",
        "scenario",
        "tokens",
        "decode/s",
        "p50 µs",
        "p99 µs",
        "overhead",
        "sampled/masked/ff",
        "mask p50",
        "mask p99"
    );
    for s in &report.scenarios {
        match &s.constraint {
            Some(c) => println!(
                "  {:<42} {:>6} {:>10.1} {:>9.0} {:>9.0} {:>8.2}% {:>17} {:>9.0} {:>9.0}",
                s.name,
                s.tokens,
                s.decode_tok_s.median,
                c.step_us_p50,
                c.step_us_p99,
                c.overhead_pct,
                format!("{}/{}/{}", c.sampled, c.masked, c.forced),
                c.mask_us_p50,
                c.mask_us_p99
            ),
            None => println!(
                "  {:<42} {:>6} {:>10.1} {:>9} {:>9} {:>9} {:>17} {:>9} {:>9}",
                s.name, s.tokens, s.decode_tok_s.median, "-", "-", "-", "-", "-", "-"
            ),
        }
    }
    Ok(())
}
