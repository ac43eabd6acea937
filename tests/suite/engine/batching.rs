//! Continuous batching on the real SmolLM2 model: a request batched with others gives the tokens it gives alone
//! (greedy, seeded, constrained), preemption under a tiny KV budget loses nothing, a cancelled request frees its
//! blocks, and prefix blocks are shared between requests with a common system prompt. Each test loads its own
//! engine so the scheduler's counters are its own.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use agentd::engine::{
    Engine, EngineError, EngineOptions, FinishReason, GenerateEvent, GenerateRequest,
    GenerateSummary, KvDtype, SamplingParams, SchedulerConfig,
};
use agentd::schema::ToolChoice;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::suite::common;
use crate::suite::common::greedy;

fn engine_with(scheduler: SchedulerConfig) -> Engine {
    Engine::load(EngineOptions {
        model: agentd::model_files::fetch::ModelSelector::Path(common::smollm2_path()),
        device: agentd::engine::DeviceSpec::Cpu,
        scheduler,
        ..Default::default()
    })
    .unwrap()
}

fn chat(engine: &Engine, system: &str, user: &str) -> Vec<u32> {
    let msgs = [
        serde_json::json!({"role": "system", "content": system}),
        serde_json::json!({"role": "user", "content": user}),
    ];
    engine
        .chat_prompt(&msgs, &[], &ToolChoice::Auto, None)
        .unwrap()
}

/// Waits for a request's end: its tokens and summary.
fn collect(
    mut rx: UnboundedReceiver<GenerateEvent>,
) -> Result<(Vec<u32>, GenerateSummary), EngineError> {
    let mut ids = Vec::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            GenerateEvent::Token(t) => ids.push(t.id),
            GenerateEvent::Done(s) => return Ok((ids, s)),
            GenerateEvent::Error(e) => return Err(e),
        }
    }
    panic!("the request ended without a result")
}

fn alone(engine: &Engine, req: &GenerateRequest) -> Vec<u32> {
    collect(engine.generate(req.clone(), CancellationToken::new()))
        .unwrap()
        .0
}

/// Submits every request at once and collects them all.
fn together(engine: &Engine, reqs: &[GenerateRequest]) -> Vec<(Vec<u32>, GenerateSummary)> {
    let rxs: Vec<_> = reqs
        .iter()
        .map(|r| engine.generate(r.clone(), CancellationToken::new()))
        .collect();
    rxs.into_iter().map(|rx| collect(rx).unwrap()).collect()
}

fn requests(engine: &Engine) -> Vec<GenerateRequest> {
    let users = [
        "Name three fruits.",
        "What is the capital of France? Answer in one sentence.",
        "Write a haiku about the sea.",
        "List the first five prime numbers.",
        "Explain recursion in one sentence.",
        "Say hello in Spanish and in German.",
    ];
    let mut reqs: Vec<GenerateRequest> = users
        .iter()
        .enumerate()
        .map(|(i, u)| {
            // Different system prompts so no two share a block: each computes its own prompt.
            let system = format!("You are assistant number {i}. Be brief.");
            greedy(chat(engine, &system, u), 20 + 4 * i)
        })
        .collect();
    // A seeded sampled request and a constrained one ride along.
    reqs[4].sampling = SamplingParams {
        temperature: 0.9,
        seed: Some(7),
        ..SamplingParams::default()
    };
    reqs[5].constraint = Some(super::constraint::spec(ToolChoice::Required));
    reqs[5].max_tokens = Some(48);
    reqs
}

/// Six requests of different lengths submitted at once give, token for token, what each gives alone; the
/// scheduler really batched them (fewer forward passes than tokens).
#[test]
fn batched_requests_give_the_tokens_they_give_alone() {
    let engine = engine_with(SchedulerConfig::default());
    let reqs = requests(&engine);
    let solo: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&engine, r)).collect();
    let stats = engine.scheduler_stats();
    let steps_before = stats.steps.load(Relaxed);
    let got = together(&engine, &reqs);
    let steps = stats.steps.load(Relaxed) - steps_before;
    let generated: usize = got.iter().map(|(ids, _)| ids.len()).sum();
    for (i, ((ids, summary), want)) in got.iter().zip(&solo).enumerate() {
        assert_eq!(ids, want, "request {i} batched vs alone");
        assert_eq!(summary.completion_tokens, ids.len());
    }
    assert!(
        (steps as usize) < generated / 2,
        "{steps} forward passes for {generated} tokens: not batched"
    );
    assert!(got[5].0.len() > 5, "the constrained request wrote a call");
}

