//! The harness as one component (`app::harness`): the rules run in their explicit order, per profile and edit
//! format; a run checks its own work before it ends — a change task with nothing changed ends `Stopped`, a
//! dropped export is told with the result and sends the model back, a failing test command the task names ends
//! `Failed` after the retries — through the real agent loop, the real tools and real files, with a scripted
//! model.

use std::path::Path;
use std::sync::Arc;

use agentd::agent::{
    agent_loop, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
};
use agentd::app::harness::rules::self_check::{CommandRunner, RETRIES};
use agentd::app::harness::{self, EditFormat, Harness, HarnessSetup, Profile, RuleId};
use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::tools::bash::BashTool;
use agentd::tools::policy::FileScope;
use agentd::tools::support::workspace::WorkspaceState;
use agentd::tools::tool::Tool;
use agentd::tools::write_block::WriteBlockTool;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::ending;

/// Runs `task` as a blocks session in `dir` with only the self-check, the scripted model answering `replies`.
async fn run(dir: &Path, task: &str, replies: &[&str]) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    run_traced(dir, task, replies, None, &[RuleId::SelfCheck]).await
}

/// [`run`] with the repeat guard too.
async fn run_with_guard(
    dir: &Path,
    task: &str,
    replies: &[&str],
) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    run_traced(
        dir,
        task,
        replies,
        None,
        &[RuleId::Repeats, RuleId::SelfCheck],
    )
    .await
}

/// [`run`] with `rules`, those that act traced to `trace`.
async fn run_traced(
    dir: &Path,
    task: &str,
    replies: &[&str],
    trace: Option<std::path::PathBuf>,
    rules: &[RuleId],
) -> (Vec<AgentEvent>, Arc<ScriptedProvider>) {
    let provider = Arc::new(ScriptedProvider::new(
        replies.iter().map(|r| ScriptedReply::text_only(*r)),
    ));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cwd = dir.to_path_buf();
    let state = WorkspaceState::new(dir);
    for rel in state.listing().files {
        state.saw(&dir.join(rel));
    }
    config.workspace_state = Some(state.clone());
    let bash: Arc<dyn Tool> = Arc::new(BashTool::new());
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(WriteBlockTool::new()), bash.clone()];
    let only_checks = Profile {
        rules: rules.to_vec(),
        ..Profile::small()
    };
    let h = Harness::new(HarnessSetup {
        profile: only_checks,
        format: EditFormat::Blocks,
        scope: FileScope::within(dir),
        state: Some(state.clone()),
        tools: harness::mutating_tools(&tools),
        commands: Some(CommandRunner {
            bash,
            cwd: dir.to_path_buf(),
            workspace: Some(dir.to_path_buf()),
            state,
        }),
        blocks_grammar: false,
        trace,
    });
    h.start_prompt(task, &[], String::new());
    config.harness = Some(h);
    let context = AgentContext {
        system_prompt: "test".into(),
        messages: vec![],
        tools,
    };
    let events = agent_loop(
        vec![AgentMessage::user(task)],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    (events, provider)
}

/// The user messages the run added after the prompt (the harness's notes).
fn notes(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::MessageStart {
                message: AgentMessage::User { content, .. },
            } => Some(content.clone()),
            _ => None,
        })
        .skip(1)
        .collect()
}

#[tokio::test]
async fn a_change_task_that_changes_nothing_is_told_once_then_stopped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let (events, provider) = run(
        dir.path(),
        "Fix add in calc.py: it must return a + b.",
        &["The task is done.", "Done, as I said."],
    )
    .await;
    let notes = notes(&events);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Nothing in the project has changed yet"),
        "{}",
        notes[0]
    );
    assert_eq!(provider.requests().len(), 2);
    let (reason, why) = ending(&events);
    assert_eq!(reason, AgentEndReason::Stopped);
    assert!(why.unwrap().contains("changed no file"));
}

#[tokio::test]
async fn the_trace_names_each_rule_that_acted_once_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let traces = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    // The self-check acts twice (its note, then the stop): traced once.
    let trace = traces.path().join("change.rules");
    run_traced(
        dir.path(),
        "Fix add in calc.py: it must return a + b.",
        &["The task is done.", "Done, as I said."],
        Some(trace.clone()),
        &[RuleId::SelfCheck],
    )
    .await;
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "self_check\n");
    // A question it lets end as it would have: nothing acted, nothing traced.
    let trace = traces.path().join("question.rules");
    run_traced(
        dir.path(),
        "What does the function in calc.py return?",
        &["It returns a - b."],
        Some(trace.clone()),
        &[RuleId::SelfCheck],
    )
    .await;
    assert!(!trace.exists());
}

