//! The loop rules (`app::harness::rules::repeats`) through the real agent loop, the real file tools and real files, with a
//! scripted provider: a repeated failed call is answered with its earlier error, a repeated change "already
//! done", a no-op after a change ends the run as completed, endless repeats stop it, an
//! edit of an unread file gets the file's text (and may then be sent again), and the rules leave the session's
//! other hooks in charge of what they let through. Also: with a workspace, each turn's request carries the tools'
//! workspace grammars.

use std::path::Path;
use std::sync::Arc;

use agentd::agent::{
    agent_loop, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
    BeforeToolCall,
};
use agentd::app::harness::{EditFormat, Profile, RuleId};
use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::tools::edit::EditTool;
use agentd::tools::read::ReadTool;
use agentd::tools::support::workspace::WorkspaceState;
use agentd::tools::tool::Tool;
use agentd::tools::write::WriteTool;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::ending;

fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool::new()),
        Arc::new(EditTool::new()),
        Arc::new(WriteTool::new()),
    ]
}

/// The loop's guards (JSON tools; the self-check has its own tests) around `config`.
fn loop_guards(config: &mut AgentLoopConfig, dir: &Path, tools: &[Arc<dyn Tool>]) {
    let off = [RuleId::SelfCheck];
    super::install_harness(
        config,
        dir,
        tools,
        Profile::small(),
        EditFormat::Tools,
        &off,
        ("go", &[]),
    );
}

/// Runs `calls` (tool, arguments) one per turn, then a text reply, in `dir` with the rules (and the workspace
/// state when `workspace`).
async fn run(
    dir: &Path,
    calls: &[(&str, Value)],
    workspace: bool,
) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    let mut replies: Vec<ScriptedReply> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            ScriptedReply::new().tool_call_with_id(format!("c{i}"), *name, args.to_string())
        })
        .collect();
    replies.push(ScriptedReply::text_only("done"));
    let provider = Arc::new(ScriptedProvider::new(replies));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cwd = dir.to_path_buf();
    if workspace {
        config.workspace_state = Some(WorkspaceState::new(dir));
    }
    let tools = tools();
    loop_guards(&mut config, dir, &tools);
    let context = AgentContext {
        system_prompt: "test".into(),
        messages: vec![],
        tools,
    };
    let events = agent_loop(
        vec![AgentMessage::user("go")],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    (events, provider)
}

fn results(events: &[AgentEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd { result, .. } => {
                Some((result.content.clone(), result.is_error))
            }
            _ => None,
        })
        .collect()
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    json!({"path": path, "edits": [{"old_text": old, "new_text": new}]})
}

#[tokio::test]
async fn a_failed_call_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let miss = edit("calc.py", "return a * b", "return a + b");
    let (events, _) = run(dir.path(), &[("edit", miss.clone()), ("edit", miss)], false).await;
    let r = results(&events);
    assert!(
        r[0].1 && r[0].0.starts_with("Could not find old_text in calc.py."),
        "{r:?}"
    );
    assert!(r[1].1, "{r:?}");
    assert!(
        r[1].0.starts_with("This exact call failed just before"),
        "{}",
        r[1].0
    );
    // The earlier error and the file as it is now.
    assert!(
        r[1].0.contains("Could not find old_text") && r[1].0.contains("    return a - b"),
        "{}",
        r[1].0
    );
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn a_repeated_change_is_already_done_and_a_no_op_after_it_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let fix = edit("calc.py", "return a - b", "return a + b");
    let no_op = edit("calc.py", "return a + b", "return a + b");
    let (events, provider) = run(
        dir.path(),
        &[
            ("edit", fix.clone()),
            ("edit", fix),
            ("edit", no_op),
            ("write", json!({"path": "x", "content": ""})),
        ],
        false,
    )
    .await;
    let r = results(&events);
    assert!(!r[0].1 && r[0].0.starts_with("Edited calc.py."), "{r:?}");
    assert!(
        !r[1].1
            && r[1]
                .0
                .starts_with("Already done: this exact call succeeded"),
        "{r:?}"
    );
    assert!(
        r[1].0.contains("Edited calc.py."),
        "the earlier result: {}",
        r[1].0
    );
    assert!(!r[2].1 && r[2].0.starts_with("Nothing to change:"), "{r:?}");
    // The run ended there: completed, the last scripted call never asked for.
    assert_eq!(r.len(), 3);
    assert_eq!(ending(&events), (AgentEndReason::Completed, None));
    assert_eq!(provider.remaining(), 2);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    assert!(!dir.path().join("x").exists());
}

