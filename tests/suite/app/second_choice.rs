//! The blocks session's reply revision through the real agent loop, the real `write_block` and `bash` tools and
//! real files, with a scripted provider that reports log-probabilities: a block that changed nothing is followed
//! by a reply that starts from the model's least certain token with its runner-up (an assistant prefill, the
//! scripted model continuing it), and a run about to end without the file its task asks for gets one more turn
//! that starts with that file's block — once.

use std::path::Path;
use std::sync::Arc;

use agentd::agent::{
    agent_loop, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
};
use agentd::app::harness::blocks as edit_format;
use agentd::app::harness::rules::second_choice::ALTERNATIVES;
use agentd::app::harness::RuleId;
use agentd::provider::{
    ContentBlock, Message, ScriptedProvider, ScriptedReply, TokenLogprob, TopLogprob,
};
use agentd::tools::bash::BashTool;
use agentd::tools::support::workspace::WorkspaceState;
use agentd::tools::tool::Tool;
use agentd::tools::write_block::WriteBlockTool;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

/// Runs `task` as a blocks session in `dir` with the loop rules and the revision, the scripted model answering
/// `replies` in order (then "Done.").
async fn run(
    dir: &Path,
    task: &str,
    replies: Vec<ScriptedReply>,
) -> (Vec<AgentEvent>, ScriptedProvider) {
    let mut replies = replies;
    replies.push(ScriptedReply::text_only("Done."));
    let provider = ScriptedProvider::new(replies).with_logprobs();
    let mut config = AgentLoopConfig::new(Arc::new(provider.clone()));
    config.cwd = dir.to_path_buf();
    let state = WorkspaceState::new(dir);
    let mut named = Vec::new();
    for rel in state.listing().files {
        state.saw(&dir.join(&rel));
        let text = std::fs::read_to_string(dir.join(&rel)).unwrap();
        named.push((rel, text));
    }
    let tools: Vec<Arc<dyn Tool>> =
        vec![Arc::new(WriteBlockTool::new()), Arc::new(BashTool::new())];
    // The self-check has its own tests.
    let off = [RuleId::SelfCheck];
    super::blocks_harness(&mut config, dir, state, &tools, &off, (task, &named));
    let context = AgentContext {
        system_prompt: edit_format::instructions(true),
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

/// `text` as tokens of a few characters each, every one sure of itself, except the pieces in `unsure`
/// (token, runner-up, how far behind).
fn traced(text: &str, unsure: &[(&str, &str, f32)]) -> Vec<TokenLogprob> {
    let mut pieces: Vec<(String, Option<(String, f32)>)> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some((tok, alt, gap)) = unsure.iter().find(|(t, _, _)| rest.starts_with(t)) {
            pieces.push((tok.to_string(), Some((alt.to_string(), *gap))));
            rest = &rest[tok.len()..];
            continue;
        }
        let n = rest
            .char_indices()
            .nth(3)
            .map_or(rest.len(), |(i, _)| i)
            .min(
                unsure
                    .iter()
                    .filter_map(|(t, _, _)| rest[1..].find(t).map(|i| i + 1))
                    .min()
                    .unwrap_or(rest.len()),
            );
        pieces.push((rest[..n].to_string(), None));
        rest = &rest[n..];
    }
    let top = |t: &str, l: f32| TopLogprob {
        id: None,
        token: t.into(),
        bytes: t.as_bytes().to_vec(),
        logprob: l,
    };
    pieces
        .into_iter()
        .map(|(tok, alt)| {
            let mut alts = vec![top(&tok, -0.05)];
            match alt {
                Some((a, gap)) => alts.push(top(&a, -0.05 - gap)),
                // A blank line more is always close, and never code.
                None => alts.push(top("\n\n", -0.3)),
            }
            TokenLogprob {
                id: None,
                token: tok.clone(),
                bytes: tok.into_bytes(),
                logprob: -0.05,
                top: alts,
            }
        })
        .collect()
}

fn assistant_texts(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::MessageEnd {
                message: AgentMessage::Assistant(a),
            } => Some(a.text()),
            _ => None,
        })
        .collect()
}

fn end_reason(events: &[AgentEvent]) -> Option<AgentEndReason> {
    events.iter().find_map(|e| match e {
        AgentEvent::AgentEnd { reason, .. } => Some(*reason),
        _ => None,
    })
}

