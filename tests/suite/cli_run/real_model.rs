//! `agentd run` on the real models: SmolLM2 answers in print mode, and the Qwen coder model fixes `calc.py`
//! with a file block and with its real tool calls.

use serde_json::{json, Value};

use super::{run, Sandbox};

#[test]
fn real_model_answers_in_print_mode() {
    let model = super::super::common::smollm2_path();
    let sb = Sandbox::new(json!([]));
    let out = run(sb.bare_cmd(&[
        "run",
        "-p",
        "Say hello.",
        "--model-path",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--offline",
        "--no-tools",
        "--no-session",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !out.stdout.trim().is_empty(),
        "no answer; stderr: {}",
        out.stderr
    );
}

/// The default edit format on the local engine is file blocks: the coder model fixes `calc.py` at temperature 0
/// by writing the fixed function in a fenced block under the file's path; `write_block` places it (the other
/// function stays) and the run ends with the model's summary.
#[test]
fn coder_model_fixes_calc_py_with_a_file_block() {
    let model = super::super::common::qwen_path();
    let sb = Sandbox::new(json!([]));
    std::fs::write(
        sb.cwd.join("calc.py"),
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    )
    .unwrap();
    let out = run(sb.bare_cmd(&[
        "run",
        "--mode",
        "json",
        "-p",
        "The add function in calc.py is wrong: it should return the sum. Fix it.",
        "--model-path",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--offline",
        "--no-session",
        "--max-turns",
        "4",
        "--temperature",
        "0",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let started: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_execution_start")
        .map(|e| e["tool_name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(started.iter().any(|t| t == "write_block"), "{}", out.stdout);
    let text = std::fs::read_to_string(sb.cwd.join("calc.py")).unwrap();
    assert!(text.contains("return a + b"), "{text}");
    assert!(text.contains("def mul(a, b):\n    return a * b"), "{text}");
}

/// Issue 14's case: the coder model under `tool_choice: auto` writes its calls in its own shape (often a fenced
/// JSON block); they must become real calls that run. Two turns at temperature 0 on `calc.py`, with the JSON
/// tools (`--edit-format tools`).
#[test]
fn coder_model_really_calls_its_tools_on_the_calc_py_task() {
    let model = super::super::common::qwen_path();
    let sb = Sandbox::new(json!([]));
    std::fs::write(
        sb.cwd.join("calc.py"),
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    )
    .unwrap();
    let out = run(sb.bare_cmd(&[
        "run",
        "--mode",
        "json",
        "-p",
        "The add function in calc.py is wrong: it should return the sum. Fix it with the edit tool.",
        "--model-path",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--offline",
        "--no-session",
        "--max-turns",
        "2",
        "--max-tokens",
        "256",
        "--temperature",
        "0",
        "--edit-format",
        "tools",
    ]));
    // 0: the model answered; 1: it was still calling tools at the turn limit. Either way it ran.
    assert!(matches!(out.code, 0 | 1), "{}", out.stderr);
    let started: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_execution_start")
        .map(|e| e["tool_name"].as_str().unwrap_or("").to_string())
        .collect();
    eprintln!("calc.py task: tools run {started:?}");
    assert!(
        started.iter().any(|t| t == "read" || t == "edit"),
        "no read/edit call ran: {}",
        out.stdout
    );
}