#[tokio::test]
async fn a_no_op_before_any_change_is_an_ordinary_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let (events, _) = run(dir.path(), &[("edit", edit("a.txt", "one", "one"))], false).await;
    let r = results(&events);
    assert!(r[0].1 && r[0].0.contains("identical"), "{r:?}");
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn repeats_that_keep_coming_are_stopped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let miss = edit("a.txt", "two", "three");
    let calls: Vec<(&str, Value)> = (0..6).map(|_| ("edit", miss.clone())).collect();
    let (events, _) = run(dir.path(), &calls, false).await;
    // The first runs and fails; three answered repeats; then the run stops, the job not claimed done.
    assert_eq!(results(&events).len(), 4);
    let (reason, why) = ending(&events);
    assert_eq!(reason, AgentEndReason::Stopped);
    assert!(why
        .unwrap_or_default()
        .contains("already been answered 3 times"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "one\n"
    );
}

#[tokio::test]
async fn an_unread_file_is_shown_before_it_is_edited_and_the_grammar_rides_along() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let fix = edit("calc.py", "    return a - b", "    return a + b");
    let (events, provider) = run(dir.path(), &[("edit", fix.clone()), ("edit", fix)], true).await;
    let r = results(&events);
    assert!(
        r[0].1
            && r[0]
                .0
                .starts_with("Not edited yet: calc.py had not been read"),
        "{r:?}"
    );
    assert!(
        r[0].0.contains("def add(a, b):\n    return a - b\n"),
        "{}",
        r[0].0
    );
    // Sent again (now seen), it runs: the refusal is not the call's failure.
    assert!(!r[1].1 && r[1].0.starts_with("Edited calc.py."), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    // Every request carried the tools' grammars in this workspace; what the model sees stayed plain.
    let req = &provider.requests()[0];
    let by_name = |n: &str| req.tools.iter().find(|t| t.name == n).unwrap().clone();
    let read = by_name("read");
    assert_eq!(
        read.grammar.as_ref().unwrap()["properties"]["path"]["x-agentd-enum"],
        json!(["calc.py"])
    );
    assert!(!read.parameters.to_string().contains("x-agentd"));
    let grammar = by_name("edit").grammar.unwrap().to_string();
    assert!(
        grammar.contains("x-agentd-substring-of") && grammar.contains("return a - b"),
        "{grammar}"
    );
    assert!(by_name("write")
        .grammar
        .unwrap()
        .to_string()
        .contains("x-agentd-pattern"));
    // After the edit, the next request's grammar holds the file's new text.
    let last = provider
        .requests()
        .last()
        .unwrap()
        .tools
        .iter()
        .find(|t| t.name == "edit")
        .unwrap()
        .clone();
    assert!(last.grammar.unwrap().to_string().contains("return a + b"));
}

#[tokio::test]
async fn without_a_workspace_the_tools_keep_their_plain_schema() {
    let dir = tempfile::tempdir().unwrap();
    let (_, provider) = run(dir.path(), &[], false).await;
    assert!(provider.requests()[0]
        .tools
        .iter()
        .all(|t| t.grammar.is_none()));
}

#[tokio::test]
async fn the_rules_leave_other_calls_to_the_next_hook() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id(
            "c0",
            "write",
            json!({"path": "a.txt", "content": "two\n"}).to_string(),
        ),
        ScriptedReply::text_only("done"),
    ]));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cwd = dir.path().to_path_buf();
    config.before_tool_call = Some(Arc::new(|_call| {
        Box::pin(async { BeforeToolCall::Block("denied by the user".into()) })
    }));
    let tools = tools();
    loop_guards(&mut config, dir.path(), &tools);
    let context = AgentContext {
        system_prompt: "test".into(),
        messages: vec![],
        tools,
    };
    let events: Vec<AgentEvent> = agent_loop(
        vec![AgentMessage::user("go")],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    let r = results(&events);
    assert_eq!(
        r,
        [("Tool call blocked: denied by the user".to_string(), true)]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "one\n"
    );
}
