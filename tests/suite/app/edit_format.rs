//! The file-blocks edit format (`app::harness::blocks`) through the real agent loop, the real `write_block` and
//! `bash` tools and real files, with a scripted provider whose replies are text: a file block is placed in its
//! file (the lines it leaves out at its ends are kept), a new file is created, a `bash` block runs, the model
//! sees no JSON tools, the examples first and the results as one user message; a block that would break a
//! Python file is refused; a rename done in one file names the other files that still use the old name; a
//! block that changes nothing after a change ends the run as completed; a path outside the workspace is text.

use std::path::Path;
use std::sync::Arc;

use agentd::agent::{
    agent_loop, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
};
use agentd::app::harness::blocks::{self as edit_format, TEXT_CALL_PREFIX};
use agentd::app::harness::rules::command_cue::COMMAND_CUE;
use agentd::app::harness::{EditFormat, Profile, RuleId};
use agentd::provider::{Message, ScriptedProvider, ScriptedReply, ToolChoice};
use agentd::tools::bash::BashTool;
use agentd::tools::support::workspace::WorkspaceState;
use agentd::tools::tool::Tool;
use agentd::tools::write_block::{WriteBlockTool, NEXT_STEP, WRITE_BLOCK};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

/// Runs the scripted text `replies` (then "done") in `dir` as a blocks session with the loop rules.
async fn run(dir: &Path, replies: &[&str]) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    run_named(dir, replies, &[]).await
}

/// As [`run`], with the prompt having named `named` (path, text).
async fn run_named(
    dir: &Path,
    replies: &[&str],
    named: &[(String, String)],
) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    let mut scripted: Vec<ScriptedReply> = replies
        .iter()
        .map(|r| ScriptedReply::text_only(*r))
        .collect();
    scripted.push(ScriptedReply::text_only("Done: the change is made."));
    let provider = Arc::new(ScriptedProvider::new(scripted));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cwd = dir.to_path_buf();
    let state = WorkspaceState::new(dir);
    // The files are shown to the model with the prompt (as `run` attaches the files a prompt names).
    for rel in state.listing().files {
        state.saw(&dir.join(rel));
    }
    let tools: Vec<Arc<dyn Tool>> =
        vec![Arc::new(WriteBlockTool::new()), Arc::new(BashTool::new())];
    // The format and the rules around blocks; the reply revision and the self-check have their own tests.
    let off = [RuleId::SecondChoice, RuleId::MissingFile, RuleId::SelfCheck];
    super::blocks_harness(&mut config, dir, state, &tools, &off, ("fix it", named));
    let context = AgentContext {
        system_prompt: edit_format::instructions(true),
        messages: vec![],
        tools,
    };
    let events = agent_loop(
        vec![AgentMessage::user("fix it")],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    (events, provider)
}

fn executions(events: &[AgentEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd {
                tool_name, result, ..
            } => Some((tool_name.clone(), result.content.clone(), result.is_error)),
            _ => None,
        })
        .collect()
}

fn end_reason(events: &[AgentEvent]) -> AgentEndReason {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::AgentEnd { reason, .. } => Some(*reason),
            _ => None,
        })
        .unwrap_or(AgentEndReason::Error)
}

fn user_text(m: &Message) -> Option<&str> {
    match m {
        Message::User(u) => Some(&u.content),
        _ => None,
    }
}

#[tokio::test]
async fn a_partial_block_is_placed_and_the_model_sees_the_result_after_the_examples() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let reply =
        "The bug is the minus sign.\n\ncalc.py\n```python\ndef add(a, b):\n    return a + b\n```\n";
    let (events, provider) = run(dir.path(), &[reply]).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
        "sub must survive a block that only holds add"
    );
    let done = executions(&events);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].0, WRITE_BLOCK);
    assert!(!done[0].2, "{}", done[0].1);
    assert!(
        done[0]
            .1
            .contains("replaced lines 1–2 and the rest of the file was kept"),
        "{}",
        done[0].1
    );
    assert_eq!(end_reason(&events), AgentEndReason::Completed);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert!(r.tools.is_empty(), "no JSON tools in a blocks session");
        assert_eq!(r.tool_choice, ToolChoice::None);
    }
    let second = &requests[1].messages;
    let examples = edit_format::examples();
    assert_eq!(&second[..examples.len()], &examples[..]);
    // The reply is sent back as written (no JSON call in it), the result follows as a user message.
    let last = user_text(second.last().unwrap()).expect("results as a user message");
    assert!(last.starts_with("Wrote calc.py."), "{last}");
    assert!(last.ends_with(NEXT_STEP), "{last}");
    match &second[second.len() - 2] {
        Message::Assistant(a) => {
            assert_eq!(a.content.len(), 1, "{a:?}");
        }
        other => panic!("{other:?}"),
    }
    // The call is in the transcript (and the session file) with an id of its own.
    let call_ids: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionStart { tool_call_id, .. } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect();
    assert!(call_ids.iter().all(|id| id.starts_with(TEXT_CALL_PREFIX)));
}

