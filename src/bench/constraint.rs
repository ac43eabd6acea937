//! The measurement of `agentd bench constraint`: what grammar-constrained decoding costs. The same greedy prompt
//! is decoded unconstrained and under a grammar that allows the same text (tools with `tool_choice: none`, so the
//! output is token-for-token identical: the difference is pure overhead); then a JSON-schema reply and a required
//! tool call show the effect of forced tokens.
//!
//! Figures per scenario: decode tok/s = (completion tokens − 1) / decode time, as a [`Spread`] over repetitions;
//! under a grammar, the constraint time per sampled token (check, mask when rejected, commit, forced tokens) and
//! per full mask as p50/p99/max of every step of every repetition ([`super::stats`]'s percentiles), and the
//! constraint time as a share of decode time.

use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::stats::{Distribution, Spread};
use super::BenchError;
use crate::engine::{ConstraintSpec, ConstraintStats, Engine, GenerateRequest, SamplingParams};
use crate::schema::ToolSpec;
use crate::schema::{ResponseFormat, ToolChoice};

/// What to measure; the caller checks `reps >= 1` and `max_tokens >= 2`.
#[derive(Debug, Clone)]
pub struct ConstraintBenchOptions {
    pub max_tokens: usize,
    pub reps: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: &'static str,
    /// Completion tokens of the last repetition.
    pub tokens: usize,
    pub decode_tok_s: Spread,
    /// Only under a grammar.
    pub constraint: Option<ConstraintFigures>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConstraintFigures {
    /// Constraint time per sampled token (check, mask when rejected, commit, forced tokens), microseconds.
    pub step_us_p50: f64,
    pub step_us_p99: f64,
    pub step_us_max: f64,
    /// Full-mask computations (rejected tokens only), microseconds.
    pub mask_us_p50: f64,
    pub mask_us_p99: f64,
    /// Constraint time as a share of decode time, percent.
    pub overhead_pct: f64,
    pub sampled: usize,
    pub masked: usize,
    pub forced: usize,
    pub compile_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConstraintReport {
    pub model: String,
    pub device: String,
    pub threads: usize,
    pub parser_factory_build_secs: f64,
    pub max_tokens: usize,
    pub reps: usize,
    pub scenarios: Vec<Scenario>,
}

/// The bench's three tools (weather, file read, addition): also the micro-benchmark's (`benches/`).
pub fn tools() -> Result<Vec<ToolSpec>, BenchError> {
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

/// A JSON reply of a small `person` schema: also the micro-benchmark's (`benches/`).
pub fn person_spec() -> ConstraintSpec {
    ConstraintSpec {
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
    }
}

fn prompt(
    engine: &Engine,
    user: &str,
    spec: Option<&ConstraintSpec>,
) -> Result<Vec<u32>, BenchError> {
    let messages = [json!({"role": "user", "content": user})];
    let (tools, choice) = match spec {
        Some(s) => (s.tools.as_slice(), s.tool_choice.clone()),
        None => (&[][..], ToolChoice::Auto),
    };
    Ok(engine.chat_prompt(&messages, tools, &choice, None)?)
}

fn measure(
    engine: &Engine,
    name: &'static str,
    prompt: &[u32],
    constraint: Option<ConstraintSpec>,
    opts: &ConstraintBenchOptions,
) -> Result<Scenario, BenchError> {
    let mut speeds = Vec::new();
    let mut steps: Vec<f64> = Vec::new();
    let mut masks: Vec<f64> = Vec::new();
    let mut last: Option<ConstraintStats> = None;
    let mut tokens = 0;
    let mut constraint_secs = 0.0;
    let mut decode_secs = 0.0;
    for rep in 0..opts.reps {
        let req = GenerateRequest {
            prompt: prompt.to_vec(),
            sampling: SamplingParams::greedy(),
            max_tokens: Some(opts.max_tokens),
            constraint: constraint.clone(),
            ..Default::default()
        };
        let s = engine
            .generate_blocking(req, CancellationToken::new(), |_| {})
            .map_err(|e| BenchError::engine_at(format!("{name}, repetition {rep}"), e))?;
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
        decode_tok_s: Spread::of(&speeds).ok_or(BenchError::NoMeasurements)?,
        constraint: figures,
    })
}

/// Builds the parser factory, warms up, and measures the five scenarios in order.
pub fn run(engine: &Engine, opts: &ConstraintBenchOptions) -> Result<ConstraintReport, BenchError> {
    let factory = engine.grammar_factory()?;
    let tools = tools()?;
    let story = "Write a long, detailed story about a lighthouse keeper and a storm.";
    let text_only = ConstraintSpec {
        tools: tools.clone(),
        tool_choice: ToolChoice::None,
        ..ConstraintSpec::default()
    };
    // `tool_choice: none` hides the tools from the prompt, so both runs see the same prompt.
    let story_prompt = prompt(engine, story, None)?;
    // Warm-up.
    let warm = GenerateRequest {
        prompt: story_prompt.clone(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(4),
        ..Default::default()
    };
    engine.generate_blocking(warm, CancellationToken::new(), |_| {})?;

    let person = person_spec();
    let person_prompt = prompt(engine, "Describe a fictional person as JSON.", None)?;
    let required = ConstraintSpec {
        tools,
        tool_choice: ToolChoice::Required,
        ..ConstraintSpec::default()
    };
    let weather_prompt = prompt(
        engine,
        "What is the weather in Paris and in Oslo?",
        Some(&required),
    )?;

    let scenarios = vec![
        measure(engine, "unconstrained text", &story_prompt, None, opts)?,
        measure(
            engine,
            "text grammar (tools, tool_choice none)",
            &story_prompt,
            Some(text_only),
            opts,
        )?,
        measure(
            engine,
            "unconstrained, JSON prompt",
            &person_prompt,
            None,
            opts,
        )?,
        measure(
            engine,
            "json_schema reply",
            &person_prompt,
            Some(person),
            opts,
        )?,
        measure(
            engine,
            "required tool call (3 tools)",
            &weather_prompt,
            Some(required),
            opts,
        )?,
    ];
    let info = engine.info();
    Ok(ConstraintReport {
        model: info.name.clone(),
        device: info.device.clone(),
        threads: crate::engine::cpu_threads(),
        parser_factory_build_secs: factory.build_secs(),
        max_tokens: opts.max_tokens,
        reps: opts.reps,
        scenarios,
    })
}
