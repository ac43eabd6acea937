//! What `agentd run` reads besides the prompt: prompt templates (`/name args`), `@file` references, and Pi's
//! own session files, opened and continued.

use super::*;

/// `run -p "/name args…"` expands a prompt template (the project's wins over the user's of the same name) and
/// sends the expansion; an unknown `/name` is sent as written.
#[test]
fn run_expands_prompt_templates() {
    let sb = Sandbox::new(json!(["Reviewed.", "Plain."]));
    let user = sb.home.join("prompts");
    let project = sb.cwd.join(".agentd/prompts");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(user.join("review.md"), "User review of $1\n").unwrap();
    std::fs::write(
        project.join("review.md"),
        "---\ndescription: Review a file\n---\nReview $1, focusing on ${@:2}.\n",
    )
    .unwrap();
    let out = run(sb.cmd(&["run", "-p", "/review src/lib.rs \"edge cases\" errors"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Reviewed."), "{}", out.stdout);
    let last = |i: isize| sb.last_content(i);
    assert_eq!(
        last(0),
        json!("Review src/lib.rs, focusing on edge cases errors.\n")
    );
    let out = run(sb.cmd(&["run", "-p", "/nothing here"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(last(1), json!("/nothing here"));
}

/// `run -p` puts the files that `@path` words name after the prompt; a binary file is refused before anything
/// is sent.
#[test]
fn run_inlines_at_file_references() {
    let sb = Sandbox::new(json!(["Summarized."]));
    std::fs::write(sb.cwd.join("notes.txt"), "buy milk\n").unwrap();
    std::fs::write(sb.cwd.join("blob.bin"), [0u8, 1, 2]).unwrap();
    let out = run(sb.cmd(&["run", "-p", "summarize @notes.txt."]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        sb.last_content(0),
        json!("summarize @notes.txt.\n\n<file name=\"notes.txt\">\nbuy milk\n</file>")
    );
    let out = run(sb.cmd(&["run", "-p", "what is @blob.bin"]));
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("looks like a binary file"),
        "{}",
        out.stderr
    );
    assert_eq!(
        sb.recorded().len(),
        1,
        "nothing was sent for the refused prompt"
    );
}

/// A session file written by Pi (v3: its header, `model_change`, and messages in Pi's shapes — content blocks,
/// `toolCall`, `toolResult`, camelCase fields) opens with `--session FILE`: the model gets its history in our
/// shape, and the new turn is appended to the same file.
#[test]
fn pi_session_files_open_and_continue() {
    let sb = Sandbox::new(json!(["Continuing from Pi."]));
    let pi = sb.root.path().join("2026-01-02T03-04-05-000Z_pi.jsonl");
    let lines = [
        json!({"type": "session", "version": 3, "id": "7d0a4c3e-9b1f-4a57-8d2c-111111111111",
               "timestamp": "2026-01-02T03:04:05.000Z", "cwd": sb.cwd}),
        json!({"type": "model_change", "id": "a1b2c3d4", "parentId": null,
               "timestamp": "2026-01-02T03:04:05.100Z", "provider": "anthropic", "modelId": "claude-sonnet-4-5"}),
        json!({"type": "thinking_level_change", "id": "a1b2c3d5", "parentId": "a1b2c3d4",
               "timestamp": "2026-01-02T03:04:05.150Z", "thinkingLevel": "off"}),
        json!({"type": "message", "id": "b1b2c3d4", "parentId": "a1b2c3d5", "timestamp": "2026-01-02T03:04:06.000Z",
               "message": {"role": "user", "content": [{"type": "text", "text": "What is in notes.txt?"}],
                           "timestamp": 1767323046000u64}}),
        json!({"type": "message", "id": "c1b2c3d4", "parentId": "b1b2c3d4", "timestamp": "2026-01-02T03:04:07.000Z",
               "message": {"role": "assistant", "content": [
                   {"type": "thinking", "thinking": "I should read it."},
                   {"type": "text", "text": "Let me read it."},
                   {"type": "toolCall", "id": "toolu_01", "name": "read", "arguments": {"path": "notes.txt"}}],
                   "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
                   "usage": {"input": 120, "output": 30, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 150,
                             "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0}},
                   "stopReason": "toolUse", "timestamp": 1767323047000u64}}),
        json!({"type": "message", "id": "d1b2c3d4", "parentId": "c1b2c3d4", "timestamp": "2026-01-02T03:04:08.000Z",
               "message": {"role": "toolResult", "toolCallId": "toolu_01", "toolName": "read",
                           "content": [{"type": "text", "text": "buy oat milk\n"}], "isError": false,
                           "timestamp": 1767323048000u64}}),
        json!({"type": "message", "id": "e1b2c3d4", "parentId": "d1b2c3d4", "timestamp": "2026-01-02T03:04:09.000Z",
               "message": {"role": "assistant", "content": [{"type": "text", "text": "It says: buy oat milk."}],
                           "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
                           "usage": {"input": 160, "output": 8, "cacheRead": 120, "cacheWrite": 0, "totalTokens": 168},
                           "stopReason": "stop", "timestamp": 1767323049000u64}}),
        json!({"type": "label", "id": "f1b2c3d4", "parentId": "e1b2c3d4", "timestamp": "2026-01-02T03:04:10.000Z",
               "targetId": "e1b2c3d4", "label": "answered"}),
        json!({"type": "session_info", "id": "f1b2c3d5", "parentId": "f1b2c3d4",
               "timestamp": "2026-01-02T03:04:11.000Z", "name": "notes"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&pi, text).unwrap();
    let out = run(sb.cmd(&[
        "run",
        "--session",
        pi.to_str().unwrap(),
        "-p",
        "and what else?",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "Continuing from Pi.\n");
    let messages = sb.recorded()[0]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool_result", "assistant", "user"],
        "{messages:?}"
    );
    assert_eq!(messages[0]["content"], "What is in notes.txt?");
    let call = &messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_call")
        .unwrap()
        .clone();
    assert_eq!(
        (call["id"].clone(), call["name"].clone()),
        (json!("toolu_01"), json!("read"))
    );
    assert_eq!(messages[2]["tool_call_id"], "toolu_01");
    assert_eq!(messages[2]["content"], "buy oat milk\n");
    assert_eq!(messages[4]["content"], "and what else?");
    // The new turn went into Pi's file, after its last entry.
    let after = std::fs::read_to_string(&pi).unwrap();
    assert_eq!(after.lines().count(), lines.len() + 2, "{after}");
    assert!(
        after.starts_with(&format!("{}\n", lines[0])),
        "Pi's lines are untouched"
    );
    let last: Value = serde_json::from_str(after.lines().last().unwrap()).unwrap();
    assert_eq!(last["message"]["role"], "assistant");
}