/// With room for only a few sequences' KV, eight concurrent requests preempt each other, and every one still
/// completes with exactly the text it gives alone.
#[test]
fn preemption_under_a_tiny_kv_budget_loses_no_request() {
    let probe = engine_with(SchedulerConfig::default());
    let reqs: Vec<GenerateRequest> = (0..8)
        .map(|i| {
            let system = format!("You are helper {i}.");
            let mut r = greedy(
                chat(&probe, &system, "Count from one to twenty in words."),
                48,
            );
            // Every request runs its full length, so the pool must run out.
            r.ignore_eos = true;
            r
        })
        .collect();
    let longest = reqs.iter().map(|r| r.prompt.len()).max().unwrap() + 48;
    drop(probe);
    // Room for about two of them at once (each fits alone).
    let block_bytes = 30 * 2 * 3 * 16 * 64 * 2; // f16, the CPU engine's KV type
    let blocks = 2 * longest.div_ceil(16) + 1;
    let engine = engine_with(SchedulerConfig {
        kv_cache_bytes: blocks * block_bytes,
        ..SchedulerConfig::default()
    });
    let solo: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&engine, r)).collect();
    let got = together(&engine, &reqs);
    let preempted = engine.scheduler_stats().preemptions.load(Relaxed);
    assert!(preempted > 0, "the budget of {blocks} blocks never ran out");
    for (i, ((ids, s), want)) in got.iter().zip(&solo).enumerate() {
        assert_eq!(ids, want, "request {i} after {preempted} preemptions");
        assert_eq!(s.finish, FinishReason::Length);
    }
    // Everything was given back.
    assert_eq!(engine.prefix_cache_stats().blocks_used.load(Relaxed), 0);
}

