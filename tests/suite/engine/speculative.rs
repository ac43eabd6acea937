//! Speculative decoding (prompt-lookup drafts verified in the batched step) on the real SmolLM2 and
//! Qwen2.5-Coder models: greedy output is token for token what plain decoding gives — long copy-heavy
//! generations, logprobs, stop strings, `max_tokens` boundaries, every `tool_choice` — a seeded sampled run is
//! the same run, and preemption and cancellation in the middle of drafting lose nothing. Every comparison also
//! checks that drafts were really accepted, so none of them passes with drafting silently off. (The KV state
//! after a rejected draft is tested beside the CPU forward pass, `src/engine/cpu/forward/batch_tests.rs`; the
//! drafter's offline replay beside the drafter, `src/engine/speculative/replay_tests.rs`.)

use std::sync::atomic::Ordering::Relaxed;

use agentd::engine::{
    Engine, EngineOptions, FinishReason, GenerateEvent, GenerateRequest, GenerateSummary,
    SamplingParams, SchedulerConfig, SpeculativeConfig,
};
use agentd::schema::ToolChoice;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::suite::common;
use crate::suite::common::greedy;

fn engine(path: std::path::PathBuf, speculative: SpeculativeConfig, kv_bytes: usize) -> Engine {
    Engine::load(EngineOptions {
        model: agentd::model_files::fetch::ModelSelector::Path(path),
        device: agentd::engine::DeviceSpec::Cpu,
        scheduler: SchedulerConfig {
            speculative,
            kv_cache_bytes: kv_bytes,
            ..SchedulerConfig::default()
        },
        ..Default::default()
    })
    .unwrap()
}

/// Drafting always tried (a price of 0 is never assumed; the default settings adapt) and plain decoding.
fn pair(path: std::path::PathBuf) -> (Engine, Engine) {
    (
        engine(path.clone(), SpeculativeConfig::default(), 1 << 28),
        engine(path, SpeculativeConfig::off(), 1 << 28),
    )
}

const FILE: &str = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a - b\n\n\n\
def sub(a, b):\n    \"\"\"Return a minus b.\"\"\"\n    return a - b\n\n\n\
def mul(a, b):\n    \"\"\"Return the product of a and b.\"\"\"\n    return a * b\n\n\n\
def div(a, b):\n    \"\"\"Return a divided by b.\"\"\"\n    if b == 0:\n        raise ZeroDivisionError(\"division by zero\")\n    return a / b\n";

/// A copy-heavy chat prompt: the whole file back with one fix.
fn copy_prompt(engine: &Engine) -> Vec<u32> {
    let user = format!(
        "Here is calc.py:\n\n```python\n{FILE}```\n\nFix the bug in add (it subtracts). Reply with the whole \
         corrected file, all four functions, in one ```python block."
    );
    let msgs = [serde_json::json!({"role": "user", "content": user})];
    engine
        .chat_prompt(&msgs, &[], &ToolChoice::Auto, None)
        .unwrap()
}

fn collect(
    mut rx: UnboundedReceiver<GenerateEvent>,
) -> (Vec<u32>, Vec<f32>, String, GenerateSummary) {
    let (mut ids, mut lps, mut text) = (Vec::new(), Vec::new(), String::new());
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            GenerateEvent::Token(t) => {
                ids.push(t.id);
                text.push_str(&t.text);
                if let Some(lp) = t.logprob {
                    lps.push(lp.logprob);
                    lps.extend(lp.top.iter().map(|x| x.1));
                }
            }
            GenerateEvent::Done(s) => return (ids, lps, text, s),
            GenerateEvent::Error(e) => panic!("{e}"),
        }
    }
    panic!("the request ended without a result")
}

fn run(engine: &Engine, req: &GenerateRequest) -> (Vec<u32>, Vec<f32>, String, GenerateSummary) {
    collect(engine.generate(req.clone(), CancellationToken::new()))
}

fn accepted(s: &GenerateSummary) -> usize {
    s.speculative.as_ref().map_or(0, |x| x.accepted_tokens)
}

