//! The CPU engine on the real models: its logits agree with candle's forward pass on the same weights, on real
//! and synthetic checkpoints, and thread counts do not change results beyond float rounding. (A batch of
//! sequences over one paged store and the reduced KV types are tested beside the forward pass:
//! `src/engine/cpu/forward/batch_tests.rs`.)

use agentd::engine::{GgufFile, Model, WeightFormat};
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
        let top = |v: &[f32]| agentd::engine::argmax(v).unwrap() as usize;
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
            let top = |v: &[f32]| agentd::engine::argmax(v);
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