#[tokio::test]
async fn the_format_examples_code_is_never_written_into_a_task_file() {
    let dir = tempfile::tempdir().unwrap();
    let original = "def add(a, b):\n    return a - b\n";
    std::fs::write(dir.path().join("calc.py"), original).unwrap();
    let parrot = "calc.py\n```python\ndef square(x):\n    return x + x\n\n\ndef cube(x):\n    return x * x * x\n```";
    let (events, _) = run(
        dir.path(),
        "Fix add in calc.py: it must return a + b.",
        &[parrot, "Done.", "Done."],
    )
    .await;
    // Written again and again, it is a repeat like any other answered call: the repeat guard stops the run.
    let (again, _) = run_with_guard(
        dir.path(),
        "Fix add in calc.py.",
        &[parrot, parrot, parrot, parrot],
    )
    .await;
    assert_eq!(ending(&again).0, AgentEndReason::Stopped);
    let refused = events.iter().any(|e| {
        matches!(e, AgentEvent::ToolExecutionEnd { result, .. } if result.is_error && result.content.contains("format example"))
    });
    assert!(refused);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        original
    );
    assert_eq!(ending(&events).0, AgentEndReason::Stopped);
}

#[tokio::test]
async fn a_setting_the_task_does_not_name_is_put_back_and_the_model_told() {
    let dir = tempfile::tempdir().unwrap();
    let original = "# Settings.\nTIMEOUT_SECONDS = 30\nMAX_RETRIES = 3\n";
    std::fs::write(dir.path().join("settings.py"), original).unwrap();
    let both = "settings.py\n```python\n# Settings.\nTIMEOUT_SECONDS = 5\nMAX_RETRIES = 5\n```";
    let (events, _) = run(
        dir.path(),
        "In settings.py, change MAX_RETRIES from 3 to 5. Leave the other settings alone.",
        &[both, "Done."],
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("settings.py")).unwrap(),
        "# Settings.\nTIMEOUT_SECONDS = 30\nMAX_RETRIES = 5\n"
    );
    let told = events.iter().any(|e| {
        matches!(e, AgentEvent::ToolExecutionEnd { result, .. }
            if result.content.contains("TIMEOUT_SECONDS kept as it was") && !result.content.contains("Check:"))
    });
    assert!(told);
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn a_change_task_that_names_only_a_defined_function_is_still_a_change_task() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("settings.py"),
        "def load_cfg(text):\n    return {}\n",
    )
    .unwrap();
    let (events, _) = run(
        dir.path(),
        "Rename the function load_cfg to load_config, and update every place that uses it.",
        &["load_config -> load_config", "Done."],
    )
    .await;
    assert_eq!(notes(&events).len(), 1);
    assert_eq!(ending(&events).0, AgentEndReason::Stopped);
    // A name the workspace does not define is no job on its files: a chat turn ends as it is.
    let (events, _) = run(
        dir.path(),
        "Rename the function parse_all to parse, please.",
        &["Which file is it in?"],
    )
    .await;
    assert!(notes(&events).is_empty());
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn a_question_ends_completed_without_a_note() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def add(a, b):\n    return a + b\n",
    )
    .unwrap();
    let (events, _) = run(
        dir.path(),
        "What does the function in calc.py return?",
        &["It returns a + b."],
    )
    .await;
    assert!(notes(&events).is_empty());
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn a_dropped_export_is_told_and_the_model_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let module = "function clamp(x, lo, hi) {\n  return Math.min(Math.max(x, lo), hi);\n}\n\nfunction lerp(a, b, t) {\n  return a + (b - a) * t * 2;\n}\n\nmodule.exports = { clamp, lerp };\n";
    std::fs::write(dir.path().join("mathx.js"), module).unwrap();
    let dropped = "mathx.js\n```js\nfunction clamp(x, lo, hi) {\n  return Math.min(Math.max(x, lo), hi);\n}\n\nfunction lerp(a, b, t) {\n  return a + (b - a) * t;\n}\n\nmodule.exports = { lerp };\n```";
    let kept = "mathx.js\n```js\nmodule.exports = { clamp, lerp };\n```";
    let (events, _) = run(
        dir.path(),
        "Fix lerp in mathx.js: it doubles t.",
        &[dropped, "Done.", kept, "Done."],
    )
    .await;
    let told = events.iter().any(|e| {
        matches!(e, AgentEvent::ToolExecutionEnd { result, .. } if result.content.contains("no longer defines clamp"))
    });
    assert!(told, "the result names the lost export");
    let notes = notes(&events);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("clamp"), "{}", notes[0]);
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
    let now = std::fs::read_to_string(dir.path().join("mathx.js")).unwrap();
    assert!(
        now.contains("{ clamp, lerp }") && now.contains("(b - a) * t;"),
        "{now}"
    );
}

