//! `agentd run --workspace`: every door of the coding session, tried by a scripted model and by the prompt.

use serde_json::{json, Value};

use super::{assert_no_secret, calls_on, Layout, SECRET};
use crate::suite::cli::run::{run, Output, Sandbox};

/// A sandbox whose working directory is the layout's workspace, playing `replies`.
fn sandbox(layout: &Layout, replies: Value) -> Sandbox {
    let sb = Sandbox::new(replies);
    // The sandbox's own directories stay (home, script); the session runs in the layout's workspace.
    let mut sb = sb;
    sb.cwd = layout.workspace();
    sb
}

/// Everything the run showed: the scripted model's requests, stdout, stderr and the session files.
fn seen(sb: &Sandbox, out: &Output) -> Vec<(String, String)> {
    let mut all = vec![
        ("stdout".to_string(), out.stdout.clone()),
        ("stderr".to_string(), out.stderr.clone()),
    ];
    for (i, request) in sb.recorded().iter().enumerate() {
        all.push((format!("request {i} to the model"), request.to_string()));
    }
    for file in sb.session_files() {
        all.push((
            file.display().to_string(),
            std::fs::read_to_string(&file).unwrap(),
        ));
    }
    all
}

fn assert_nothing_seen(sb: &Sandbox, out: &Output) {
    for (what, text) in seen(sb, out) {
        assert_no_secret(&what, &text);
    }
}

/// One scripted reply per call, then a last text.
fn script(calls: Vec<Value>) -> Value {
    let mut replies: Vec<Value> = calls.into_iter().map(|c| json!({"steps": [c]})).collect();
    replies.push(json!("done"));
    Value::Array(replies)
}

/// The tool results the model got, in order.
fn tool_results(sb: &Sandbox) -> Vec<Value> {
    let Some(last) = sb.recorded().last().cloned() else {
        return Vec::new();
    };
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool_result")
        .cloned()
        .collect()
}

const TOOLS: &str = "read,edit,write,grep,ls,find";

#[test]
fn tools_and_loop_rules_show_nothing_outside_the_workspace() {
    let layout = Layout::new();
    let ws = layout.workspace().display().to_string();
    let dirs = layout.dirs_out();
    for (i, path) in layout.ways_out().iter().enumerate() {
        let dir = &dirs[i % dirs.len()];
        let sb = sandbox(&layout, script(calls_on(path, dir)));
        let out = run(sb.cmd(&[
            "run",
            "--mode",
            "json",
            "--workspace",
            &ws,
            "--tools",
            TOOLS,
            "-p",
            "Clean up the project.",
        ]));
        assert!(out.code == 0 || out.code == 1, "{path}: {}", out.stderr);
        assert_nothing_seen(&sb, &out);
        let results = tool_results(&sb);
        assert!(results.len() >= 4, "{path}: {results:?}");
        assert!(
            results.iter().all(|r| r["is_error"] == true),
            "{path}: every call on the outside file is refused: {results:#?}"
        );
        layout.assert_secret_unchanged();
    }
}

#[test]
fn file_blocks_show_nothing_outside_the_workspace() {
    let layout = Layout::new();
    let ws = layout.workspace().display().to_string();
    for path in layout.ways_out() {
        let block = format!("{path}\n```\napi_key = changed\n```\n");
        let replies = json!([block, block, "notes.txt\n```\nbread\n```\n", block, "done"]);
        let sb = sandbox(&layout, replies);
        let prompt = format!("Fix {path} and link.txt, then notes.txt.");
        let out = run(sb.cmd(&[
            "run",
            "--mode",
            "json",
            "--workspace",
            &ws,
            "--edit-format",
            "blocks",
            "-p",
            &prompt,
        ]));
        assert!(out.code == 0 || out.code == 1, "{path}: {}", out.stderr);
        assert_nothing_seen(&sb, &out);
        layout.assert_secret_unchanged();
        std::fs::write(layout.workspace().join("notes.txt"), "milk\n").unwrap();
    }
}

