//! One model flag set for every command that loads a model: `--model`, `--model-path`, `--device`, `--weights`,
//! `--offline` and `--chat-template` are accepted alike (parity leaves out the two it has no use for), and `serve
//! --model-path FILE` really serves that file.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::run::{run, BIN};
use crate::suite::common;

const FLAGS: &[&str] = &[
    "--model",
    "--model-path",
    "--device",
    "--weights",
    "--offline",
    "--chat-template",
];

fn help(args: &[&str]) -> String {
    let mut c = Command::new(BIN);
    c.args(args).arg("--help");
    let o = run(c);
    assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
    o.stdout
}

fn has_flag(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with(&format!("{flag} ")) || l == flag || l.contains(&format!(", {flag} "))
    })
}

#[test]
fn every_model_loading_command_takes_the_same_model_flags() {
    let commands: &[&[&str]] = &[
        &["serve"],
        &["chat"],
        &["run"],
        &["generate"],
        &["tokenize"],
        &["bench", "engine"],
        &["bench", "load"],
        &["bench", "constraint"],
        &["bench", "schemas"],
        &["bench", "tool-calls"],
    ];
    for cmd in commands {
        let text = help(cmd);
        let missing: Vec<&&str> = FLAGS.iter().filter(|f| !has_flag(&text, f)).collect();
        assert!(
            missing.is_empty(),
            "`agentd {}` lacks {missing:?}",
            cmd.join(" ")
        );
    }
    let parity = help(&["bench", "parity"]);
    for flag in ["--model", "--model-path", "--device", "--offline"] {
        assert!(has_flag(&parity, flag), "bench parity lacks {flag}");
    }
}

#[test]
fn serve_takes_model_path() {
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--offline", "--model-path"])
        .arg(common::smollm2_path())
        .env("AGENTD_LOG", "error")
        .env_remove("AGENTD_MODEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let root = loop {
        let line = lines.next().expect("agentd serve exited").unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            break format!("http://{}", rest.split_whitespace().next().unwrap_or(""));
        }
    };
    let models: serde_json::Value = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async {
            reqwest::get(format!("{root}/v1/models"))
                .await?
                .json()
                .await
        })
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let id = models["data"][0]["id"].as_str().unwrap();
    assert!(id.to_lowercase().contains("smollm2"), "{models}");

    // Both at once is a usage error naming the conflict, as for the other commands.
    let mut c = Command::new(BIN);
    c.args(["serve", "--model", "x", "--model-path", "y.gguf"]);
    let o = run(c);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--model-path"), "{}", o.stderr);
}