fn prefill_of(m: Option<&Message>) -> Option<String> {
    match m? {
        Message::Assistant(a) => match a.content.as_slice() {
            [ContentBlock::Text { text }] => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[tokio::test]
async fn a_block_that_changed_nothing_is_continued_from_the_runner_up_of_its_least_certain_token() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let copy = format!("calc.py\n```python\n{CALC}```");
    // `add`'s minus is the least sure token (a plus 0.8 behind); `sub`'s minus is surer (3.0 behind).
    let mut lp = traced(&copy[..copy.find("def sub").unwrap()], &[(" -", " +", 0.8)]);
    lp.extend(traced(
        &copy[copy.find("def sub").unwrap()..],
        &[(" -", " +", 3.0)],
    ));
    let replies = vec![
        ScriptedReply::new().logprobs(lp).text(copy.clone()),
        // The scripted model continues the prefill it is given.
        ScriptedReply::text_only(" b\n```"),
    ];
    let (events, provider) = run(
        dir.path(),
        "add(a, b) in calc.py must return the sum. Fix it.",
        replies,
    )
    .await;
    let requests = provider.requests();
    assert_eq!(requests[0].logprobs, Some(ALTERNATIVES));
    let prefill = "calc.py\n```python\ndef add(a, b):\n    return a +";
    assert_eq!(
        prefill_of(requests[1].messages.last()).as_deref(),
        Some(prefill)
    );
    // The reply is the prefill and its continuation, one message; the block in it landed.
    let texts = assistant_texts(&events);
    assert_eq!(texts[1], format!("{prefill} b\n```"));
    let now = std::fs::read_to_string(dir.path().join("calc.py")).unwrap();
    assert_eq!(now, CALC.replacen("a - b", "a + b", 1));
    // The reply that changed nothing and its failure stay in the transcript the model sees next.
    let last = requests.last().unwrap();
    let shown: String = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect();
    assert!(shown.contains("is the same as the file"), "{shown}");
    assert_eq!(end_reason(&events), Some(AgentEndReason::Completed));
}

#[tokio::test]
async fn no_prefill_without_log_probabilities_or_a_block_that_changed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let fix = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```";
    let replies = vec![ScriptedReply::new()
        .logprobs(traced(fix, &[(" +", " -", 0.1)]))
        .text(fix)];
    let (_, provider) = run(dir.path(), "Fix add in calc.py.", replies).await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(prefill_of(requests[1].messages.last()), None);

    // A copy traced by nothing (a provider without log-probabilities): answered as before, no prefill.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    let copy = format!("calc.py\n```python\n{CALC}```");
    let (_, provider) = run(
        dir.path(),
        "Fix add in calc.py.",
        vec![ScriptedReply::text_only(copy)],
    )
    .await;
    assert_eq!(prefill_of(provider.requests()[1].messages.last()), None);
}

#[tokio::test]
async fn a_run_about_to_end_without_the_file_its_task_asks_for_gets_one_turn_that_starts_with_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), "id\n1\n2\n").unwrap();
    let task = "Count the lines of data.csv and write the count into a new file count.txt.";
    let replies = vec![
        ScriptedReply::text_only("```bash\nwc -l < data.csv\n```"),
        ScriptedReply::text_only("The task is done."),
        ScriptedReply::text_only("3\n```"),
    ];
    let (events, provider) = run(dir.path(), task, replies).await;
    let requests = provider.requests();
    let third = &requests[2];
    assert_eq!(
        prefill_of(third.messages.last()).as_deref(),
        Some("count.txt\n```\n")
    );
    let note = third.messages.iter().rev().find_map(|m| match m {
        Message::User(u) => Some(u.content.clone()),
        _ => None,
    });
    assert_eq!(
        note.as_deref(),
        Some("count.txt does not exist yet, and the task asks for it.")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("count.txt")).unwrap(),
        "3\n"
    );
    // data.csv, the file the count came from, is not asked about after count.txt was created.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data.csv")).unwrap(),
        "id\n1\n2\n"
    );
    assert_eq!(end_reason(&events), Some(AgentEndReason::Completed));
}

#[tokio::test]
async fn the_missing_file_turn_is_given_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), "id\n1\n").unwrap();
    let task = "Write the number of rows of data.csv into a new file rows.txt.";
    let replies = vec![
        ScriptedReply::text_only("The task is done."),
        // The continuation never closes the block: no call, and the run ends.
        ScriptedReply::text_only("I could not count them."),
    ];
    let (events, provider) = run(dir.path(), task, replies).await;
    // The first reply, the one extra turn, and the scripted "Done." is never asked for.
    assert_eq!(provider.requests().len(), 2);
    assert_eq!(provider.remaining(), 1);
    assert!(!dir.path().join("rows.txt").exists());
    assert_eq!(end_reason(&events), Some(AgentEndReason::Completed));

    // A task that asks for no new file ends as it is.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), "id\n1\n").unwrap();
    let (_, provider) = run(
        dir.path(),
        "How many rows does data.csv have?",
        vec![ScriptedReply::text_only("One.")],
    )
    .await;
    assert_eq!(provider.requests().len(), 1);
}
