//! The agent loop on the real local model (a forced `read` reaches the next turn), and a steer that races the
//! end of a run.

use super::*;

struct OneFileRead {
    spec: ToolSpec,
    inner: agentd::tools::read::ReadTool,
}

#[async_trait]
impl Tool for OneFileRead {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn tags(&self) -> &[PolicyTag] {
        self.inner.tags()
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.inner.call(args, ctx).await
    }
}

/// End to end with the real local model: a forced tool call runs the real `read` tool, and its result is in the
/// transcript the model sees on the next turn.
#[cfg(feature = "local")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_model_forced_read_reaches_the_next_turn() {
    use agentd::provider::LocalProvider;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "The secret word is PINEAPPLE.\n",
    )
    .unwrap();
    let provider = Arc::new(LocalProvider::new(crate::suite::common::engine().clone()));
    let mut cfg = AgentLoopConfig::new(provider);
    cfg.cwd = dir.path().to_path_buf();
    cfg.workspace = Some(dir.path().to_path_buf());
    cfg.sampling = agentd::provider::Sampling::greedy();
    cfg.max_tokens = Some(48);
    // Force `read` until a tool result exists, then let the model answer in text.
    cfg.harness = Some(Arc::new(ReadFirst));
    let seen: Arc<Mutex<Vec<Vec<AgentMessage>>>> = Arc::default();
    let s = seen.clone();
    cfg.transform_context = Some(Arc::new(move |messages: Vec<AgentMessage>| {
        s.lock().unwrap().push(messages.clone());
        Box::pin(async move { messages })
    }));
    // The real `read` tool behind a schema that names the one file, so the greedy model cannot pick a wrong path
    // (the test is about the pipeline, not the 135M model's path guessing).
    let read: Arc<dyn Tool> = Arc::new(OneFileRead {
        spec: ToolSpec::new(
            "read",
            "Read a file",
            json!({"type": "object", "properties": {"path": {"type": "string", "enum": ["notes.txt"]}},
                   "required": ["path"], "additionalProperties": false}),
        )
        .unwrap(),
        inner: agentd::tools::read::ReadTool::new(),
    });
    let ctx = AgentContext {
        system_prompt: "You are a helpful assistant.".into(),
        messages: vec![],
        tools: vec![read],
    };
    let events = run_loop(
        "Read the file notes.txt and tell me the secret word.",
        ctx,
        cfg,
    )
    .await;
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    let (_, content, is_error) = &results[0];
    assert!(!is_error, "{content}");
    assert!(content.contains("PINEAPPLE"), "{content}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "two model calls");
    let second_turn_saw_result = seen[1]
        .iter()
        .any(|m| matches!(m, AgentMessage::ToolResult(r) if r.content.contains("PINEAPPLE")));
    assert!(second_turn_saw_result);
}

/// A steer sent after the loop's last look at its queues (here: from the `agent_end` listener, which the run
/// awaits before it ends) is still delivered — the run goes once more — and the caller is told so; a steer sent
/// to an idle agent says it was not delivered, waits, and `continue_` runs it.
#[tokio::test]
async fn a_steer_that_arrives_as_the_run_ends_is_delivered_and_an_idle_one_waits_for_continue() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("first"),
        ScriptedReply::text_only("late steer answered"),
        ScriptedReply::text_only("idle steer answered"),
    ]));
    let agent = Agent::new(config(&provider), "", vec![]);
    let accepted: Arc<Mutex<Vec<bool>>> = Arc::default();
    let ends = Arc::new(AtomicUsize::new(0));
    let (a, acc, n) = (agent.clone(), accepted.clone(), ends.clone());
    agent.subscribe(Arc::new(move |ev: AgentEvent| {
        let (a, acc, n) = (a.clone(), acc.clone(), n.clone());
        Box::pin(async move {
            if matches!(ev, AgentEvent::AgentEnd { .. }) && n.fetch_add(1, Ordering::SeqCst) == 0 {
                acc.lock()
                    .unwrap()
                    .push(a.steer(AgentMessage::user("late")));
            }
        })
    }));
    let reason = agent.prompt(AgentMessage::user("start")).await.unwrap();
    assert_eq!(reason, AgentEndReason::Completed);
    assert_eq!(*accepted.lock().unwrap(), vec![true]);
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2, "the late steer got its own pass");
    assert_eq!(reqs[1].messages.last(), Some(&Message::user("late")));
    assert!(!agent.has_queued());
    assert!(!agent.state().is_running());

    // Idle: not delivered, kept, and continue_ runs it although the assistant spoke last.
    assert!(!agent.steer(AgentMessage::user("while idle")));
    assert!(agent.has_queued());
    assert_eq!(provider.requests().len(), 2, "nothing ran by itself");
    agent.continue_().await.unwrap();
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[2].messages.last(), Some(&Message::user("while idle")));
    assert!(!agent.has_queued());
}

/// Forces `read` until a tool result exists, then lets the model answer in text.
struct ReadFirst;

#[async_trait::async_trait]
impl agentd::agent::LoopHarness for ReadFirst {
    fn tool_choice(&self, messages: &[AgentMessage]) -> Option<agentd::provider::ToolChoice> {
        use agentd::provider::ToolChoice;
        let read = messages
            .iter()
            .any(|m| matches!(m, AgentMessage::ToolResult(_)));
        Some(if read {
            ToolChoice::None
        } else {
            ToolChoice::Tool {
                name: "read".into(),
            }
        })
    }
}
