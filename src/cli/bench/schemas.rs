//! `agentd bench schemas`: the schema validity suite over `../shared/schemas/` (or `--dir`): admission, grammar
//! vs. test documents, and constrained generations validated with `jsonschema`. Prints the table (or `--json`);
//! the suite itself is `agentd::bench::schema_suite`.

use std::path::PathBuf;
use std::time::Instant;

use agentd::bench::schema_suite::{
    self as suite, CaseReport, Generation, SuiteOptions, SuiteSummary,
};
use anyhow::Context;
use serde::Serialize;

use crate::cli::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct SchemasBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The folder of JSONSchemaBench files.
    #[arg(long, default_value = "../shared/schemas")]
    pub dir: PathBuf,
    /// Generate for every Nth compiled schema only (1 = all).
    #[arg(long, default_value_t = 1)]
    pub every: usize,
    /// Stop after this many schemas (in name order).
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Repetition penalty of the (otherwise greedy) generations (default: the test suite's).
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// Only admission and test documents (no model generation).
    #[arg(long)]
    pub no_generate: bool,
    /// Print every schema's outcome to stderr as it finishes.
    #[arg(long)]
    pub verbose: bool,
    /// Print one JSON object (summary and per-schema reports) instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    model: String,
    max_tokens: usize,
    every: usize,
    secs: f64,
    summary: SuiteSummary,
    problems: Vec<CaseReport>,
    cases: Vec<CaseReport>,
}

pub fn run(args: SchemasBenchArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut cases =
        suite::load_dir(&args.dir).with_context(|| format!("loading {}", args.dir.display()))?;
    if let Some(n) = args.limit {
        cases.truncate(n);
    }
    let engine = args.engine.load()?;
    let factory = engine.grammar_factory()?;
    let every = args.every.max(1);
    let mut sampling = suite::suite_sampling();
    if let Some(p) = args.repeat_penalty {
        sampling.repetition_penalty = p;
    }
    sampling.validate()?;
    let opts = SuiteOptions {
        every,
        max_tokens: args.max_tokens,
        sampling,
        generate: !args.no_generate,
    };
    let reports = suite::run(&engine, &factory, &cases, &opts, |case, report| {
        if args.verbose {
            let outcome = match (&report.rejected, &report.generation) {
                (Some(kind), _) => format!("rejected ({kind})"),
                (None, Some(Generation::Valid { tokens, secs })) => {
                    format!("valid ({tokens} tokens, {secs:.1} s)")
                }
                (None, Some(g)) => format!("{g:?}"),
                (None, None) => "compiled".into(),
            };
            eprintln!(
                "{:<60} docs +{}/-{} (valid rejected {}, invalid accepted {})  {outcome}",
                case.name,
                report.valid_accepted,
                report.invalid_rejected,
                report.valid_rejected,
                report.invalid_accepted
            );
        }
    });
    let summary = SuiteSummary::of(&reports);
    let problems = suite::problems(&reports);
    if args.json {
        let report = Report {
            model: engine.info().name.clone(),
            max_tokens: args.max_tokens,
            every,
            secs: started.elapsed().as_secs_f64(),
            summary,
            problems,
            cases: reports,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} — {} schemas, max_tokens {}, generating for every {}th compiled schema, {:.0} s",
            engine.info().name,
            summary.schemas,
            args.max_tokens,
            every,
            started.elapsed().as_secs_f64()
        );
        print!("{}", summary.table());
        for p in &problems {
            println!("PROBLEM {}: {}", p.name, serde_json::to_string(p)?);
        }
    }
    Ok(())
}
