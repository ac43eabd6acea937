//! Compaction with the ScriptedProvider: cut points (never between a call and its result, exact keep budget),
//! the summary (sections, update of a previous one, focus, file lists), truncation fallback, compact-and-retry on
//! a context overflow, and grounding (pointers in the summary, `recall` returns the content).

use std::collections::BTreeSet;
use std::sync::Arc;

use agentd::agent::compaction::{Budget, CompactionSettings, Compactor};
use agentd::agent::context::context_tokens;
use agentd::agent::summary::{SECTIONS, SUMMARY_SYSTEM_PROMPT};
use agentd::agent::CompactionReason;
use agentd::agent::{
    agent_loop, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
    AssistantTurn, ToolResult,
};
use agentd::provider::{
    ContentBlock, ErrorKind, Message, ScriptedProvider, ScriptedReply, StopReason, ToolCall,
    ToolChoice,
};
use agentd::session::BlobStore;
use agentd::tools::recall::RecallTool;
use agentd::tools::tool::{Tool, ToolContext, ToolError};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub fn user(text: &str) -> AgentMessage {
    AgentMessage::user(text)
}

pub fn turn(content: Vec<ContentBlock>) -> AgentMessage {
    let stop_reason = if content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall(_)))
    {
        StopReason::ToolUse
    } else {
        StopReason::Stop
    };
    AgentMessage::Assistant(AssistantTurn {
        content,
        stop_reason,
        usage: Default::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 0,
    })
}

pub fn calls(list: &[(&str, &str, Value)]) -> AgentMessage {
    turn(
        list.iter()
            .map(|(id, name, args)| ContentBlock::ToolCall(ToolCall::new(*id, *name, args.clone())))
            .collect(),
    )
}

pub fn text(t: &str) -> AgentMessage {
    turn(vec![ContentBlock::Text { text: t.into() }])
}

pub fn result(id: &str, name: &str, content: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResult {
        tool_call_id: id.into(),
        tool_name: name.into(),
        content: content.into(),
        details: Value::Null,
        is_error: false,
        timestamp: 0,
    })
}

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("line {i} of the file\n")).collect()
}

pub fn context(messages: Vec<AgentMessage>) -> AgentContext {
    AgentContext {
        system_prompt: "You are a test.".into(),
        messages,
        tools: vec![],
    }
}

pub fn settings(keep: u64, summarize: bool) -> CompactionSettings {
    CompactionSettings {
        keep_recent_tokens: keep,
        reserve_tokens: 200,
        summarize,
        context_window: Some(1_000_000),
        ..CompactionSettings::default()
    }
}

fn transcript() -> Vec<AgentMessage> {
    vec![
        user("fix the build"),
        calls(&[
            ("c1", "read", json!({"path": "README.md"})),
            ("c2", "read", json!({"path": "src/a.rs"})),
        ]),
        result("c1", "read", &lines(30)),
        result("c2", "read", &lines(30)),
        text("Both read."),
        user("now edit a.rs"),
        calls(&[("c3", "edit", json!({"path": "src/a.rs", "edits": []}))]),
        result("c3", "edit", "Edited src/a.rs"),
        calls(&[("c4", "bash", json!({"command": "cargo build"}))]),
        result("c4", "bash", &lines(50)),
        text("Built."),
    ]
}

/// Every tool result kept has its call kept, and every call kept has all its results kept.
fn assert_pairs_intact(kept: &[AgentMessage]) {
    let mut call_ids = BTreeSet::new();
    let mut result_ids = BTreeSet::new();
    for m in kept {
        match m {
            AgentMessage::Assistant(a) => call_ids.extend(a.tool_calls().into_iter().map(|c| c.id)),
            AgentMessage::ToolResult(r) => {
                assert!(
                    call_ids.contains(&r.tool_call_id),
                    "result {} kept without its call",
                    r.tool_call_id
                );
                result_ids.insert(r.tool_call_id.clone());
            }
            _ => {}
        }
    }
    assert_eq!(call_ids, result_ids, "a call was kept without its result");
}