#[tokio::test]
async fn new_files_bash_blocks_and_two_blocks_in_one_reply() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), "a\nb\nc\n").unwrap();
    let (events, provider) = run(
        dir.path(),
        &[
            "```bash\nwc -l < data.csv\n```",
            "count.txt\n```\n3\n```\n\nsub/notes.md\n```\n# Notes\n```",
        ],
    )
    .await;
    let done = executions(&events);
    let names: Vec<&str> = done.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(names, ["bash", WRITE_BLOCK, WRITE_BLOCK]);
    assert!(done[0].1.contains('3'), "{}", done[0].1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("count.txt")).unwrap(),
        "3\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sub/notes.md")).unwrap(),
        "# Notes\n"
    );
    assert!(done[1].1.starts_with("Created count.txt."), "{}", done[1].1);
    // The command's output reaches the model with the command, then both writes as one message.
    let requests = provider.requests();
    let after_bash = user_text(requests[1].messages.last().unwrap()).unwrap();
    assert!(
        after_bash.starts_with("$ wc -l < data.csv\n"),
        "{after_bash}"
    );
    let after_writes = user_text(requests[2].messages.last().unwrap()).unwrap();
    assert!(
        after_writes.contains("Created count.txt.")
            && after_writes.contains("Created sub/notes.md."),
        "{after_writes}"
    );
    assert_eq!(after_writes.matches(NEXT_STEP).count(), 1);
}

#[tokio::test]
async fn a_block_that_breaks_python_is_refused_and_the_file_kept() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let (events, _) = run(
        dir.path(),
        &["calc.py\n```python\ndef add(a, b)\n    return a + b\n```"],
    )
    .await;
    let done = executions(&events);
    assert!(done[0].2, "{}", done[0].1);
    assert!(
        done[0]
            .1
            .starts_with("Not written: calc.py would not parse"),
        "{}",
        done[0].1
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        CALC
    );
}

#[tokio::test]
async fn a_rename_is_followed_in_its_file_and_the_other_files_are_shown_renamed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("helpers.py"),
        "def fmt_name(first, last):\n    return first.title() + \" \" + last.title()\n\n\n\
         def shout(first, last):\n    return fmt_name(first, last).upper()\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("app.py"),
        "from helpers import fmt_name\n\n\ndef welcome(f, l):\n    return fmt_name(f, l)\n",
    )
    .unwrap();
    // The block renames the definition only; the use below it in the same file is left behind.
    let rename = "helpers.py\n```python\ndef format_name(first, last):\n    return first.title() + \" \" + last.title()\n```";
    // The model writes back app.py as the result showed it.
    let app = "app.py\n```python\nfrom helpers import format_name\n\n\ndef welcome(f, l):\n    return format_name(f, l)\n```";
    let (events, _) = run(dir.path(), &[rename, app]).await;
    let done = executions(&events);
    assert!(!done[0].2, "{}", done[0].1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("helpers.py")).unwrap(),
        "def format_name(first, last):\n    return first.title() + \" \" + last.title()\n\n\n\
         def shout(first, last):\n    return format_name(first, last).upper()\n",
        "the use left in the written file is renamed with its definition"
    );
    assert!(
        done[0].1.contains(
            "Your block renamed `fmt_name` to `format_name`; the other uses of `fmt_name` in helpers.py were \
             renamed too (line 6)."
        ),
        "{}",
        done[0].1
    );
    // app.py is not written by the rule (its own call is), but shown as it would read.
    assert!(
        done[0].1.contains(
            "`fmt_name` is no longer defined, but app.py still uses it. With the new name it would read:\n\n\
             app.py\n```\nfrom helpers import format_name\n\n\ndef welcome(f, l):\n    return format_name(f, l)\n```"
        ),
        "{}",
        done[0].1
    );
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(!done[1].2, "{}", done[1].1);
    let app_now = std::fs::read_to_string(dir.path().join("app.py")).unwrap();
    assert!(!app_now.contains("fmt_name"), "{app_now}");
}

