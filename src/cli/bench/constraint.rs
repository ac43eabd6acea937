//! `agentd bench constraint`: what grammar-constrained decoding costs. The same greedy prompt is decoded
//! unconstrained and under a grammar that allows the same text (tools with `tool_choice: none`, so the output is
//! token-for-token identical: the difference is pure overhead); then a JSON-schema reply and a required tool call
//! show the effect of forced tokens. Reports constraint time per sampled token (p50/p99) and decode tok/s.

use agentd::bench::stats::{Distribution, Spread};
use agentd::engine::constraint::{ConstraintSpec, ConstraintStats, ResponseFormat, ToolChoice};
use agentd::engine::generate::GenerateRequest;
use agentd::engine::prompt::render_chat;
use agentd::engine::sampler::SamplingParams;
use agentd::engine::Engine;
use agentd::tools::spec::ToolSpec;
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

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

#[derive(Serialize)]
struct Scenario {
    name: &'static str,
    /// Completion tokens of the last repetition.
    tokens: usize,
    decode_tok_s: Spread,
    /// Only under a grammar.
    constraint: Option<ConstraintFigures>,
}

#[derive(Serialize)]
struct ConstraintFigures {
    /// Constraint time per sampled token (check, mask when rejected, commit, forced tokens), microseconds.
    step_us_p50: f64,
    step_us_p99: f64,
    step_us_max: f64,
    /// Full-mask computations (rejected tokens only), microseconds.
    mask_us_p50: f64,
    mask_us_p99: f64,
    /// Constraint time as a share of decode time, percent.
    overhead_pct: f64,
    sampled: usize,
    masked: usize,
    forced: usize,
    compile_ms: f64,
}

#[derive(Serialize)]
struct Report {
    model: String,
    device: String,
    threads: usize,
    parser_factory_build_secs: f64,
    max_tokens: usize,
    reps: usize,
    scenarios: Vec<Scenario>,
}