#[tokio::test]
async fn cut_points_never_separate_a_call_from_its_result_and_keep_exactly_the_budget() {
    let provider = Arc::new(ScriptedProvider::new([]));
    let cfg = AgentLoopConfig::new(provider.clone());
    let ctx = context(transcript());
    let cancel = CancellationToken::new();
    let total = context_tokens(&ctx, &ctx.messages, &cfg).await.tokens;
    let candidates = [1usize, 4, 5, 6, 8, 10];
    let placeholder = AgentMessage::CompactionSummary {
        summary: String::new(),
        tokens_before: 0,
        timestamp: 0,
    };
    let kept_tokens = |from: usize| {
        let mut m = vec![placeholder.clone()];
        m.extend(ctx.messages[from..].iter().cloned());
        m
    };
    let base = context_tokens(&ctx, std::slice::from_ref(&placeholder), &cfg)
        .await
        .tokens;
    let mut seen = BTreeSet::new();
    let mut previous_cut = usize::MAX;
    for keep in (0..=total + 40).step_by(3) {
        let c = Compactor::new(settings(keep, false))
            .compact(&ctx, &cfg, None, CompactionReason::Manual, &cancel)
            .await
            .unwrap();
        let cut = c.first_kept;
        assert!(
            candidates.contains(&cut),
            "cut {cut} is not a valid cut point"
        );
        assert!(!matches!(ctx.messages[cut], AgentMessage::ToolResult(_)));
        assert_pairs_intact(&ctx.messages[cut..]);
        assert!(cut <= previous_cut, "more budget never keeps less");
        previous_cut = cut;
        seen.insert(cut);
        // Exact: the kept part fits the budget (unless only the last cut is left), the next older cut does not.
        let fits = |from: usize| {
            let m = kept_tokens(from);
            let ctx = &ctx;
            let cfg = &cfg;
            async move { context_tokens(ctx, &m, cfg).await.tokens - base <= keep }
        };
        if cut != 10 {
            assert!(fits(cut).await, "keep {keep}: cut {cut} does not fit");
        }
        let k = candidates.iter().position(|&x| x == cut).unwrap();
        if k > 0 {
            assert!(
                !fits(candidates[k - 1]).await,
                "keep {keep}: an older cut would have fit"
            );
        }
        // Split turns: cutting after a turn's user message quotes that request.
        assert_eq!(c.details.split_turn, cut != 5, "cut {cut}");
        if cut > 5 {
            assert!(c.summary.contains("> now edit a.rs"), "{}", c.summary);
        } else if cut == 4 {
            assert!(c.summary.contains("> fix the build"), "{}", c.summary);
        }
        assert_eq!(c.tokens_before, total);
        let after = context_tokens(&ctx, &c.apply(&ctx.messages), &cfg)
            .await
            .tokens;
        assert_eq!(c.tokens_after, after);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), candidates.to_vec());
    assert_eq!(provider.requests().len(), 0, "truncation asks no model");
}

#[tokio::test]
async fn the_model_summarises_into_the_sections_and_updates_its_previous_summary() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("## Goal\nFix the build\n## Progress\nS1"),
        ScriptedReply::text_only("## Goal\nFix the build and docs\n## Progress\nS2"),
    ]));
    let cfg = AgentLoopConfig::new(provider.clone());
    let compactor = Compactor::new(settings(40, true));
    let cancel = CancellationToken::new();
    let ctx = context(transcript());
    let first = compactor
        .compact(
            &ctx,
            &cfg,
            Some("the parser"),
            CompactionReason::Manual,
            &cancel,
        )
        .await
        .unwrap();
    let requests = provider.requests();
    let req = &requests[0];
    assert_eq!(req.system.as_deref(), Some(SUMMARY_SYSTEM_PROMPT));
    assert_eq!(req.tool_choice, ToolChoice::None);
    assert_eq!(req.sampling.temperature, Some(0.0));
    let budget = Budget {
        window: 1_000_000,
        reserve: 200,
        keep_recent: 40,
    };
    assert_eq!(req.max_tokens, Some(budget.summary_tokens() as u32));
    let Message::User(prompt) = &req.messages[0] else {
        panic!("{:?}", req.messages)
    };
    assert!(
        prompt
            .content
            .starts_with("<conversation>\n[User]: fix the build"),
        "{}",
        prompt.content
    );
    assert!(prompt
        .content
        .contains("[Assistant tool calls]: read(path=\"README.md\"); read(path=\"src/a.rs\")"));
    for s in SECTIONS {
        assert!(
            prompt.content.contains(&format!("## {s}\n")),
            "section {s} missing"
        );
    }
    assert!(prompt.content.contains("Focus especially on: the parser"));
    assert!(!prompt.content.contains("<previous-summary>"));
    assert!(first.details.summarized);
    assert!(
        first
            .summary
            .starts_with("## Goal\nFix the build\n## Progress\nS1"),
        "{}",
        first.summary
    );
    assert!(
        first
            .summary
            .contains("<read-files>\nREADME.md\n</read-files>"),
        "{}",
        first.summary
    );
    assert!(
        first
            .summary
            .contains("<modified-files>\nsrc/a.rs\n</modified-files>"),
        "{}",
        first.summary
    );
    assert_eq!(first.details.modified_files, vec!["src/a.rs"]);

    // A second compaction merges new messages into the first summary; the file lists carry over exactly.
    let mut messages = first.apply(&ctx.messages);
    messages.extend([
        user("and the docs"),
        calls(&[("c5", "read", json!({"path": "docs/guide.md"}))]),
        result("c5", "read", &lines(20)),
        text("Docs read."),
        user("thanks"),
    ]);
    let ctx2 = context(messages);
    let second = compactor
        .compact(&ctx2, &cfg, None, CompactionReason::Threshold, &cancel)
        .await
        .unwrap();
    let requests = provider.requests();
    let Message::User(prompt) = &requests[1].messages[0] else {
        panic!()
    };
    assert!(
        prompt
            .content
            .contains("<previous-summary>\n## Goal\nFix the build\n## Progress\nS1"),
        "{}",
        prompt.content
    );
    assert!(
        !prompt.content.contains("<read-files>"),
        "carried lists are not shown to the model as prose"
    );
    assert!(prompt.content.contains("The conversation above is NEW"));
    assert!(
        second
            .summary
            .starts_with("## Goal\nFix the build and docs"),
        "{}",
        second.summary
    );
    assert!(
        second
            .summary
            .contains("<read-files>\nREADME.md\ndocs/guide.md\n</read-files>"),
        "{}",
        second.summary
    );
    assert!(
        second
            .summary
            .contains("<modified-files>\nsrc/a.rs\n</modified-files>"),
        "{}",
        second.summary
    );
}