#[tokio::test]
async fn names_a_block_removed_that_other_files_use_are_named_when_it_is_no_single_rename() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("helpers.py"),
        "def fmt_name(first, last):\n    return first + last\n\n\ndef shout(x):\n    return x.upper()\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("app.py"),
        "from helpers import fmt_name\n\n\ndef welcome(f, l):\n    return fmt_name(f, l)\n",
    )
    .unwrap();
    // Two definitions renamed at once: not followed, but the files still using a removed name are named.
    let block =
        "helpers.py\n```python\ndef format_name(first, last):\n    return first + last\n\n\n\
                 def yell(x):\n    return x.upper()\n```";
    let (events, _) = run(dir.path(), &[block]).await;
    let done = executions(&events);
    assert!(!done[0].2, "{}", done[0].1);
    assert!(
        done[0].1.contains(
            "`fmt_name` is gone from this file, but app.py still uses it: app.py (`from helpers import fmt_name`). \
             If you renamed it, write app.py with the new name too."
        ),
        "{}",
        done[0].1
    );
    assert!(
        !done[0].1.contains("`shout`"),
        "no other file uses shout: {}",
        done[0].1
    );
    assert!(std::fs::read_to_string(dir.path().join("app.py"))
        .unwrap()
        .contains("fmt_name"));
}

#[tokio::test]
async fn a_block_without_a_path_stays_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    // The path line is missing (a bare fence), or is not a path (a function's name): nothing is written, even when
    // the block's lines are clearly one file's (rule `block_owner`, which placed it there, bought no pass).
    for reply in [
        "```python\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n```",
        "add\n```\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n```",
        "```python\nimport os\nprint(os.getcwd())\n```",
    ] {
        let (events, _) = run(dir.path(), &[reply]).await;
        assert!(executions(&events).is_empty(), "{reply}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
            CALC
        );
    }
}

#[tokio::test]
async fn a_first_block_that_changes_nothing_is_a_failure_with_the_task_restated() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let named = vec![("calc.py".to_string(), CALC.to_string())];
    let copy = format!("calc.py\n```python\n{CALC}```");
    let fix = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```";
    let (events, _) = run_named(dir.path(), &[&copy, fix, fix], &named).await;
    let done = executions(&events);
    assert!(
        done[0].2,
        "a copy of the file is a failed block: {}",
        done[0].1
    );
    assert!(
        done[0].1.starts_with(
            "Your block for calc.py is the same as the file: nothing changed, so the task is not done yet. \
             The task: fix it\n"
        ),
        "{}",
        done[0].1
    );
    // The fix that follows lands; its repeat (no change after a change) ends the run as before.
    assert!(!done[1].2, "{}", done[1].1);
    assert!(std::fs::read_to_string(dir.path().join("calc.py"))
        .unwrap()
        .contains("a + b"));
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
}

#[tokio::test]
async fn an_unchanged_block_after_a_change_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let fix = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```";
    let (events, provider) = run(dir.path(), &[fix, fix, fix, fix]).await;
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
    assert_eq!(
        executions(&events).len(),
        2,
        "the repeat is answered and ends the run"
    );
    assert_eq!(provider.remaining(), 3);
}

#[tokio::test]
async fn paths_outside_the_workspace_and_plain_code_are_text() {
    let dir = tempfile::tempdir().unwrap();
    let (events, _) = run(
        dir.path(),
        &["../escape.py\n```\nx = 1\n```\n\n/tmp/abs.py\n```\nx = 1\n```\n\n```python\nprint(1)\n```"],
    )
    .await;
    assert!(executions(&events).is_empty());
    assert!(!dir.path().join("../escape.py").exists());
}

#[tokio::test]
async fn after_a_block_lands_the_next_named_file_still_unchanged_is_asked_about() {
    let dir = tempfile::tempdir().unwrap();
    let pricing = "DISCOUNT = 10\n";
    let test = "from pricing import DISCOUNT\n\nassert DISCOUNT == 10\n";
    std::fs::write(dir.path().join("pricing.py"), pricing).unwrap();
    std::fs::write(dir.path().join("test_pricing.py"), test).unwrap();
    let named = vec![
        ("pricing.py".to_string(), pricing.to_string()),
        ("test_pricing.py".to_string(), test.to_string()),
    ];
    let (events, _) = run_named(
        dir.path(),
        &[
            "pricing.py\n```python\nDISCOUNT = 15\n```",
            "test_pricing.py\n```python\nfrom pricing import DISCOUNT\n\nassert DISCOUNT == 15\n```",
        ],
        &named,
    )
    .await;
    let done = executions(&events);
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(
        done[0]
            .1
            .ends_with("Next: does test_pricing.py need a change for this task? If it does, write test_pricing.py; if not, reply with a one-line summary."),
        "{}",
        done[0].1
    );
    assert!(
        !done[1].1.contains("Next:"),
        "every named file changed: {}",
        done[1].1
    );
}

