//! The CPU engine (`engine::cpu`) on the real models: its logits agree with candle's forward pass on the same
//! weights, a batch of sequences gives each the logits it gets alone, and thread counts do not change results
//! beyond float rounding.

use agentd::engine::arch::weights::WeightFormat;
use agentd::engine::gguf::GgufFile;
use agentd::engine::kv::{BatchSeq, KvDtype};
use agentd::engine::Model;
use candle_core::Device;

use crate::suite::common;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn logits(model: &Model, prompt: &[u32], then: &[u32]) -> Vec<Vec<f32>> {
    let mut kv = model.new_sequence();
    let mut out = vec![model.forward(prompt, &mut kv).unwrap().to_vec1().unwrap()];
    for &t in then {
        out.push(model.forward(&[t], &mut kv).unwrap().to_vec1().unwrap());
    }
    out
}

/// Prompt + a few decode steps: the CPU engine's logits are candle's (its own kernels, f32 embeddings and
/// attention) within the noise of 8-bit activations (measured: up to 0.67 on SmolLM2's logits of ±30) and
/// with the same argmax. The stricter check is against llama.cpp itself (`generate.rs`).
fn agrees_with_candle(path: std::path::PathBuf, tolerance: f32) {
    let gguf = GgufFile::open(&path).unwrap();
    let ours = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    assert!(ours.cpu_engine().is_some());
    let candle = Model::load(&gguf, &Device::Cpu, WeightFormat::Native).unwrap();
    assert!(candle.cpu_engine().is_none());
    let prompt: Vec<u32> = (0..70).map(|i| 200 + (i * 37) % 900).collect();
    let a = logits(&ours, &prompt, &[11, 400, 7]);
    let b = logits(&candle, &prompt, &[11, 400, 7]);
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        let diff = max_abs_diff(x, y);
        assert!(diff < tolerance, "step {step}: max |Δlogit| {diff}");
        // The same argmax, unless candle's own top two are closer than that noise (then either is right: on
        // SmolLM2 step 3 candle's margin is 0.39 and both engines' noise is ±0.5).
        let top = |v: &[f32]| agentd::engine::sampler::argmax(v).unwrap() as usize;
        let (ours, theirs) = (top(x), top(y));
        assert!(
            ours == theirs || y[theirs] - y[ours] < tolerance / 2.0,
            "step {step}: argmax {ours} differs from candle's {theirs} by a margin of {} (max |Δ| {diff})",
            y[theirs] - y[ours]
        );
    }
}

#[test]
fn smollm2_logits_agree_with_candle() {
    agrees_with_candle(common::smollm2_path(), 1.0);
}

#[test]
fn qwen_logits_agree_with_candle() {
    agrees_with_candle(common::qwen_path(), 1.0);
}

/// Three sequences of different lengths and positions in one batch, each with its own blocks of one shared
/// paged store, get exactly the logits each gets alone — in the prefill batch and in a decode step after it.
#[test]
fn a_batch_of_sequences_matches_each_sequence_alone() {
    let gguf = GgufFile::open(&common::smollm2_path()).unwrap();
    let model = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    let cpu = model.cpu_engine().unwrap();
    let prompts: [Vec<u32>; 3] = [
        (0..9).map(|i| 300 + i).collect(),
        (0..23).map(|i| 1000 + 3 * i).collect(),
        vec![42],
    ];
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut own = model.new_sequence();
            model.forward(p, &mut own).unwrap().to_vec1().unwrap()
        })
        .collect();
    // Blocks interleaved across the sequences, in a store with room to spare.
    // f32, as the standalone sequences keep.
    let mut store = cpu.new_blocks(16, KvDtype::F32).unwrap();
    let tables: Vec<Vec<u32>> = vec![vec![5, 0], vec![3, 7, 1], vec![9]];
    let batch: Vec<BatchSeq> = prompts
        .iter()
        .zip(&tables)
        .map(|(p, t)| BatchSeq {
            tokens: p,
            blocks: t,
            pos: 0,
            logits: 1,
        })
        .collect();
    let together = cpu.forward_batch(&mut store, &batch).unwrap();
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "sequence {i}: max |Δ| {}", max_abs_diff(a, b));
    }
    // A decode step for all three at their own positions (one asks for no logits), against the same tokens
    // fed alone.
    let next = [5u32, 6, 7];
    let batch: Vec<BatchSeq> = prompts
        .iter()
        .zip(&tables)
        .zip(&next)
        .enumerate()
        .map(|(i, ((p, t), n))| BatchSeq {
            tokens: std::slice::from_ref(n),
            blocks: t,
            pos: p.len(),
            logits: usize::from(i != 1),
        })
        .collect();
    let stepped = cpu.forward_batch(&mut store, &batch).unwrap();
    assert!(stepped[1].is_empty(), "no logits were asked for");
    for i in [0, 2] {
        let mut kv = model.new_sequence();
        model.forward(&prompts[i], &mut kv).unwrap();
        let want: Vec<f32> = model
            .forward(&next[i..=i], &mut kv)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(want, stepped[i], "sequence {i} decode step");
    }
    // A table that does not cover the positions is an error, not a panic.
    let short = [BatchSeq {
        tokens: &prompts[1],
        blocks: &[2],
        pos: 0,
        logits: 1,
    }];
    assert!(cpu.forward_batch(&mut store, &short).is_err());
}

