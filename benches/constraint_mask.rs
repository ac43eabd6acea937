//! `cargo bench --bench constraint_mask`: the llguidance side of one constrained decode step through the
//! engine's `Constraint` (reached through `engine::microbench`), with the real SmolLM2-135M tokenizer (49,152
//! tokens) read from the cached GGUF:
//!
//! - `reject_and_mask`: `Constraint::sample` when the sampled token is not allowed — the check, a full mask,
//!   −∞ written into the logits, and the resample (what a rejected token costs the decode loop);
//! - `check_only`: `Constraint::sample` when the sampled token is allowed (the common, cheap path);
//! - `compile_grammar`: `GrammarFactory::compile` of the request's grammar (once per request);
//! - `greedy_pick_baseline`: the argmax `sample` does around the grammar work (once on the check path, twice on
//!   the reject path), to subtract.
//!
//! Each at four grammar positions: a JSON-schema reply at its start and inside a string value, and a required
//! tool call (three tools) at its start and inside the arguments. The model file is not downloaded here: when
//! it is not in the cache the whole bench is skipped with a message (`agentd model pull smollm2-135m-instruct`).
// A bench is a test harness: a failed setup ends it with the reason (`expect`), as a test would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agentd::engine::microbench::{Constraint, Sampler};
use agentd::engine::{ConstraintSpec, GgufFile, GrammarFactory, SamplingParams};
use agentd::model_files::fetch::{self, FetchOptions, ModelSelector};
use agentd::schema::{ToolChoice, ToolSpec};
use agentd::text::call_format::ToolCallFormat;
use agentd::text::tokenizer::Tokenizer;

const MODEL: &str = "smollm2-135m-instruct";

struct Model {
    tokenizer: Tokenizer,
    factory: GrammarFactory,
}

/// The tokenizer and parser factory of the cached model; `Err(why)` when the model is not cached.
fn model() -> &'static Result<Model, String> {
    static MODEL_CELL: OnceLock<Result<Model, String>> = OnceLock::new();
    MODEL_CELL.get_or_init(|| {
        let opts = FetchOptions {
            offline: true,
            progress: false,
            ..FetchOptions::default()
        };
        let resolved =
            fetch::resolve(&ModelSelector::Name(MODEL.into()), &opts).map_err(|e| e.to_string())?;
        let gguf = GgufFile::open(&resolved.path).map_err(|e| e.to_string())?;
        let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let factory =
            GrammarFactory::new(&tokenizer, tokenizer.vocab_size()).map_err(|e| e.to_string())?;
        eprintln!(
            "{MODEL}: {} tokens; parser factory built in {:.0} ms",
            tokenizer.vocab_size(),
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(Model { tokenizer, factory })
    })
}

fn loaded() -> &'static Model {
    match model() {
        Ok(m) => m,
        Err(e) => panic!("{MODEL} is not cached ({e}); main() should have skipped"),
    }
}

/// The grammar positions benched.
const CASES: [&str; 4] = [
    "json_schema_start",
    "json_schema_in_string",
    "tool_call_start",
    "tool_call_in_arguments",
];

fn tools() -> Vec<ToolSpec> {
    agentd::bench::constraint::tools().expect("the bench's tools are valid")
}

/// The request, the text already generated at this position, and a valid rest of the output (to check that the
/// prefix was consumed whole).
fn case(name: &str) -> (ConstraintSpec, &'static str, &'static str) {
    let person = agentd::bench::constraint::person_spec();
    let required = ConstraintSpec {
        tools: tools(),
        tool_choice: ToolChoice::Required,
        ..ConstraintSpec::default()
    };
    let person_doc = r#"{"name": "Ada Lovelace", "age": 36, "city": "London", "hobbies": []}"#;
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    match name {
        "json_schema_start" => (person, "", person_doc),
        "json_schema_in_string" => (person, &person_doc[..16], &person_doc[16..]),
        "tool_call_start" => (required, "", call),
        _ => (required, &call[..61], &call[61..]),
    }
}