#[tokio::test]
async fn a_block_for_a_file_never_shown_gets_its_text_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let state = WorkspaceState::new(dir.path());
    let ctx = agentd::tools::tool::ToolContext::new(dir.path()).with_workspace_state(state.clone());
    let tool = WriteBlockTool::new();
    let args =
        serde_json::json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"});
    let first = tool.call(args.clone(), &ctx).await.unwrap_err().to_string();
    assert!(
        first.starts_with(agentd::tools::edit::UNREAD_REFUSAL),
        "{first}"
    );
    assert!(first.contains("def sub(a, b):"), "{first}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        CALC
    );
    // Now seen: the same block is placed.
    let second = tool.call(args, &ctx).await.unwrap();
    assert!(
        second.content.starts_with("Wrote calc.py."),
        "{}",
        second.content
    );
    // A new file needs no reading.
    let created = tool
        .call(
            serde_json::json!({"path": "new.txt", "content": "x\n"}),
            &ctx,
        )
        .await
        .unwrap();
    assert!(
        created.content.starts_with("Created new.txt."),
        "{}",
        created.content
    );
}

#[test]
fn small_models_get_blocks_and_capable_ones_tools() {
    assert_eq!(
        Profile::for_local_model("qwen2.5-coder-0.5b-instruct").edit_format,
        EditFormat::Blocks
    );
    assert_eq!(
        Profile::for_local_model("qwen3-8b").edit_format,
        EditFormat::Tools
    );
    assert_eq!(Profile::capable().edit_format, EditFormat::Tools);
    assert_eq!("blocks".parse::<EditFormat>(), Ok(EditFormat::Blocks));
    assert!("diff".parse::<EditFormat>().is_err());
}

/// The sampling temperature of the first request a session with `edit_format` and `temperature` sends.
async fn first_temperature(edit_format: EditFormat, temperature: Option<f32>) -> Option<f32> {
    use agentd::app::{Backend, CodingSession, SessionChoice, SessionSettings};
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(ScriptedProvider::new(vec![ScriptedReply::text_only(
        "Nothing to do.",
    )]));
    let mut settings = SessionSettings::new(dir.path());
    settings.edit_format = Some(edit_format);
    settings.sampling.temperature = temperature;
    let backend = Backend::given(provider.clone(), "scripted", "scripted");
    let session = CodingSession::start(settings, backend, &SessionChoice::InMemory)
        .await
        .unwrap();
    session.prompt("hello").await.unwrap();
    provider.requests()[0].sampling.temperature
}

#[tokio::test]
async fn file_blocks_decode_greedily_unless_a_temperature_is_set() {
    assert_eq!(first_temperature(EditFormat::Blocks, None).await, Some(0.0));
    assert_eq!(
        first_temperature(EditFormat::Blocks, Some(0.5)).await,
        Some(0.5)
    );
    assert_eq!(first_temperature(EditFormat::Tools, None).await, None);
}

#[tokio::test]
async fn a_prompt_that_asks_to_run_something_is_cued_to_write_the_command_first() {
    use agentd::app::{Backend, CodingSession, SessionChoice, SessionSettings};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("compute.py"), "print(6 * 7)\n").unwrap();
    let session = |tools: Option<Vec<String>>| {
        let mut settings = SessionSettings::new(dir.path());
        settings.edit_format = Some(EditFormat::Blocks);
        settings.tools = tools;
        let provider = Arc::new(ScriptedProvider::new(vec![]));
        CodingSession::start(
            settings,
            Backend::given(provider, "scripted", "scripted"),
            &SessionChoice::InMemory,
        )
    };
    let with_bash = session(None).await.unwrap();
    let run = with_bash
        .expand_mentions("Run compute.py with python3 and write what it prints into out.txt.")
        .unwrap();
    assert!(run.contains("compute.py\n```\nprint(6 * 7)\n```"), "{run}");
    assert!(run.ends_with(COMMAND_CUE), "{run}");
    let plain = with_bash
        .expand_mentions("Add a docstring to compute.py.")
        .unwrap();
    assert!(!plain.contains(COMMAND_CUE), "{plain}");
    // Without the bash tool no command can run: no cue.
    let without = session(Some(vec!["read".into(), "write".into()]))
        .await
        .unwrap();
    let run = without
        .expand_mentions("Run compute.py with python3 and write what it prints into out.txt.")
        .unwrap();
    assert!(!run.contains(COMMAND_CUE), "{run}");
}