/// The same request on both engines: the same tokens, logprobs, text and finish; returns the drafting side's
/// summary.
fn same(on: &Engine, off: &Engine, req: &GenerateRequest, what: &str) -> GenerateSummary {
    let a = run(on, req);
    let b = run(off, req);
    assert_eq!(a.0, b.0, "{what}: tokens");
    assert_eq!(a.1, b.1, "{what}: logprobs");
    assert_eq!(a.2, b.2, "{what}: text");
    assert_eq!(a.3.finish, b.3.finish, "{what}: finish");
    assert_eq!(
        a.3.completion_tokens, b.3.completion_tokens,
        "{what}: usage"
    );
    assert!(b.3.speculative.is_none(), "{what}: drafting was off");
    a.3
}

#[test]
fn greedy_output_is_identical_with_and_without_drafting() {
    for path in [common::smollm2_path(), common::qwen_path()] {
        let (on, off) = pair(path.clone());
        let mut req = greedy(copy_prompt(&on), 300);
        req.logprobs = Some(2);
        let s = same(&on, &off, &req, &format!("{} copy", path.display()));
        assert!(
            accepted(&s) > 20,
            "{}: only {} draft tokens accepted of {:?}",
            path.display(),
            accepted(&s),
            s.speculative
        );
        // Open-ended text too.
        let msgs = [serde_json::json!({"role": "user", "content": "Tell me a story about a fox."})];
        let story = on.chat_prompt(&msgs, &[], &ToolChoice::Auto, None).unwrap();
        same(&on, &off, &greedy(story, 120), "story");
    }
}

/// An edit that quotes the nested `match` block of a file one level up (every line 4 spaces less, as Qwen does
/// here): the model, asked for that edit, gives the same output with and without drafting, and drafts are
/// accepted. (That such a copy needs far fewer drafting steps with white space matched loosely than with exact
/// lookup is replayed offline beside the drafter: `src/engine/speculative/replay_tests.rs`.)
#[test]
fn a_reindented_copy_is_drafted_with_its_own_indentation() {
    let file = agentd::bench::tool_calls::copy_heavy::FILE;
    let (on, off) = pair(common::qwen_path());
    let user = format!(
        "Here is src/main.rs:\n\n```rust\n{file}```\n\nThe error message should start with \"error: \". Reply \
         with one SEARCH/REPLACE block: the whole `match` block as it is now, then the changed block, in this \
         form:\n\nsrc/main.rs\n<<<<<<< SEARCH\n(old lines)\n=======\n(new lines)\n>>>>>>> REPLACE"
    );
    let msgs = [serde_json::json!({"role": "user", "content": user})];
    let prompt = on.chat_prompt(&msgs, &[], &ToolChoice::Auto, None).unwrap();
    let s = same(&on, &off, &greedy(prompt, 200), "re-indented copy");
    assert!(accepted(&s) > 10, "{:?}", s.speculative);
}

#[test]
fn stop_strings_and_max_tokens_cut_verified_drafts_exactly() {
    let (on, off) = pair(common::qwen_path());
    let prompt = copy_prompt(&on);
    let mut drafted = 0;
    for max in [1, 2, 3, 9, 40, 77] {
        let s = same(
            &on,
            &off,
            &greedy(prompt.clone(), max),
            &format!("max_tokens {max}"),
        );
        assert!(s.completion_tokens <= max);
        drafted += accepted(&s);
    }
    for stop in ["sub(a, b)", "ZeroDivisionError", "return a * b\n"] {
        let mut req = greedy(prompt.clone(), 300);
        req.stop = vec![stop.to_string()];
        let s = same(&on, &off, &req, &format!("stop {stop:?}"));
        assert_eq!(s.finish, FinishReason::StopString, "{stop:?}");
        drafted += accepted(&s);
    }
    assert!(drafted > 50, "{drafted} draft tokens accepted in all");
}