/// One thread and two threads compute the same logits.
#[test]
fn thread_count_does_not_change_the_result() {
    let gguf = GgufFile::open(&common::smollm2_path()).unwrap();
    let one = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 1).unwrap();
    let two = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 3).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 500 + i).collect();
    let a = logits(&one, &prompt, &[9]);
    let b = logits(&two, &prompt, &[9]);
    for (x, y) in a.iter().zip(&b) {
        assert!(max_abs_diff(x, y) < 1e-4);
    }
}

/// A synthetic checkpoint (`agentd::engine::files::synth`: real tensor names and Q4_K_M mix, random weights, a real
/// tokenizer) written to a temp dir.
pub(super) fn synthetic(
    spec: &str,
    seed: u64,
    tokenizer_from: std::path::PathBuf,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = agentd::engine::files::synth::SynthSpec::parse(spec).unwrap();
    spec.seed = seed;
    let source = GgufFile::open(&tokenizer_from).unwrap();
    let out = dir.path().join(spec.file_name(0));
    let made = agentd::engine::files::synth::write(&spec, &source, &out).unwrap();
    assert_eq!(made.path, out);
    assert_eq!(made.bytes, std::fs::metadata(&out).unwrap().len());
    (dir, out)
}

/// On synthetic checkpoints of both architectures the CPU engine's logits are candle's within `tolerance`, and
/// the argmax agrees wherever candle's top two are further apart than twice the tolerance (random weights give
/// near-ties that any two engines may break differently). The same seed writes the same file.
fn synthetic_agrees_with_candle(spec: &str, tokenizer_from: std::path::PathBuf) {
    let (_dir, path) = synthetic(spec, 0, tokenizer_from.clone());
    let (_dir2, again) = synthetic(spec, 0, tokenizer_from);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap(),
        "a seed writes one file"
    );
    let gguf = GgufFile::open(&path).unwrap();
    let ours = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    assert!(ours.cpu_engine().is_some());
    let candle = Model::load(&gguf, &Device::Cpu, WeightFormat::Native).unwrap();
    assert!(candle.cpu_engine().is_none());
    let prompt: Vec<u32> = (0..40).map(|i| 300 + (i * 53) % 2000).collect();
    let a = logits(&ours, &prompt, &[17, 905, 3, 1200]);
    let b = logits(&candle, &prompt, &[17, 905, 3, 1200]);
    let tolerance = 0.1;
    let mut compared = 0;
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        let diff = max_abs_diff(x, y);
        let spread =
            y.iter().cloned().fold(f32::MIN, f32::max) - y.iter().cloned().fold(f32::MAX, f32::min);
        eprintln!(
            "{spec} step {step}: max |Δlogit| {diff:.4} (logit range {spread:.2}; first {:?} vs {:?})",
            &x[..3],
            &y[..3]
        );
        assert!(diff < tolerance, "step {step}: max |Δlogit| {diff}");
        let mut sorted = y.clone();
        sorted.sort_by(|p, q| q.total_cmp(p));
        if sorted[0] - sorted[1] > 2.0 * tolerance {
            let top = |v: &[f32]| agentd::engine::sampler::argmax(v);
            assert_eq!(top(x), top(y), "step {step}: argmax differs");
            compared += 1;
        }
    }
    eprintln!("{spec}: argmax compared at {compared} of {} steps", a.len());
}

