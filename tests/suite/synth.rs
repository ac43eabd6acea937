//! Synthetic checkpoints from the command line: `agentd model synth` writes a loadable GGUF (the engine generates
//! from it), `agentd bench engine --dummy` measures a synthetic model of a real shape, written once to
//! `$AGENTD_HOME/dummy/`; bad specs are clear errors. (The engines' agreement on synthetic files is in
//! `cpu_engine.rs`.)

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::cli_run::{run, BIN};
use super::common;

/// A temp `AGENTD_HOME` whose model cache is the real one (the tokenizer's model is found offline).
fn home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let models = common::smollm2_path()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    std::os::unix::fs::symlink(&models, home.path().join("models")).unwrap();
    home
}

fn agentd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("AGENTD_HOME", home)
        .env("AGENTD_LOG", "error")
        .env_remove("AGENTD_MODEL")
        .env_remove("AGENTD_DEVICE");
    c
}

#[test]
fn model_synth_writes_a_file_the_engine_runs() {
    let home = home();
    let out = home.path().join("tiny.gguf");
    let o = run(agentd(
        home.path(),
        &[
            "model",
            "synth",
            "qwen2:tiny",
            "--out",
            out.to_str().unwrap(),
            "--offline",
            "--seed",
            "7",
        ],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("vocabulary 151936"), "{}", o.stdout);
    let o = run(agentd(
        home.path(),
        &[
            "generate",
            "--model-path",
            out.to_str().unwrap(),
            "--max-tokens",
            "4",
            "--temperature",
            "0",
            "hi",
        ],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.trim().is_empty());

    for (args, needle) in [
        (
            vec!["model", "synth", "gpt2:1b", "--out", "x.gguf"],
            "no synthetic `gpt2`",
        ),
        (
            vec!["model", "synth", "llama:3b", "--out", "x.gguf"],
            "no size `3b`",
        ),
        (
            vec![
                "model",
                "synth",
                "llama:tiny",
                "--out",
                "x.gguf",
                "--quant",
                "q3_k",
            ],
            "--quant q3_k",
        ),
    ] {
        let o = run(agentd(home.path(), &args));
        assert_ne!(o.code, 0);
        assert!(o.stderr.contains(needle), "{args:?}: {}", o.stderr);
    }
}

#[test]
fn bench_engine_measures_a_dummy_model() {
    let home = home();
    let args = [
        "bench",
        "engine",
        "--dummy",
        "llama:tiny",
        "--prompt-tokens",
        "16",
        "--gen-tokens",
        "4",
        "--reps",
        "1",
        "--json",
        "--offline",
    ];
    let o = run(agentd(home.path(), &args));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let report: Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(
        report["model"].as_str().unwrap().contains("llama-tiny"),
        "{report}"
    );
    assert!(
        report["decode_tok_s"]["median"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    let written = std::fs::read_dir(home.path().join("dummy"))
        .unwrap()
        .count();
    assert_eq!(written, 1);
    // The second run reuses the file.
    let o = run(agentd(home.path(), &args));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stderr.contains("writing the synthetic model"),
        "{}",
        o.stderr
    );
}
