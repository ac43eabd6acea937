//! `agentd export` through the real binary on a session file with two branches: the HTML page is self-contained
//! (no scripts, nothing loaded from elsewhere) and shows messages, tool calls with their arguments and results,
//! a compaction, labels and both branches with the current path marked, everything escaped; Markdown shows the
//! same content.

use agentd::provider::{ContentBlock, StopReason, ToolCall, Usage};
use agentd::session::{EntryKind, SessionEntry, SessionHeader};
use agentd::transcript::{AgentMessage, AssistantTurn, ToolResult};

fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> SessionEntry {
    SessionEntry::new(id, parent.map(String::from), kind)
}

fn msg(id: &str, parent: Option<&str>, m: AgentMessage) -> SessionEntry {
    entry(id, parent, EntryKind::Message { message: m })
}

fn assistant(content: Vec<ContentBlock>, stop: StopReason) -> AgentMessage {
    AgentMessage::Assistant(AssistantTurn {
        content,
        stop_reason: stop,
        usage: Usage::new(120, 30, 0),
        model: "smollm2-135m-instruct".into(),
        error_message: None,
        timestamp: 0,
    })
}

fn write_session(dir: &std::path::Path) -> std::path::PathBuf {
    let header = SessionHeader::new("/work/project");
    let call = ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: serde_json::json!({"path": "src/<main>.rs"}),
        invalid: None,
    };
    let entries = vec![
        msg("u1", None, AgentMessage::user("Show me <main> & explain")),
        msg(
            "a1",
            Some("u1"),
            assistant(
                vec![
                    ContentBlock::Text {
                        text: "Reading it.".into(),
                    },
                    ContentBlock::ToolCall(call),
                ],
                StopReason::ToolUse,
            ),
        ),
        msg(
            "r1",
            Some("a1"),
            AgentMessage::ToolResult(ToolResult {
                tool_call_id: "call_1".into(),
                tool_name: "read".into(),
                content: "fn main() { println!(\"<hi>\"); }".into(),
                details: serde_json::Value::Null,
                is_error: false,
                timestamp: 0,
            }),
        ),
        // Two answers to the same result: the first branch was left, the second is the current path.
        msg(
            "a2",
            Some("r1"),
            assistant(
                vec![ContentBlock::Text {
                    text: "The old answer.".into(),
                }],
                StopReason::Stop,
            ),
        ),
        msg(
            "a3",
            Some("r1"),
            assistant(
                vec![ContentBlock::Text {
                    text: "It prints:\n```\n<hi>\n```\nDone.".into(),
                }],
                StopReason::Stop,
            ),
        ),
        entry(
            "c1",
            Some("a3"),
            EntryKind::Compaction {
                summary: "## Goal\nExplain main".into(),
                first_kept_entry_id: "a3".into(),
                tokens_before: 4321,
                details: serde_json::Value::Null,
            },
        ),
        entry(
            "l1",
            Some("c1"),
            EntryKind::Label {
                target_id: "a3".into(),
                label: Some("good answer".into()),
            },
        ),
        entry(
            "n1",
            Some("l1"),
            EntryKind::SessionInfo {
                name: Some("Explaining main".into()),
            },
        ),
    ];
    let mut text = header.to_line() + "\n";
    for e in &entries {
        text.push_str(&e.to_line());
        text.push('\n');
    }
    let path = dir.join("session.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn export(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("export")
        .args(args)
        .output()
        .expect("run agentd export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn html_export_is_self_contained_and_shows_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_session(dir.path());
    let file = dir.path().join("out.html");
    export(&[
        path.to_str().unwrap(),
        "--html",
        "-o",
        file.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Nothing runs and nothing is fetched: no scripts, no external URLs.
    assert!(!html.contains("<script"), "a script in the export");
    for external in ["http://", "https://", "src=", "@import", "url("] {
        assert!(!html.contains(external), "`{external}` in the export");
    }
    // The name, the messages (escaped), the call's arguments and its result.
    assert!(html.contains("<title>Explaining main</title>"));
    assert!(html.contains("Show me &lt;main&gt; &amp; explain"));
    assert!(html.contains("tool call <b>read</b>"));
    assert!(html.contains("&quot;path&quot;: &quot;src/&lt;main&gt;.rs&quot;"));
    assert!(html.contains("println!(&quot;&lt;hi&gt;&quot;)"));
    assert!(!html.contains("<main>.rs") && !html.contains("<hi>"));
    // A fenced block becomes code.
    assert!(html.contains("<pre><code>&lt;hi&gt;</code></pre>"));
    // Both branches, the left one not on the current path, the current one marked.
    assert!(html.contains("branch 1 of 2") && html.contains("branch 2 of 2 · current path"));
    let old = html.find("The old answer.").unwrap();
    let new = html.find("It prints:").unwrap();
    assert!(old < new, "branches in file order");
    assert!(html.contains("class=\"entry assistant\" id=\"e-a2\""));
    assert!(html.contains("class=\"entry assistant on-path\" id=\"e-a3\""));
    // The compaction and the label.
    assert!(html.contains("compaction · 4321 tokens before"));
    assert!(html.contains("<span class=\"label\">good answer</span>"));
}

#[test]
fn markdown_export_and_lookup_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_session(dir.path());
    let md = export(&[path.to_str().unwrap(), "--md"]);
    assert!(md.starts_with("# Explaining main"));
    assert!(md.contains("### User `u1`\n\nShow me <main> & explain"));
    assert!(md.contains(
        "Tool call **read** `call_1`:\n\n```json\n{\n  \"path\": \"src/<main>.rs\"\n}\n```"
    ));
    assert!(md.contains("## Branch 1 of 2\n") && md.contains("## Branch 2 of 2 (current path)"));
    assert!(md.contains("### Assistant (other branch) `a2`"));
    // Tool results in fenced blocks.
    assert!(md.contains("### Tool result: read `r1`\n\n```\nfn main()"));
    // A missing session is a clear error, not a panic.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["export", "no-such-session", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no session `no-such-session`"), "{err}");
}