fn compile(spec: &ConstraintSpec) -> Constraint {
    loaded()
        .factory
        .compile(spec, ToolCallFormat::HERMES)
        .expect("the bench grammar compiles")
        .expect("the bench request is constrained")
}

fn tokens(text: &str) -> Vec<u32> {
    loaded()
        .tokenizer
        .encode(text, false)
        .expect("tokenize bench text")
}

/// A constraint advanced to the case's position, and logits (all 0) whose one high entry is a token the grammar
/// rejects there, or allows there.
struct Position {
    constraint: Constraint,
    rejected: Vec<f32>,
    allowed: Vec<f32>,
}

fn position(name: &str) -> Position {
    let (spec, prefix, rest) = case(name);
    // The prefix is consumed whole iff the rest then completes the output.
    let mut check = compile(&spec);
    let whole = !check.accepts_tokens(&tokens(prefix)).unwrap_or(true)
        && check.accepts_tokens(&tokens(rest)).unwrap_or(false);
    assert!(whole, "{name}: `{prefix}` + `{rest}` is not a valid output");
    let mut constraint = compile(&spec);
    if !prefix.is_empty() {
        let _ = constraint.accepts_tokens(&tokens(prefix));
    }
    let vocab = loaded().tokenizer.vocab_size();
    let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy sampling");
    let peaked = |id: u32| {
        let mut l = vec![0f32; vocab];
        l[id as usize] = 10.0;
        l
    };
    // The first candidate the grammar rejects; the token it then picks instead is an allowed one.
    for text in ["Hello", "\n\n", "}", " the", "<", "{"] {
        let Some(&id) = tokens(text).first() else {
            continue;
        };
        let masked_before = constraint.stats.masked_tokens;
        let mut logits = peaked(id);
        let picked = constraint
            .sample(&mut sampler, &mut logits)
            .expect("sample under the grammar");
        if constraint.stats.masked_tokens > masked_before {
            return Position {
                constraint,
                rejected: peaked(id),
                allowed: peaked(picked),
            };
        }
    }
    panic!("{name}: no candidate token is rejected here");
}

#[divan::bench(args = CASES)]
fn reject_and_mask(bencher: divan::Bencher, name: &str) {
    let Position {
        mut constraint,
        rejected,
        ..
    } = position(name);
    let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy sampling");
    bencher
        .with_inputs(|| rejected.clone())
        .bench_local_refs(|logits| constraint.sample(&mut sampler, logits));
}

#[divan::bench(args = CASES)]
fn check_only(bencher: divan::Bencher, name: &str) {
    let Position {
        mut constraint,
        allowed,
        ..
    } = position(name);
    let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy sampling");
    bencher
        .with_inputs(|| allowed.clone())
        .bench_local_refs(|logits| constraint.sample(&mut sampler, logits));
}

/// What `Constraint::sample` spends outside the grammar: one greedy pick (an argmax over the 49,152 logits). The
/// check path calls it once, the reject path twice; subtract to see llguidance's share.
#[divan::bench]
fn greedy_pick_baseline(bencher: divan::Bencher) {
    let Position { allowed, .. } = position("json_schema_start");
    let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy sampling");
    bencher.bench_local(|| sampler.pick(divan::black_box(&allowed)));
}

#[divan::bench(args = ["json_schema_start", "tool_call_start"])]
fn compile_grammar(bencher: divan::Bencher, name: &str) {
    let (spec, _, _) = case(name);
    bencher.bench_local(|| compile(&spec));
}

fn main() {
    if let Err(why) = model() {
        eprintln!(
            "constraint_mask: skipped — {MODEL} is not in the model cache ({why}). \
             Run `agentd model pull {MODEL}` first."
        );
        return;
    }
    // Short by default; `-- --sample-count N --max-time S` for steadier figures.
    divan::Divan::default()
        .sample_count(30)
        .max_time(Duration::from_secs(1))
        .config_with_args()
        .main();
}
