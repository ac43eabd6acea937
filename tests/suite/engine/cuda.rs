//! The GPU path's correctness checks that need no model download: a synthetic GGUF on the CPU engine and on
//! CUDA (our fused kernels) gives the same logits within the stated tolerance and the same greedy tokens
//! where the top two are clearly apart, and every kernel matches its CPU twin. Gated on the `cuda` feature
//! and a visible device; each skip says why. The same comparison on the CPU (candle's path with the twins)
//! always runs, and is shown to fail on a different model. `agentd model vocab` carries a tokenizer without
//! its weights.

use agentd::engine::parity::{compare, ParityOptions};
use agentd::engine::{
    kernel_check, select_device, DeviceSpec, GgufFile, Kernels, Model, WeightFormat,
};
use candle_core::Device;

use super::cpu_engine::synthetic;
use super::synth::{agentd, home};
use crate::suite::cli::run::run;
use crate::suite::common;

#[test]
fn cuda_logits_and_kernels_match_the_cpu() {
    if !cfg!(feature = "cuda") {
        eprintln!(
            "skipped: this build has no CUDA support (scripts/cuda-build.sh, or --features cuda)"
        );
        return;
    }
    let selected = select_device(DeviceSpec::Cuda(0));
    if let Some(note) = selected.fallback_note {
        eprintln!("skipped: no CUDA device is visible ({note})");
        return;
    }
    for kernel in kernel_check::against_twins(&selected.device).unwrap() {
        assert!(kernel.passed, "{kernel:?}");
    }
    // Qwen2 (bias, GQA, NeoX rotary) and Gemma 3 (256-wide heads, a window of 8, post-norms).
    for (spec, tokenizer) in [
        ("qwen2:tiny", common::qwen_path()),
        ("gemma3:tiny", common::smollm2_path()),
    ] {
        let (_dir, file) = synthetic(spec, 0, tokenizer);
        let gguf = GgufFile::open(&file).unwrap();
        let cpu = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
        let gpu = Model::load(&gguf, &selected.device, WeightFormat::Native).unwrap();
        assert_eq!(gpu.kernels(), Some(Kernels::Fused));
        let report = compare(&cpu, &gpu, &ParityOptions::spread(24, cpu.vocab_size)).unwrap();
        eprintln!("{spec}: {report:?}");
        assert!(report.passed, "{spec}: {report:?}");
        assert!(
            report.argmax_compared > 0,
            "{spec}: no clear position to compare"
        );
    }
}

#[test]
fn parity_holds_for_the_fused_path_on_the_cpu_and_fails_on_another_model() {
    let (_dir, file) = synthetic("qwen2:tiny", 0, common::qwen_path());
    let (_dir2, other) = synthetic("qwen2:tiny", 1, common::qwen_path());
    let gguf = GgufFile::open(&file).unwrap();
    let cpu = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    let mut fused = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Native, 2).unwrap();
    fused.set_kernels(Kernels::Fused).unwrap();
    let opts = ParityOptions::spread(16, cpu.vocab_size);
    let report = compare(&cpu, &fused, &opts).unwrap();
    assert!(report.passed, "{report:?}");
    assert!(report.argmax_compared > 0);
    // The CPU engine has its own kernels: there is nothing to switch.
    let mut cpu_again =
        Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    assert!(cpu_again.set_kernels(Kernels::Fused).is_err());

    let other = GgufFile::open(&other).unwrap();
    let wrong = Model::load_with_threads(&other, &Device::Cpu, WeightFormat::Native, 2).unwrap();
    let report = compare(&cpu, &wrong, &opts).unwrap();
    assert!(!report.passed, "another model's weights passed: {report:?}");
    assert!(report.max_abs_diff > opts.tolerance);
}

/// Runs `agentd ARGS` in `home` and returns its output, asserting it succeeded.
fn succeeds(home: &std::path::Path, args: &[&str]) -> crate::suite::cli::run::Output {
    let o = run(agentd(home, args));
    assert_eq!(o.code, 0, "agentd {args:?}: {}", o.stderr);
    o
}

#[test]
fn bench_parity_prints_json_and_a_vocabulary_file_stands_in_for_the_model() {
    let home = home();
    let path = |name: &str| home.path().join(name).to_str().unwrap().to_string();
    let (vocab, a, b) = (path("qwen-vocab.gguf"), path("a.gguf"), path("b.gguf"));
    let qwen = "qwen2.5-coder-0.5b-instruct";
    succeeds(
        home.path(),
        &[
            "model",
            "vocab",
            "--from",
            qwen,
            "--out",
            &vocab,
            "--offline",
        ],
    );
    let size = std::fs::metadata(&vocab).unwrap().len();
    assert!(size < 16 << 20, "{size} bytes");
    // A synthetic model from the vocabulary file is the one from the whole model, byte for byte.
    for (from, out) in [(vocab.as_str(), &a), (qwen, &b)] {
        let args = [
            "model",
            "synth",
            "qwen2:tiny",
            "--tokenizer-from",
            from,
            "--out",
            out,
            "--offline",
        ];
        succeeds(home.path(), &args);
    }
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());

    let parity = [
        "bench",
        "parity",
        "--device",
        "cpu",
        "--tokens",
        "8",
        "--model-path",
    ];
    let o = succeeds(home.path(), &[&parity[..], &[a.as_str()]].concat());
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["passed"], true, "{v}");
    assert_eq!(v["logits"]["positions"], 8);
    assert_eq!(v["kernels_checked"], false);

    // A missing file is a clear error.
    let o = run(agentd(
        home.path(),
        &[&parity[..], &["/nonexistent.gguf"]].concat(),
    ));
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("nonexistent"), "{}", o.stderr);
}