fn tools() -> anyhow::Result<Vec<ToolSpec>> {
    Ok(vec![
        ToolSpec::new(
            "get_weather",
            "Current weather in a city",
            json!({"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}),
        )?,
        ToolSpec::new(
            "read_file",
            "Read a text file",
            json!({"type": "object", "properties": {"path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1}}, "required": ["path"]}),
        )?,
        ToolSpec::new(
            "add",
            "Add two numbers",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]}),
        )?,
    ])
}

fn prompt(engine: &Engine, user: &str, spec: Option<&ConstraintSpec>) -> anyhow::Result<Vec<u32>> {
    let messages = [json!({"role": "user", "content": user})];
    let (tools, choice) = match spec {
        Some(s) => (s.tools.as_slice(), s.tool_choice.clone()),
        None => (&[][..], ToolChoice::Auto),
    };
    let text = render_chat(
        engine.template(),
        &messages,
        tools,
        &choice,
        engine.tool_call_format(),
    )?;
    Ok(engine.tokenizer().encode(&text, true)?)
}

fn measure(
    engine: &Engine,
    name: &'static str,
    prompt: &[u32],
    constraint: Option<ConstraintSpec>,
    args: &ConstraintBenchArgs,
) -> anyhow::Result<Scenario> {
    let mut speeds = Vec::new();
    let mut steps: Vec<f64> = Vec::new();
    let mut masks: Vec<f64> = Vec::new();
    let mut last: Option<ConstraintStats> = None;
    let mut tokens = 0;
    let mut constraint_secs = 0.0;
    let mut decode_secs = 0.0;
    for rep in 0..args.reps {
        let req = GenerateRequest {
            prompt: prompt.to_vec(),
            sampling: SamplingParams::greedy(),
            max_tokens: Some(args.max_tokens),
            constraint: constraint.clone(),
            ..Default::default()
        };
        let s = engine
            .generate_blocking(req, CancellationToken::new(), |_| {})
            .with_context(|| format!("{name}, repetition {rep}"))?;
        tokens = s.completion_tokens;
        speeds.push(s.completion_tokens.saturating_sub(1) as f64 / s.decode_secs.max(1e-9));
        decode_secs += s.decode_secs;
        if let Some(c) = s.constraint {
            steps.extend(&c.step_secs);
            masks.extend(&c.mask_secs);
            constraint_secs += c.step_secs.iter().sum::<f64>();
            last = Some(c);
        }
    }
    let steps = Distribution::of(&steps);
    let masks = Distribution::of(&masks);
    let us =
        |d: Option<Distribution>, f: fn(Distribution) -> f64| d.map_or(f64::NAN, |d| f(d) * 1e6);
    let figures = last.map(|c| ConstraintFigures {
        step_us_p50: us(steps, |d| d.p50),
        step_us_p99: us(steps, |d| d.p99),
        step_us_max: us(steps, |d| d.max),
        mask_us_p50: us(masks, |d| d.p50),
        mask_us_p99: us(masks, |d| d.p99),
        overhead_pct: 100.0 * constraint_secs / decode_secs.max(1e-9),
        sampled: c.sampled_tokens,
        masked: c.masked_tokens,
        forced: c.forced_tokens,
        compile_ms: c.compile_secs * 1e3,
    });
    Ok(Scenario {
        name,
        tokens,
        decode_tok_s: Spread::of(&speeds).context("no measurements")?,
        constraint: figures,
    })
}

pub fn run(args: ConstraintBenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 || args.max_tokens < 2 {
        bail!("--reps must be >= 1 and --max-tokens >= 2");
    }
    let engine = args.engine.load()?;
    let factory = engine.grammar_factory()?;
    let tools = tools()?;
    let story = "Write a long, detailed story about a lighthouse keeper and a storm.";
    let text_only = ConstraintSpec {
        tools: tools.clone(),
        tool_choice: ToolChoice::None,
        ..ConstraintSpec::default()
    };
    // `tool_choice: none` hides the tools from the prompt, so both runs see the same prompt.
    let story_prompt = prompt(&engine, story, None)?;
    // Warm-up.
    let warm = GenerateRequest {
        prompt: story_prompt.clone(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(4),
        ..Default::default()
    };
    engine.generate_blocking(warm, CancellationToken::new(), |_| {})?;

    let person = ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "person".into(),
            schema: json!({"type": "object", "properties": {
                "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                "city": {"type": "string"},
                "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
                "required": ["name", "age", "city", "hobbies"], "additionalProperties": false}),
            strict: true,
        },
        ..ConstraintSpec::default()
    };
    let person_prompt = prompt(&engine, "Describe a fictional person as JSON.", None)?;
    let required = ConstraintSpec {
        tools,
        tool_choice: ToolChoice::Required,
        ..ConstraintSpec::default()
    };
    let weather_prompt = prompt(
        &engine,
        "What is the weather in Paris and in Oslo?",
        Some(&required),
    )?;

    let scenarios = vec![
        measure(&engine, "unconstrained text", &story_prompt, None, &args)?,
        measure(
            &engine,
            "text grammar (tools, tool_choice none)",
            &story_prompt,
            Some(text_only),
            &args,
        )?,
        measure(
            &engine,
            "unconstrained, JSON prompt",
            &person_prompt,
            None,
            &args,
        )?,
        measure(
            &engine,
            "json_schema reply",
            &person_prompt,
            Some(person),
            &args,
        )?,
        measure(
            &engine,
            "required tool call (3 tools)",
            &weather_prompt,
            Some(required),
            &args,
        )?,
    ];
    let info = engine.info();
    let report = Report {
        model: info.name.clone(),
        device: info.device.clone(),
        threads: agentd::engine::device::cpu_threads(),
        parser_factory_build_secs: factory.build_secs(),
        max_tokens: args.max_tokens,
        reps: args.reps,
        scenarios,
    };
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
