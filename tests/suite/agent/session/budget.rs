//! The exact context budget: counts are the provider's count of the rendered prompt (checked against the real
//! engine), a long scripted run stays under the window at every turn (and fails without the policy), and the
//! Recorder keeps a JsonlStore in step with an Agent through compactions, manual compaction and tree operations.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentd::agent::context::{context_tokens, prompt_request};
use agentd::agent::hooks::ContextPolicy;
use agentd::agent::summary::SUMMARY_SYSTEM_PROMPT;
use agentd::agent::{
    Agent, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig, AgentMessage,
};
use agentd::agent::{CompactionReason, CompactionSettings, Compactor};
use agentd::app::Recorder;
use agentd::provider::{
    collect, estimate_tokens, CompletionRequest, ErrorKind, LocalProvider, ModelDescriptor,
    Provider, ProviderError, ProviderStream, Sampling, ScriptedProvider, ScriptedReply, TokenCount,
};
use agentd::schema::ToolSpec;
use agentd::session::{EntryKind, JsonlStore, SessionStore, StoreOptions};
use agentd::tools::read::ReadTool;
use agentd::tools::recall::RecallTool;
use agentd::tools::tool::{PolicyTag, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::compaction::{calls, result, text, user};
use super::llm_view;
use crate::suite::common;

/// A model with a small window: agent requests get one `read` call per turn for `turns` turns, then a final
/// text; summarisation requests get a short summary. Requests over the window fail as a real server's would.
struct SmallWindow {
    inner: ScriptedProvider,
    window: u64,
    turns: usize,
    taken: AtomicUsize,
    /// (is a summarisation request, exact size) of every request.
    sizes: Mutex<Vec<(bool, u64)>>,
}

impl SmallWindow {
    fn new(window: u64, turns: usize) -> Self {
        Self {
            inner: ScriptedProvider::new([]),
            window,
            turns,
            taken: AtomicUsize::new(0),
            sizes: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Provider for SmallWindow {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let size = estimate_tokens(&request);
        let summary = request.system.as_deref() == Some(SUMMARY_SYSTEM_PROMPT);
        self.sizes.lock().unwrap().push((summary, size));
        let reply = if size + u64::from(request.max_tokens.unwrap_or(0)) > self.window {
            ScriptedReply::new().fail(
                ErrorKind::ContextOverflow,
                format!("{size} tokens do not fit {}", self.window),
            )
        } else if summary {
            ScriptedReply::text_only(
                "## Goal\nRead every file\n## Progress\nReading files one by one.",
            )
        } else {
            let n = self.taken.fetch_add(1, Ordering::SeqCst);
            if n < self.turns {
                ScriptedReply::new().tool_call("read", format!(r#"{{"path": "f{n}.txt"}}"#))
            } else {
                ScriptedReply::text_only("All files read.")
            }
        };
        self.inner.push(reply);
        self.inner.stream(request, cancel)
    }

    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        self.inner.count_tokens(request).await
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        vec![ModelDescriptor {
            id: "small".into(),
            context_window: self.window,
            max_output_tokens: 256,
            device: None,
        }]
    }
}

/// `read` that returns 30 lines naming the file.
struct FakeRead(ToolSpec);

impl FakeRead {
    fn new() -> Self {
        Self(ToolSpec::new("read", "Read a file.", json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})).unwrap())
    }
}

#[async_trait]
impl Tool for FakeRead {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = args["path"].as_str().unwrap_or_default();
        Ok(ToolOutput::new(
            (1..=30)
                .map(|i| format!("{path} line {i}\n"))
                .collect::<String>(),
            Value::Null,
        ))
    }
}

fn small_settings() -> CompactionSettings {
    CompactionSettings {
        reserve_tokens: 1_000,
        keep_recent_tokens: 1_000,
        ..CompactionSettings::default()
    }
}

#[tokio::test]
async fn a_long_run_stays_under_the_window_at_every_turn() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(
        JsonlStore::create(
            dir.path(),
            std::path::Path::new("/w"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    let provider = Arc::new(SmallWindow::new(4_000, 60));
    let compactor = Arc::new(Compactor::new(small_settings()).with_blobs(store.blobs()));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.max_turns = 100;
    config.context_policy = Some(compactor.clone());
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(FakeRead::new()),
        Arc::new(RecallTool::new(store.blobs())),
    ];
    let agent = Agent::new(config, "You read files.", tools);
    let recorder = Recorder::attach(&agent, store.clone()).unwrap();
    let compactions = Arc::new(Mutex::new(Vec::new()));
    let seen = compactions.clone();
    agent.subscribe(Arc::new(move |ev| {
        if let AgentEvent::Compaction {
            tokens_before,
            tokens_after,
            ..
        } = &ev
        {
            seen.lock().unwrap().push((*tokens_before, *tokens_after));
        }
        async {}.boxed()
    }));
    let reason = agent
        .prompt(AgentMessage::user("Read f0.txt to f59.txt."))
        .await
        .unwrap();
    assert_eq!(reason, AgentEndReason::Completed);
    assert_eq!(recorder.last_error(), None);

    let budget = compactor.budget(&AgentLoopConfig::new(provider.clone()));
    let limit = budget.limit();
    assert_eq!(limit, 3_000);
    let sizes = provider.sizes.lock().unwrap().clone();
    let agent_sizes: Vec<u64> = sizes.iter().filter(|(s, _)| !s).map(|(_, n)| *n).collect();
    assert_eq!(agent_sizes.len(), 61, "every turn reached the model once");
    let max = *agent_sizes.iter().max().unwrap();
    assert!(
        max <= limit,
        "a turn sent {max} tokens, over window − reserve = {limit}: {agent_sizes:?}"
    );
    let compactions = compactions.lock().unwrap().clone();
    assert!(compactions.len() >= 3, "{compactions:?}");
    for (before, after) in &compactions {
        assert!(*before > limit && *after <= limit, "{before} -> {after}");
    }
    println!(
        "long run: 61 turns, {} compactions {:?}, largest prompt {max} of limit {limit}, {} summary requests",
        compactions.len(),
        compactions,
        sizes.iter().filter(|(s, _)| *s).count()
    );

    // The session file holds every message and compaction; rebuilt from it, the model sees what the agent has.
    let path = dir
        .path()
        .read_dir()
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    drop(recorder);
    let reopened = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    let stored: Vec<_> = reopened
        .entries()
        .into_iter()
        .filter(|e| matches!(e.kind, EntryKind::Compaction { .. }))
        .collect();
    assert_eq!(stored.len(), compactions.len());
    for e in &stored {
        let EntryKind::Compaction {
            first_kept_entry_id,
            details,
            ..
        } = &e.kind
        else {
            unreachable!()
        };
        assert!(matches!(
            reopened.entry(first_kept_entry_id).unwrap().kind,
            EntryKind::Message { .. }
        ));
        assert!(
            details["refs"].as_array().is_some_and(|r| !r.is_empty()),
            "{details}"
        );
    }
    let ctx = reopened.build_context(None).unwrap();
    assert_eq!(llm_view(&ctx.messages), llm_view(&agent.state().messages));
    // Grounding: a ref of the latest summary is readable with `recall`.
    let AgentMessage::CompactionSummary { summary, .. } = &ctx.messages[0] else {
        panic!("{:?}", ctx.messages[0])
    };
    let r = super::compaction::refs_in(summary).pop().unwrap();
    let out = RecallTool::new(reopened.blobs())
        .call(json!({"ref": r}), &ToolContext::new(dir.path()))
        .await
        .unwrap();
    assert!(out.content.contains(" line 30\n"), "{}", out.content);
}

#[tokio::test]
async fn without_the_policy_the_same_run_overflows() {
    let provider = Arc::new(SmallWindow::new(4_000, 60));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.max_turns = 100;
    let agent = Agent::new(config, "You read files.", vec![Arc::new(FakeRead::new())]);
    let reason = agent
        .prompt(AgentMessage::user("Read f0.txt to f59.txt."))
        .await
        .unwrap();
    assert_eq!(reason, AgentEndReason::Error);
    assert!(agent
        .state()
        .last_error
        .unwrap()
        .contains("do not fit 4000"));
}

#[tokio::test]
async fn manual_compaction_and_tree_operations_through_the_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(
        JsonlStore::create(
            dir.path(),
            std::path::Path::new("/w"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("one done"),
        ScriptedReply::text_only("two done"),
        ScriptedReply::text_only("three done"),
        ScriptedReply::text_only("## Goal\nCount to three"),
        ScriptedReply::text_only("four done"),
    ]));
    let agent = Agent::new(AgentLoopConfig::new(provider.clone()), "You count.", vec![]);
    let recorder = Recorder::attach(&agent, store.clone()).unwrap();
    for p in ["one", "two", "three"] {
        agent.prompt(AgentMessage::user(p)).await.unwrap();
    }
    assert_eq!(agent.state().messages.len(), 6);
    assert_eq!(recorder.entry_ids().len(), 6);
    let compactor = Compactor::new(CompactionSettings {
        keep_recent_tokens: 12,
        context_window: Some(100_000),
        ..CompactionSettings::default()
    });
    let c = recorder
        .compact(&agent, &compactor, Some("the numbers"))
        .await
        .unwrap();
    assert_eq!(c.reason, CompactionReason::Manual);
    let last = provider.requests().last().unwrap().clone();
    assert!(format!("{:?}", last.messages).contains("Focus especially on: the numbers"));
    let state = agent.state();
    assert!(
        matches!(&state.messages[0], AgentMessage::CompactionSummary { summary, .. } if summary.starts_with("## Goal\nCount to three"))
    );
    assert_eq!(state.messages.len(), 6 - c.first_kept + 1);
    let entries = store.entries();
    let EntryKind::Compaction {
        first_kept_entry_id,
        tokens_before,
        ..
    } = &entries.last().unwrap().kind
    else {
        panic!()
    };
    assert_eq!(*tokens_before, c.tokens_before);
    assert_eq!(&recorder.entry_ids()[1], first_kept_entry_id);
    assert_eq!(
        llm_view(&store.build_context(None).unwrap().messages),
        llm_view(&state.messages)
    );

    // The conversation goes on after the compaction entry.
    agent.prompt(AgentMessage::user("four")).await.unwrap();
    assert_eq!(
        llm_view(&store.build_context(None).unwrap().messages),
        llm_view(&agent.state().messages)
    );

    // Rewind two messages: the agent's transcript follows; the next prompt branches.
    recorder.rewind(&agent, 2).unwrap();
    assert_eq!(llm_view(&agent.state().messages), llm_view(&state.messages));
    let leaf_before = store.leaf();
    // Check out the abandoned leaf again.
    let abandoned = entries_last_message(&*store);
    recorder.checkout(&agent, &abandoned).unwrap();
    assert!(
        matches!(agent.state().messages.last(), Some(AgentMessage::Assistant(a)) if a.text() == "four done")
    );
    recorder
        .branch(&agent, leaf_before.as_deref(), Some("tried four".into()))
        .await
        .unwrap();
    assert!(
        matches!(agent.state().messages.last(), Some(AgentMessage::BranchSummary { summary, .. }) if summary == "tried four")
    );
    recorder.set_model(&agent, "local", "qwen").await.unwrap();
    assert_eq!(agent.state().model, "qwen");
    assert_eq!(
        store.build_context(None).unwrap().model.unwrap().model_id,
        "qwen"
    );
}

fn entries_last_message(store: &dyn SessionStore) -> String {
    store
        .entries()
        .iter()
        .rev()
        .find(|e| matches!(e.kind, EntryKind::Message { .. }))
        .unwrap()
        .id
        .clone()
}

#[tokio::test]
async fn context_tokens_are_the_engines_exact_count() {
    let local = LocalProvider::new(common::engine().clone());
    let provider: Arc<dyn Provider> = Arc::new(local.clone());
    let mut config = AgentLoopConfig::new(provider.clone());
    config.sampling = Sampling::greedy();
    config.max_tokens = Some(1);
    let messages = vec![
        user("What is in Cargo.toml?"),
        calls(&[("call_1", "read", json!({"path": "Cargo.toml"}))]),
        result(
            "call_1",
            "read",
            &(0..60)
                .map(|i| format!("dep{i} = \"1.{i}\"\n"))
                .collect::<String>(),
        ),
        text("It names the package demo."),
        user("Thanks. Anything else?"),
    ];
    let ctx = AgentContext {
        system_prompt: "You are terse.".into(),
        messages,
        tools: vec![Arc::new(ReadTool::new())],
    };
    let n = context_tokens(&ctx, &ctx.messages, &config).await;
    assert!(n.exact);
    let request = prompt_request(&ctx, &ctx.messages, &config);
    assert_eq!(
        n.tokens,
        local.prompt_tokens(&request).unwrap().len() as u64
    );
    let done = collect(provider.stream(request, CancellationToken::new())).await;
    assert_eq!(done.error, None);
    assert_eq!(
        done.usage.input, n.tokens,
        "the count is the prompt the engine was given"
    );
    // The tools block and the system prompt are part of the count.
    let bare = AgentContext {
        system_prompt: String::new(),
        tools: vec![],
        ..ctx.clone()
    };
    let without = context_tokens(&bare, &bare.messages, &config).await.tokens;
    assert!(without + 50 < n.tokens, "{without} vs {}", n.tokens);

    // The budget check uses the same exact count, and compaction reports exact sizes before and after.
    let compactor = Compactor::new(CompactionSettings {
        context_window: Some(n.tokens + 20),
        reserve_tokens: 40,
        keep_recent_tokens: 10,
        summarize: false,
        ..CompactionSettings::default()
    });
    let c = compactor
        .check(&ctx, &config, &CancellationToken::new())
        .await
        .expect("over budget");
    assert_eq!(
        compactor
            .stats()
            .last_context_tokens
            .load(Ordering::Relaxed),
        n.tokens
    );
    assert_eq!(c.tokens_before, n.tokens);
    let after = prompt_request(&ctx, &c.apply(&ctx.messages), &config);
    assert_eq!(
        c.tokens_after,
        local.prompt_tokens(&after).unwrap().len() as u64
    );
    assert!(c.tokens_after < c.tokens_before);
}

#[tokio::test]
async fn the_real_model_writes_a_summary() {
    let provider: Arc<dyn Provider> = Arc::new(LocalProvider::new(common::engine().clone()));
    let config = AgentLoopConfig::new(provider);
    let messages = vec![
        user("Rename the function parse_line to parse_record in src/parser.rs."),
        calls(&[("call_1", "read", json!({"path": "src/parser.rs"}))]),
        result(
            "call_1",
            "read",
            "pub fn parse_line(s: &str) -> Record {\n    todo!()\n}\n",
        ),
        text("I will rename it now."),
        user("Also keep the old name as an alias."),
        text("Understood."),
    ];
    let ctx = AgentContext {
        system_prompt: "You are a coding assistant.".into(),
        messages,
        tools: vec![],
    };
    let compactor = Compactor::new(CompactionSettings {
        context_window: Some(2_048),
        reserve_tokens: 160,
        keep_recent_tokens: 8,
        ..CompactionSettings::default()
    });
    let started = std::time::Instant::now();
    let c = compactor
        .compact(
            &ctx,
            &config,
            None,
            CompactionReason::Manual,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    println!(
        "real-model summary ({:.1}s):\n{}",
        started.elapsed().as_secs_f64(),
        c.summary
    );
    assert!(c.details.summarized, "{:?}", c.details.fallback_reason);
    assert!(
        c.summary
            .contains("<read-files>\nsrc/parser.rs\n</read-files>"),
        "{}",
        c.summary
    );
    assert!(c.tokens_after > 0);
}