#[tokio::test]
async fn summarising_disabled_or_failing_falls_back_to_truncation() {
    let cancel = CancellationToken::new();
    let ctx = context(transcript());
    let provider = Arc::new(ScriptedProvider::new([]));
    let cfg = AgentLoopConfig::new(provider.clone());
    let c = Compactor::new(settings(40, false))
        .compact(&ctx, &cfg, None, CompactionReason::Threshold, &cancel)
        .await
        .unwrap();
    assert!(!c.details.summarized);
    assert!(
        c.summary
            .contains("dropped without a summary: summarising is disabled"),
        "{}",
        c.summary
    );
    assert!(c.summary.contains("- fix the build"), "{}", c.summary);

    let failing = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().fail(ErrorKind::Server, "boom")
    ]));
    let cfg = AgentLoopConfig::new(failing.clone());
    let compactor = Compactor::new(settings(40, true));
    let c = compactor
        .compact(&ctx, &cfg, None, CompactionReason::Threshold, &cancel)
        .await
        .unwrap();
    assert!(!c.details.summarized);
    let why = c.details.fallback_reason.clone().unwrap();
    assert!(
        why.starts_with("summarising failed") && why.contains("boom"),
        "{why}"
    );
    assert!(
        c.summary.contains("<modified-files>\nsrc/a.rs"),
        "the lists survive a fallback: {}",
        c.summary
    );
    assert_eq!(
        compactor
            .stats()
            .summary_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(c.tokens_after < c.tokens_before);

    // Nothing to compact: a single message.
    let one = context(vec![user("hi")]);
    let err = compactor
        .compact(&one, &cfg, None, CompactionReason::Manual, &cancel)
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("nothing to compact"), "{err}");
}

async fn run(prompt: &str, ctx: AgentContext, cfg: AgentLoopConfig) -> Vec<AgentEvent> {
    agent_loop(vec![user(prompt)], ctx, cfg, CancellationToken::new())
        .collect()
        .await
}

fn overflow_config(provider: &Arc<ScriptedProvider>) -> AgentLoopConfig {
    let mut cfg = AgentLoopConfig::new(provider.clone());
    cfg.context_policy = Some(Arc::new(Compactor::new(settings(40, true))));
    cfg
}