#[test]
fn every_tool_choice_gives_the_same_output() {
    for path in [common::smollm2_path(), common::qwen_path()] {
        let (on, off) = pair(path);
        let tools = super::constraint::three_tools();
        let msgs = [serde_json::json!({"role": "user", "content":
            "What is the weather in Paris, in Lyon and in Paris again? Call get_weather for each city."})];
        let mut drafted = 0;
        for choice in [
            ToolChoice::Auto,
            ToolChoice::Required,
            ToolChoice::Tool {
                name: "get_weather".into(),
            },
            ToolChoice::None,
        ] {
            let prompt = on.chat_prompt(&msgs, &tools, &choice, None).unwrap();
            let mut req = greedy(prompt, 160);
            req.constraint = Some(super::constraint::spec(choice.clone()));
            let s = same(&on, &off, &req, &format!("{choice:?}"));
            drafted += accepted(&s);
        }
        assert!(drafted > 0, "no draft was accepted under any tool_choice");
    }
}

#[test]
fn seeded_sampling_gives_the_same_run_with_and_without_drafting() {
    let (on, off) = pair(common::qwen_path());
    let mut req = greedy(copy_prompt(&on), 200);
    req.sampling = SamplingParams {
        temperature: 0.7,
        top_p: 0.95,
        seed: Some(11),
        ..SamplingParams::default()
    };
    let first = same(&on, &off, &req, "seeded");
    let again = run(&on, &req);
    assert_eq!(run(&off, &req).0, again.0, "a second seeded run");
    assert!(accepted(&first) > 10, "{:?}", first.speculative);
}

/// Copy-heavy requests under a KV budget too small for all of them: they preempt each other in the middle of
/// drafting and still give exactly their solo tokens; a cancelled drafting request frees its blocks.
#[test]
fn preemption_and_cancellation_in_the_middle_of_drafting_lose_nothing() {
    let path = common::smollm2_path();
    let probe = engine(path.clone(), SpeculativeConfig::off(), 1 << 28);
    let base = copy_prompt(&probe);
    drop(probe);
    let reqs: Vec<GenerateRequest> = (0..6u32)
        .map(|i| {
            // A different first token per request, so no two share their prompt blocks.
            let mut prompt = base.clone();
            prompt.insert(1, 300 + i);
            let mut r = greedy(prompt, 160);
            r.ignore_eos = true;
            r
        })
        .collect();
    let longest = reqs.iter().map(|r| r.prompt.len()).max().unwrap() + 160 + 32;
    let block_bytes = 30 * 2 * 3 * 16 * 64 * 2; // f16, the CPU engine's KV type
    let blocks = 2 * longest.div_ceil(16) + 1;
    let tight = engine(
        path.clone(),
        SpeculativeConfig::default(),
        blocks * block_bytes,
    );
    let off = engine(path, SpeculativeConfig::off(), 1 << 28);
    let solo: Vec<Vec<u32>> = reqs.iter().map(|r| run(&off, r).0).collect();
    let rxs: Vec<_> = reqs
        .iter()
        .map(|r| tight.generate(r.clone(), CancellationToken::new()))
        .collect();
    let got: Vec<_> = rxs.into_iter().map(collect).collect();
    let stats = tight.scheduler_stats();
    assert!(
        stats.preemptions.load(Relaxed) > 0,
        "the pool never ran out"
    );
    assert!(
        stats.spec_accepted_tokens.load(Relaxed) > 0,
        "nothing drafted"
    );
    for (i, (g, want)) in got.iter().zip(&solo).enumerate() {
        assert_eq!(&g.0, want, "request {i}");
    }
    assert_eq!(tight.prefix_cache_stats().blocks_used.load(Relaxed), 0);
    // Cancelled while drafting: the request ends, its blocks go back.
    let cancel = CancellationToken::new();
    let mut rx = tight.generate(reqs[0].clone(), cancel.clone());
    let mut seen = 0;
    let summary = loop {
        match rx.blocking_recv() {
            Some(GenerateEvent::Token(_)) => {
                seen += 1;
                if seen == 40 {
                    cancel.cancel();
                }
            }
            Some(GenerateEvent::Done(s)) => break s,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(summary.finish, FinishReason::Cancelled);
    let start = std::time::Instant::now();
    while tight.prefix_cache_stats().blocks_used.load(Relaxed) != 0 {
        assert!(start.elapsed().as_secs() < 30, "blocks still held");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