#[tokio::test]
async fn a_failing_test_the_task_names_ends_failed_after_the_retries() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prices.py"),
        "def total(xs):\n    return sum(xs) - 1\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("test_prices.py"),
        "from prices import total\n\nassert total([1, 2]) == 3, 'total is wrong'\nprint('ok')\n",
    )
    .unwrap();
    // Each "fix" changes the file but keeps the bug.
    let wrong =
        |n: u32| format!("prices.py\n```python\ndef total(xs):\n    return sum(xs) - {n}\n```");
    let replies: Vec<String> = (2..=5)
        .flat_map(|n| [wrong(n), "Done.".to_string()])
        .collect();
    let replies: Vec<&str> = replies.iter().map(String::as_str).collect();
    let (events, _) = run(
        dir.path(),
        "Run `python3 test_prices.py`: it fails. Fix prices.py.",
        &replies,
    )
    .await;
    let notes = notes(&events);
    assert_eq!(notes.len(), RETRIES, "{notes:?}");
    assert!(notes[0].contains("total is wrong"), "{}", notes[0]);
    let (reason, why) = ending(&events);
    assert_eq!(reason, AgentEndReason::Failed);
    assert!(why.unwrap().contains("python3 test_prices.py"));
}

#[test]
fn the_rules_run_in_their_explicit_order_per_profile_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let build = |profile: Profile, format: EditFormat| {
        Harness::new(HarnessSetup {
            profile,
            format,
            scope: FileScope::within(dir.path()),
            state: None,
            tools: vec![("bash".into(), true)],
            commands: None,
            blocks_grammar: false,
            trace: None,
        })
        .rule_ids()
    };
    let small = build(Profile::small(), EditFormat::Blocks);
    let expected: Vec<RuleId> = RuleId::ORDER.to_vec();
    assert_eq!(small, expected);
    // The blocks rules do not run on JSON tools; the capable profile keeps two rules.
    let tools = build(Profile::small(), EditFormat::Tools);
    assert_eq!(
        tools,
        vec![RuleId::NoOpFinish, RuleId::Repeats, RuleId::SelfCheck]
    );
    assert_eq!(
        build(Profile::capable(), EditFormat::Tools),
        vec![RuleId::Repeats, RuleId::SelfCheck]
    );
    let ablated = build(
        Profile::small().without(&[RuleId::SecondChoice]),
        EditFormat::Blocks,
    );
    assert!(!ablated.contains(&RuleId::SecondChoice) && ablated.len() == expected.len() - 1);
}

#[tokio::test]
async fn a_stub_that_breaks_its_docstring_example_ends_failed_even_when_the_example_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let stub = "import re\n\n\ndef slugify(title):\n    \"\"\"slugify(\"Hello, World!\") == \"hello-world\".\"\"\"\n    raise NotImplementedError\n";
    std::fs::write(dir.path().join("text_utils.py"), stub).unwrap();
    // The model implements it wrongly, then rewrites the example to what its code returns.
    let wrong = "text_utils.py\n```python\ndef slugify(title):\n    \"\"\"slugify(\"Hello, World!\") == \"hello-world\".\"\"\"\n    return title.lower().replace(\" \", \"-\")\n```";
    let cheat = "text_utils.py\n```python\ndef slugify(title):\n    \"\"\"slugify(\"Hello, World!\") == \"hello,-world!\".\"\"\"\n    return title.lower().replace(\" \", \"-\")\n```";
    let (events, _) = run(
        dir.path(),
        "slugify() in text_utils.py is still a stub. Implement it.",
        &[wrong, "Done.", cheat, "Done.", "Done."],
    )
    .await;
    let told = notes(&events);
    assert_eq!(told.len(), RETRIES, "{told:?}");
    assert!(
        told[0].contains("but it returns 'hello,-world!'"),
        "{}",
        told[0]
    );
    assert!(told[1].contains("hello-world"), "{}", told[1]);
    assert_eq!(ending(&events).0, AgentEndReason::Failed);
    // Right, it passes: the run ends completed with no note.
    std::fs::write(dir.path().join("text_utils.py"), stub).unwrap();
    let right = "text_utils.py\n```python\ndef slugify(title):\n    \"\"\"slugify(\"Hello, World!\") == \"hello-world\".\"\"\"\n    return re.sub(r\"[^a-z0-9]+\", \"-\", title.lower()).strip(\"-\")\n```";
    let (events, _) = run(
        dir.path(),
        "slugify() in text_utils.py is still a stub. Implement it.",
        &[right, "Done."],
    )
    .await;
    assert!(notes(&events).is_empty(), "{:?}", notes(&events));
    assert_eq!(ending(&events).0, AgentEndReason::Completed);
}

#[tokio::test]
async fn deleting_the_failing_assertion_does_not_make_a_test_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prices.py"),
        "def total(xs):\n    return sum(xs) - 1\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("test_prices.py"),
        "from prices import total\n\nassert total([]) == -1\nassert total([1, 2]) == 3, 'total is wrong'\nprint('ok')\n",
    )
    .unwrap();
    let weakened = "test_prices.py\n```python\nfrom prices import total\n\nassert total([]) == -1\nprint('ok')\n```";
    let (events, _) = run(
        dir.path(),
        "The tests in test_prices.py fail. Find the bug in the code and fix it. Don't change the tests.",
        &[weakened, "Done.", "Done.", "Done."],
    )
    .await;
    let notes = notes(&events);
    assert!(
        notes
            .first()
            .is_some_and(|n| n.contains("1 assertion fewer than before")),
        "{notes:?}"
    );
    assert_eq!(ending(&events).0, AgentEndReason::Failed);
}