#[tokio::test]
async fn a_context_overflow_compacts_and_retries_once() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().fail(ErrorKind::ContextOverflow, "prompt is too long"),
        ScriptedReply::text_only("## Goal\nFix the build"),
        ScriptedReply::text_only("recovered"),
    ]));
    let events = run("go on", context(transcript()), overflow_config(&provider)).await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.name())
        .filter(|n| *n != "message_update")
        .collect();
    // The failed attempt is never announced: prompt, compaction, then one assistant message.
    assert_eq!(
        names,
        vec![
            "agent_start",
            "turn_start",
            "message_start",
            "message_end",
            "compaction",
            "message_start",
            "message_end",
            "turn_end",
            "agent_end"
        ]
    );
    let compaction = events.iter().find_map(|e| match e {
        AgentEvent::Compaction {
            reason,
            first_kept,
            tokens_before,
            tokens_after,
            ..
        } => Some((*reason, *first_kept, *tokens_before, *tokens_after)),
        _ => None,
    });
    let (reason, first_kept, before, after) = compaction.unwrap();
    assert_eq!(reason, CompactionReason::Overflow);
    assert!(
        first_kept > 0 && after < before,
        "{first_kept} {before} {after}"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].system.as_deref(), Some(SUMMARY_SYSTEM_PROMPT));
    let Message::User(first) = &requests[2].messages[0] else {
        panic!()
    };
    assert!(
        first.content.contains("<summary>\n## Goal\nFix the build"),
        "{}",
        first.content
    );
    assert!(matches!(
        events.last(),
        Some(AgentEvent::AgentEnd {
            reason: AgentEndReason::Completed,
            ..
        })
    ));

    // Only once: a second overflow ends the run with the error.
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().fail(ErrorKind::ContextOverflow, "prompt is too long"),
        ScriptedReply::text_only("## Goal\nG"),
        ScriptedReply::new().fail(ErrorKind::ContextOverflow, "still too long"),
    ]));
    let events = run("go on", context(transcript()), overflow_config(&provider)).await;
    assert_eq!(
        events.iter().filter(|e| e.name() == "compaction").count(),
        1
    );
    match events.last() {
        Some(AgentEvent::AgentEnd {
            reason: AgentEndReason::Error,
            error: Some(e),
            ..
        }) => assert!(e.contains("still too long"), "{e}"),
        e => panic!("{e:?}"),
    }
    assert_eq!(provider.requests().len(), 3);

    // Without a policy the overflow is an ordinary error turn.
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().fail(ErrorKind::ContextOverflow, "too long")
    ]));
    let events = run(
        "go on",
        context(transcript()),
        AgentLoopConfig::new(provider.clone()),
    )
    .await;
    assert!(matches!(
        events.last(),
        Some(AgentEvent::AgentEnd {
            reason: AgentEndReason::Error,
            ..
        })
    ));
    assert_eq!(
        events.iter().filter(|e| e.name() == "message_end").count(),
        2
    );
}

/// The `[ref:…]` values in a summary.
pub fn refs_in(summary: &str) -> Vec<String> {
    summary
        .split("[ref:")
        .skip(1)
        .filter_map(|s| s.split(']').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn dropped_tool_results_are_grounded_and_recall_returns_them() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::beside(dir.path());
    let file = lines(240);
    let messages = vec![
        user("look at lib.rs"),
        calls(&[("c1", "read", json!({"path": "src/lib.rs"}))]),
        result("c1", "read", &file),
        calls(&[("c2", "bash", json!({"command": "false"}))]),
        AgentMessage::ToolResult(ToolResult {
            tool_call_id: "c2".into(),
            tool_name: "bash".into(),
            content: "exit code 1".into(),
            details: Value::Null,
            is_error: true,
            timestamp: 0,
        }),
        text("Read it."),
        user("next"),
        text("ok"),
    ];
    let provider = Arc::new(ScriptedProvider::new([]));
    let cfg = AgentLoopConfig::new(provider);
    let c = Compactor::new(settings(10, false))
        .with_blobs(blobs.clone())
        .compact(
            &context(messages),
            &cfg,
            None,
            CompactionReason::Manual,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let refs = refs_in(&c.summary);
    assert_eq!(refs.len(), 2, "{}", c.summary);
    assert!(
        c.summary.contains(&format!(
            "[ref:{}] read(path=\"src/lib.rs\") — 240 lines",
            refs[0]
        )),
        "{}",
        c.summary
    );
    assert!(
        c.summary.contains(&format!(
            "[ref:{}] bash(command=\"false\") — 1 line (error)",
            refs[1]
        )),
        "{}",
        c.summary
    );
    assert!(
        c.summary.contains("call the `recall` tool"),
        "{}",
        c.summary
    );
    assert_eq!(c.details.refs.len(), 2);
    assert!(dir.path().join("refs").is_dir());

    let recall = RecallTool::new(blobs);
    let ctx = ToolContext::new(dir.path());
    let out = recall.call(json!({"ref": refs[0]}), &ctx).await.unwrap();
    assert_eq!(out.content, file);
    assert_eq!(out.details["lines"], 240);
    let out = recall
        .call(json!({"ref": format!("[ref:{}]", refs[1])}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.content, "exit code 1");
    match recall.call(json!({"ref": "ffffff"}), &ctx).await {
        Err(ToolError::RespondToModel(m)) => assert!(
            m.contains("no stored tool result matches ref `ffffff`"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(recall.spec().name, "recall");
    assert_eq!(recall.spec().parameters["required"], json!(["ref"]));
}