/// A prompt larger than the whole KV cache is a clear error, not a hang or a panic; a request that fits alone
/// but would grow past the cache ends with `length`.
#[test]
fn a_request_larger_than_the_kv_cache_is_refused_or_cut() {
    let block_bytes = 30 * 2 * 3 * 16 * 64 * 2; // f16, the CPU engine's KV type
    let engine = engine_with(SchedulerConfig {
        kv_cache_bytes: 4 * block_bytes,
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        prefix_caching: true,
        ..SchedulerConfig::default()
    });
    let big: Vec<u32> = (0..100).map(|i| 300 + i).collect();
    match collect(engine.generate(greedy(big, 4), CancellationToken::new())) {
        Err(EngineError::KvCacheTooSmall { tokens, capacity }) => {
            assert_eq!((tokens, capacity), (100, 64));
        }
        other => panic!("expected KvCacheTooSmall, got {other:?}"),
    }
    let mut req = greedy((0..50).map(|i| 300 + i).collect(), 40);
    req.ignore_eos = true;
    let (ids, s) = collect(engine.generate(req, CancellationToken::new())).unwrap();
    assert_eq!(s.finish, FinishReason::Length);
    // Every position the cache holds, plus the token sampled from the last one.
    assert_eq!(ids.len(), 64 - 50 + 1);
    // The engine still serves.
    let ok = collect(engine.generate(greedy(vec![1, 2, 3], 3), CancellationToken::new()));
    assert_eq!(ok.unwrap().0.len(), 3);
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cancelled request, and one whose client went away, free their blocks at the next step while the others
/// keep going.
#[test]
fn cancellation_frees_blocks() {
    let engine = engine_with(SchedulerConfig::default());
    let pool = engine.prefix_cache_stats();
    let long = |i: usize| {
        let mut r = greedy(
            chat(&engine, &format!("Writer {i}."), "Write a long story."),
            400,
        );
        r.ignore_eos = true;
        r
    };
    let cancel = CancellationToken::new();
    let mut a = engine.generate(long(0), cancel.clone());
    let mut b = engine.generate(long(1), CancellationToken::new());
    let c = engine.generate(long(2), CancellationToken::new());
    // All three are decoding.
    for rx in [&mut a, &mut b] {
        assert!(matches!(rx.blocking_recv(), Some(GenerateEvent::Token(_))));
    }
    wait_until("three running", || {
        engine.scheduler_stats().running.load(Relaxed) == 3
    });
    let used3 = pool.blocks_used.load(Relaxed);
    assert!(used3 >= 3, "{used3} blocks for three sequences");
    cancel.cancel();
    drop(b);
    wait_until("one running", || {
        engine.scheduler_stats().running.load(Relaxed) == 1
    });
    let used1 = pool.blocks_used.load(Relaxed);
    assert!(
        used1 < used3,
        "{used1} blocks still used after two of three left"
    );
    // The cancelled one ends with its usage.
    let summary = loop {
        match a.blocking_recv() {
            Some(GenerateEvent::Done(s)) => break s,
            Some(GenerateEvent::Token(_)) => continue,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(summary.finish, FinishReason::Cancelled);
    assert!(summary.completion_tokens >= 1);
    drop(c);
    wait_until("nothing running", || {
        engine.scheduler_stats().running.load(Relaxed) == 0
    });
    assert_eq!(pool.blocks_used.load(Relaxed), 0);
}

/// Two sessions with the same long system prompt: the second (another session key, the same scope) takes the
/// first's prompt blocks — after it ended, and while both are in flight — and the counters say so.
#[test]
fn prefix_blocks_are_shared_between_sessions_with_a_common_system_prompt() {
    let engine = engine_with(SchedulerConfig::default());
    let system = "You are a meticulous coding assistant working in a Rust repository. Follow the style of the \
                  surrounding code, keep functions small, write tests for every change, never invent APIs, and \
                  explain each decision in one short sentence.";
    let first = chat(&engine, system, "Rename the function foo to bar.");
    let second = chat(&engine, system, "Add a unit test for parse_bytes.");
    let common_len = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common_len > 48, "the prompts share {common_len} tokens");
    let shared_blocks = common_len / 16 * 16;
    let (_, s1) =
        collect(engine.generate(greedy(first.clone(), 8), CancellationToken::new())).unwrap();
    assert_eq!(s1.cached_tokens, 0);
    let (q0, h0, _) = engine.prefix_cache_stats().snapshot();
    let (_, s2) =
        collect(engine.generate(greedy(second.clone(), 8), CancellationToken::new())).unwrap();
    assert_eq!(s2.cached_tokens, shared_blocks);
    let (q1, h1, _) = engine.prefix_cache_stats().snapshot();
    assert_eq!(q1 - q0, second.len() as u64);
    assert_eq!(h1 - h0, shared_blocks as u64);
    // In flight together: a third session shares the blocks the running first one holds.
    let third = chat(&engine, system, "Explain the borrow checker.");
    let mut long = greedy(first, 200);
    long.ignore_eos = true;
    let mut a = engine.generate(long, CancellationToken::new());
    assert!(matches!(a.blocking_recv(), Some(GenerateEvent::Token(_))));
    let (_, s3) = collect(engine.generate(greedy(third, 8), CancellationToken::new())).unwrap();
    assert_eq!(s3.cached_tokens, shared_blocks);
    drop(a);
    // Another scope shares nothing.
    let mut other = greedy(second, 4);
    other.cache_scope = Some("another-tenant".into());
    let (_, s4) = collect(engine.generate(other, CancellationToken::new())).unwrap();
    assert_eq!(s4.cached_tokens, 0);
}

/// candle's backend (`--weights native`, the path CUDA and Metal take) keeps one KV buffer per sequence and runs
/// each sequence's tokens in its own forward pass inside a step: concurrent requests still give what they give
/// alone, and a repeated prompt reuses its kept sequence.
#[test]
fn candle_backend_runs_concurrent_requests_too() {
    let engine = Engine::load(EngineOptions {
        model: agentd::model_files::fetch::ModelSelector::Path(common::smollm2_path()),
        device: agentd::engine::DeviceSpec::Cpu,
        weight_format: agentd::engine::WeightFormat::Native,
        ..Default::default()
    })
    .unwrap();
    let reqs: Vec<GenerateRequest> = ["Name a colour.", "Name an animal.", "Name a city."]
        .iter()
        .map(|u| greedy(chat(&engine, "Answer with one word.", u), 8))
        .collect();
    let solo: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&engine, r)).collect();
    let got = together(&engine, &reqs);
    for (i, ((ids, s), want)) in got.iter().zip(&solo).enumerate() {
        assert_eq!(ids, want, "request {i}");
        assert!(
            s.cached_tokens > 0,
            "request {i} reused nothing of its earlier run"
        );
    }
}