#[test]
fn synthetic_llama_agrees_with_candle() {
    synthetic_agrees_with_candle("llama:tiny", common::smollm2_path());
}

#[test]
fn synthetic_qwen2_agrees_with_candle() {
    synthetic_agrees_with_candle("qwen2:tiny", common::qwen_path());
}

#[test]
fn synthetic_qwen3_agrees_with_candle() {
    synthetic_agrees_with_candle("qwen3:tiny", common::qwen_path());
}

/// Logits of a prompt and of each token of `then` fed after it, with the KV cache kept as `dtype`.
fn with_kv(model: &Model, dtype: KvDtype, prompt: &[u32], then: &[u32]) -> Vec<Vec<f32>> {
    let cpu = model.cpu_engine().unwrap();
    let mut store = cpu.new_blocks(64, dtype).unwrap();
    let table: Vec<u32> = (0..64).collect();
    let mut out = Vec::new();
    let (mut fed, mut pos) = (prompt.to_vec(), 0);
    for step in 0..=then.len() {
        let b = [BatchSeq {
            tokens: &fed[pos..],
            blocks: &table,
            pos,
            logits: 1,
        }];
        out.push(cpu.forward_batch(&mut store, &b).unwrap().pop().unwrap());
        pos = fed.len();
        if let Some(&t) = then.get(step) {
            fed.push(t);
        }
    }
    out
}

/// `--kv-cache-dtype`: f16 (the CPU default, llama.cpp's) and q8_0 keep the logits of a 300-token prompt and 24
/// decode steps after it (the f32 cache's greedy tokens, fed to all three) close to the f32 cache's, with the
/// same greedy token wherever the f32 top two are further apart than the tolerance; an f16 block is half an f32
/// one.
#[test]
fn reduced_kv_types_keep_the_logits_of_the_f32_cache() {
    let gguf = GgufFile::open(&common::qwen_path()).unwrap();
    let model = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    let tok = agentd::engine::Tokenizer::from_gguf(&gguf).unwrap();
    let text = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    \
                for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nclass Stack:\n";
    let prompt: Vec<u32> = tok.encode(&text.repeat(6), false).unwrap();
    let top = |v: &Vec<f32>| agentd::engine::sampler::argmax(v).unwrap();
    // The f32 cache's own greedy continuation.
    let mut then = Vec::new();
    for _ in 0..24 {
        let l = with_kv(&model, KvDtype::F32, &prompt, &then);
        then.push(top(l.last().unwrap()));
    }
    let want = with_kv(&model, KvDtype::F32, &prompt, &then);
    // Measured: f16 0.25–0.49 per step, q8_0 1.3–1.95 (Qwen2.5's keys carry large outliers).
    for (dtype, tolerance) in [(KvDtype::F16, 0.75), (KvDtype::Q8_0, 2.5)] {
        let got = with_kv(&model, dtype, &prompt, &then);
        let per: Vec<f32> = want
            .iter()
            .zip(&got)
            .map(|(a, b)| max_abs_diff(a, b))
            .collect();
        eprintln!("{dtype}: max |Δlogit| per step {per:?}");
        for (step, (a, b)) in want.iter().zip(&got).enumerate() {
            assert!(
                per[step] < tolerance,
                "{dtype} step {step}: max |Δlogit| {}",
                per[step]
            );
            let mut sorted = a.clone();
            sorted.sort_by(|p, q| q.total_cmp(p));
            if sorted[0] - sorted[1] > tolerance {
                assert_eq!(top(a), top(b), "{dtype} step {step}: greedy token");
            }
        }
    }
    let bytes = |d| model.paged_block_bytes(d).unwrap();
    assert_eq!(bytes(KvDtype::F16) * 2, bytes(KvDtype::F32));
    assert_eq!(bytes(KvDtype::Auto), bytes(KvDtype::F16));
}
