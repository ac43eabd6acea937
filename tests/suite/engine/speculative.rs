//! Speculative decoding (prompt-lookup drafts verified in the batched step) on the real SmolLM2 and
//! Qwen2.5-Coder models: greedy output is token for token what plain decoding gives — long copy-heavy
//! generations, logprobs, stop strings, `max_tokens` boundaries, every `tool_choice` — a seeded sampled run is
//! the same run, the KV state after a rejected draft is the state plain decoding leaves (logits compared bit for
//! bit), and preemption and cancellation in the middle of drafting lose nothing. Every comparison also checks
//! that drafts were really accepted, so none of them passes with drafting silently off.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use agentd::engine::kv::{BatchSeq, KvDtype};
use agentd::engine::request::{FinishReason, GenerateEvent, GenerateRequest, GenerateSummary};
use agentd::engine::runtime::scheduler::SchedulerConfig;
use agentd::engine::sampler::SamplingParams;
use agentd::engine::speculative::{Drafter, SpeculativeConfig};
use agentd::engine::{Engine, EngineOptions};
use agentd::schema::ToolChoice;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::suite::common;
use crate::suite::common::greedy;

fn engine(path: std::path::PathBuf, speculative: SpeculativeConfig, kv_bytes: usize) -> Engine {
    Engine::load(EngineOptions {
        model: agentd::model_files::fetch::ModelSelector::Path(path),
        device: agentd::engine::device::DeviceSpec::Cpu,
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

/// Greedy verification of `tokens[prompt_len..]` replayed offline with a drafter of 8 tokens a step: how many
/// steps it takes (a step yields the confirmed drafts and one token of the model's own).
fn replay_steps(tokens: &[u32], prompt_len: usize, blank: Arc<[bool]>) -> usize {
    let mut d = Drafter::new(&SpeculativeConfig::default(), blank).unwrap();
    let (mut pos, mut steps) = (prompt_len, 0);
    while pos < tokens.len() {
        let draft = d.propose(&tokens[..pos], 8, 0.0);
        let actual = &tokens[pos..];
        let accepted = actual
            .iter()
            .zip(&draft)
            .take_while(|(a, b)| a == b)
            .count();
        let produced = &actual[..(accepted + 1).min(actual.len())];
        assert_eq!(d.record(&draft, produced), accepted);
        pos += produced.len();
        steps += 1;
    }
    steps
}

/// An edit that quotes the nested `match` block of a file one level up (every line 4 spaces less, as Qwen does
/// here): with white space matched loosely and the copy's indentation learnt, drafting needs far fewer steps than
/// exact lookup, whose every n-gram across a line break fails. The replay runs on the real tokenizer's tokens of
/// such a reply (so it does not hang on the model's exact wording on this processor); the model itself, asked for
/// that edit, gives the same output with and without drafting.
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
    let s = same(&on, &off, &greedy(prompt.clone(), 200), "re-indented copy");
    assert!(accepted(&s) > 10, "{:?}", s.speculative);

    let block: Vec<&str> = file
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("match "))
        .take_while(|l| *l != "}")
        .collect();
    assert!(block.len() > 10, "the match block of the file");
    let quoted: String = block
        .iter()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let reply = format!("src/main.rs\n<<<<<<< SEARCH\n{quoted}=======\n");
    let ids = on.tokenizer().encode(&reply, false).unwrap();
    let tokens = [prompt.clone(), ids].concat();
    let loose = replay_steps(&tokens, prompt.len(), on.tokenizer().blank_tokens());
    let exact = replay_steps(&tokens, prompt.len(), Arc::from([]));
    assert!(
        loose * 4 <= exact * 3,
        "{loose} steps with white space matched loosely, {exact} with exact lookup"
    );
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

/// On the CPU engine's blocks: a verify step whose drafts are wrong, then the right token fed over the rejected
/// positions, leaves exactly the keys and values of plain decoding (the next logits equal bit for bit), and the
/// verify step's first row is the plain step's logits.
#[test]
fn a_rejected_draft_leaves_the_kv_cache_as_plain_decoding_does() {
    let gguf = agentd::engine::gguf::GgufFile::open(&common::qwen_path()).unwrap();
    let model = agentd::engine::Model::load(
        &gguf,
        &candle_core::Device::Cpu,
        agentd::engine::arch::weights::WeightFormat::Auto,
    )
    .unwrap();
    let cpu = model.cpu_engine().unwrap();
    let vocab = cpu.vocab_size;
    let prompt: Vec<u32> = (0..40).map(|i| 300 + (i * 53) % 5000).collect();
    let table: Vec<u32> = (0..8).collect();
    let step =
        |store: &mut agentd::engine::kv::KvBlocks, tokens: &[u32], pos: usize, logits: usize| {
            let b = [BatchSeq {
                tokens,
                blocks: &table,
                pos,
                logits,
            }];
            cpu.forward_batch(store, &b).unwrap().pop().unwrap()
        };
    let n = prompt.len();
    // Plain: prompt, then tokens 11 and 12 one step each.
    let mut plain = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut plain, &prompt, 0, 0);
    let p11 = step(&mut plain, &[11], n, 1);
    let p12 = step(&mut plain, &[12], n + 1, 1);
    let p13 = step(&mut plain, &[13], n + 2, 1);
    // Speculative: 11 with drafts 99, 98, 97 (all wrong), then 12 and 13 fed over the rejected positions.
    let mut spec = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut spec, &prompt, 0, 0);
    let rows = step(&mut spec, &[11, 99, 98, 97], n, 4);
    assert_eq!(rows.len(), 4 * vocab);
    assert_eq!(&rows[..vocab], &p11[..], "the verify step's first row");
    let s12 = step(&mut spec, &[12], n + 1, 1);
    assert_eq!(s12, p12, "logits after the rejected draft was overwritten");
    // A partly right draft (12 confirmed, 55 rejected): the confirmed position is kept as it is.
    let mut part = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut part, &prompt, 0, 0);
    let rows = step(&mut part, &[11, 12, 55], n, 3);
    assert_eq!(
        &rows[vocab..2 * vocab],
        &p12[..],
        "the confirmed draft's row"
    );
    assert_eq!(step(&mut part, &[13], n + 2, 1), p13);
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