/// candle's forward pass with the fused ops (CUDA's; here their CPU twins) batches over the paged KV store
/// like the CPU engine: one pass per step for every sequence, keys and values in pool blocks. Each request
/// gives the tokens of a plain greedy loop over the same forward pass with the sequence's own buffers, alone
/// and together, and a repeated system prompt reuses its cached blocks. (Against candle's own ops the tokens
/// may part at near-ties: activations are quantized for the matmuls, so 1e-6 apart in f32 can round apart.)
#[test]
fn both_candle_paths_batch_over_the_paged_store() {
    use agentd::engine::{GgufFile, Kernels, Model, WeightFormat};
    let gguf = GgufFile::open(&common::smollm2_path()).unwrap();
    // Our fused CUDA-style ops and candle's own ops (what Metal and `--weights native` run): both over the one
    // paged store, batched, with prefix reuse — and the same tokens as a plain greedy loop.
    for kernels in [Kernels::Fused, Kernels::Candle] {
        let engine = Engine::load(EngineOptions {
            model: agentd::model_files::fetch::ModelSelector::Path(common::smollm2_path()),
            device: agentd::engine::DeviceSpec::Cpu,
            weight_format: WeightFormat::Native,
            kernels: Some(kernels),
            scheduler: SchedulerConfig {
                kv_cache_bytes: 64 << 20,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        assert!(
            engine.prefix_cache_stats().blocks_total.load(Relaxed) > 0,
            "{kernels:?}: no paged store"
        );
        let mut model =
            Model::load_with_threads(&gguf, &candle_core::Device::Cpu, WeightFormat::Native, 2)
                .unwrap();
        model.set_kernels(kernels).unwrap();
        let eos = engine.tokenizer().eos_ids();
        let greedy_loop = |prompt: &[u32], n: usize| -> Vec<u32> {
            let mut kv = model.new_sequence();
            let mut logits: Vec<f32> = model.forward(prompt, &mut kv).unwrap().to_vec1().unwrap();
            let mut out = Vec::new();
            for _ in 0..n {
                let t = agentd::engine::argmax(&logits).unwrap();
                if eos.contains(&t) {
                    break;
                }
                out.push(t);
                logits = model.forward(&[t], &mut kv).unwrap().to_vec1().unwrap();
            }
            out
        };

        let users = [
            "Name a colour.",
            "Name an animal.",
            "Name a city.",
            "Say hi.",
        ];
        let prompts: Vec<Vec<u32>> = users
            .iter()
            .map(|u| chat(&engine, "Answer with one word.", u))
            .collect();
        let reqs: Vec<GenerateRequest> = prompts.iter().map(|p| greedy(p.clone(), 8)).collect();
        let solo: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&engine, r)).collect();
        for (i, (p, got)) in prompts.iter().zip(&solo).enumerate() {
            assert_eq!(
                got,
                &greedy_loop(p, 8),
                "{kernels:?} request {i}: the paged pass and the plain loop disagree"
            );
        }
        let steps_before = engine.scheduler_stats().steps.load(Relaxed);
        let got = together(&engine, &reqs);
        let steps = engine.scheduler_stats().steps.load(Relaxed) - steps_before;
        for (i, ((ids, s), want)) in got.iter().zip(&solo).enumerate() {
            assert_eq!(ids, want, "{kernels:?} request {i}");
            assert!(
                s.cached_tokens > 0,
                "{kernels:?} request {i} reused no cached block"
            );
        }
        // Four requests of up to 8 tokens in fewer steps than one after another would take.
        assert!(steps < 4 * 8, "{kernels:?}: {steps} steps");
    }
}

/// `--kv-cache-dtype`: on the CPU engine every type serves a batch in which each request gets exactly the tokens
/// it gets alone, and the pool's size follows the type (f16 holds twice f32's blocks in the same memory, q8_0
/// 64/17 times); candle's backend, whose paged kernels read f32, refuses f16 and q8_0 with an error naming the
/// flag instead of keeping f32 silently.
#[test]
fn every_kv_cache_dtype_serves_a_batch_and_candle_refuses_the_reduced_ones() {
    let mut blocks = Vec::new();
    for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
        let engine = engine_with(SchedulerConfig {
            kv_cache_dtype: dtype,
            kv_cache_bytes: 32 << 20,
            ..SchedulerConfig::default()
        });
        let reqs = requests(&engine);
        let solo: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&engine, r)).collect();
        for (i, ((ids, _), want)) in together(&engine, &reqs).iter().zip(&solo).enumerate() {
            assert_eq!(ids, want, "{dtype}: request {i} batched vs alone");
        }
        assert!(
            solo.iter().all(|ids| !ids.is_empty()),
            "{dtype}: empty replies"
        );
        blocks.push(engine.prefix_cache_stats().blocks_total.load(Relaxed));
    }
    // SmolLM2: 30 layers × (k, v) × 3 KV heads × 16 positions of 64 values, at 4, 2 and 68/64 bytes a value.
    let expected = [256, 128, 68].map(|row_bytes| (32u64 << 20) / (30 * 2 * 3 * 16 * row_bytes));
    assert_eq!(
        blocks, expected,
        "blocks in a 32 MiB pool as f32, f16, q8_0"
    );
    for dtype in [KvDtype::F16, KvDtype::Q8_0] {
        let err = Engine::load(EngineOptions {
            model: agentd::model_files::fetch::ModelSelector::Path(common::smollm2_path()),
            device: agentd::engine::DeviceSpec::Cpu,
            weight_format: agentd::engine::WeightFormat::Native,
            scheduler: SchedulerConfig {
                kv_cache_dtype: dtype,
                ..SchedulerConfig::default()
            },
            ..Default::default()
        })
        .err()
        .expect("candle's backend keeps f32 only")
        .to_string();
        assert!(
            err.contains("--kv-cache-dtype") && err.contains(dtype.name()),
            "{err}"
        );
    }
}