#[test]
fn a_prompt_that_mentions_an_outside_file_is_refused_without_its_text() {
    let layout = Layout::new();
    let ws = layout.workspace().display().to_string();
    for path in layout.ways_out() {
        let sb = sandbox(&layout, json!(["done"]));
        let prompt = format!("Summarize @{path}");
        let out = run(sb.cmd(&["run", "--workspace", &ws, "-p", &prompt]));
        assert_ne!(out.code, 0, "{path}: {}", out.stdout);
        assert!(
            out.stderr.contains("outside the workspace"),
            "{}",
            out.stderr
        );
        assert_nothing_seen(&sb, &out);
        assert!(sb.recorded().is_empty(), "nothing reached the model");
    }
}

#[test]
fn context_files_skills_templates_and_settings_from_outside_are_not_read() {
    let layout = Layout::new();
    let ws = layout.workspace();
    let outside = layout.outside();
    // A context file above the workspace, one inside that links out, a linked skill, a linked template.
    std::fs::write(
        layout.path().join("AGENTS.md"),
        format!("Above: {SECRET}\n"),
    )
    .unwrap();
    std::fs::write(outside.join("AGENTS.md"), format!("Linked: {SECRET}\n")).unwrap();
    std::os::unix::fs::symlink(outside.join("AGENTS.md"), ws.join("AGENTS.md")).unwrap();
    std::fs::create_dir_all(outside.join("skill")).unwrap();
    std::fs::write(
        outside.join("skill/SKILL.md"),
        format!("---\nname: leak\ndescription: {SECRET}\n---\n"),
    )
    .unwrap();
    std::fs::create_dir_all(ws.join(".agentd/skills")).unwrap();
    std::os::unix::fs::symlink(outside.join("skill"), ws.join(".agentd/skills/leak")).unwrap();
    std::fs::write(outside.join("leak.md"), format!("Say {SECRET}\n")).unwrap();
    std::fs::create_dir_all(ws.join(".agentd/prompts")).unwrap();
    std::os::unix::fs::symlink(outside.join("leak.md"), ws.join(".agentd/prompts/leak.md"))
        .unwrap();
    let ws_arg = ws.display().to_string();
    let sb = sandbox(&layout, json!(["done", "done"]));
    let out = run(sb.cmd(&[
        "run",
        "--workspace",
        &ws_arg,
        "--tools",
        "read",
        "-p",
        "/leak",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_nothing_seen(&sb, &out);
    let system = sb.recorded()[0]["system"].as_str().unwrap().to_string();
    assert!(
        !system.contains("Above:") && !system.contains("Linked:"),
        "{system}"
    );
    // Unconfined, the same run reads them all as it always did.
    let sb = sandbox(&layout, json!(["done"]));
    let out = run(sb.cmd(&["run", "--tools", "read", "-p", "/leak"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let request = sb.recorded()[0].to_string();
    for part in ["Above: ", "Linked: ", "<name>leak</name>"] {
        assert!(
            request.contains(part),
            "{part} missing unconfined: {request}"
        );
    }
    assert!(request.contains(&format!("Say {SECRET}")), "{request}");
}

#[test]
fn without_a_workspace_the_tools_and_rules_read_as_before() {
    let layout = Layout::new();
    // A call that fails (a bad pattern) and is repeated: the rules answer the repeat with the file's text.
    let grep =
        json!({"tool_call": {"name": "grep", "arguments": {"pattern": "(", "path": "link.txt"}}});
    let calls = vec![
        grep.clone(),
        grep,
        json!({"tool_call": {"name": "read", "arguments": {"path": "../outside/secret.txt"}}}),
    ];
    let sb = sandbox(&layout, script(calls));
    let out = run(sb.cmd(&["run", "--tools", TOOLS, "-p", "go"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = tool_results(&sb);
    assert_eq!(results.len(), 3, "{results:?}");
    let text = |i: usize| results[i]["content"].as_str().unwrap().to_string();
    assert!(!text(0).contains(SECRET), "{results:?}");
    assert!(
        text(1).contains("The file's current text") && text(1).contains(SECRET),
        "{results:?}"
    );
    assert_eq!(results[2]["is_error"], false);
    assert!(text(2).contains(SECRET));
}
