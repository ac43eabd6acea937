//! The agent loop and `Agent` with the ScriptedProvider: exact event sequences, tool pipeline rules, steering,
//! follow-ups, hooks, limits and abort.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentd::agent::hooks::MessageSource;
use agentd::agent::run::{CUT_BY_LENGTH, SKIPPED_FOR_STEERING};
use agentd::agent::{
    agent_loop, AfterToolCall, Agent, AgentContext, AgentEndReason, AgentEvent, AgentLoopConfig,
    AgentMessage, BeforeToolCall,
};
use agentd::agent::{AgentError, AgentStatus};
use agentd::provider::{
    CompletionRequest, ErrorKind, Message, ScriptedProvider, ScriptedReply, StopReason,
};
use agentd::schema::ToolSpec;
use agentd::tools::tool::{PolicyTag, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

mod real_model_and_races;

/// A test tool: sleeps `ms` (from its arguments), records when it ran, echoes its `text` argument.
struct Probe {
    spec: ToolSpec,
    tags: Vec<PolicyTag>,
    running: Arc<AtomicUsize>,
    max_running: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    on_call: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Probe {
    fn new(name: &str, tags: &[PolicyTag]) -> Self {
        Self {
            spec: ToolSpec::new(
                name,
                "test tool",
                json!({"type": "object", "properties": {"text": {"type": "string"}, "ms": {"type": "integer"}},
                       "required": ["text"], "additionalProperties": false}),
            )
            .unwrap(),
            tags: tags.to_vec(),
            running: Arc::default(),
            max_running: Arc::default(),
            log: Arc::default(),
            on_call: None,
        }
    }
}

#[async_trait]
impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn tags(&self) -> &[PolicyTag] {
        &self.tags
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let text = args["text"].as_str().unwrap_or_default().to_string();
        self.log.lock().unwrap().push(format!("start {text}"));
        if let Some(f) = &self.on_call {
            f();
        }
        ctx.send_update(format!("working on {text}"));
        let ms = args["ms"].as_u64().unwrap_or(0);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = ctx.cancel.cancelled() => {}
        }
        self.log.lock().unwrap().push(format!("end {text}"));
        self.running.fetch_sub(1, Ordering::SeqCst);
        if text == "fail" {
            return Err(ToolError::RespondToModel("it failed".into()));
        }
        Ok(ToolOutput::new(
            format!("echo {text}"),
            json!({"len": text.len()}),
        ))
    }
}

fn config(provider: &Arc<ScriptedProvider>) -> AgentLoopConfig {
    AgentLoopConfig::new(provider.clone())
}

fn context(tools: Vec<Arc<dyn Tool>>) -> AgentContext {
    AgentContext {
        system_prompt: "You are a test.".into(),
        messages: vec![],
        tools,
    }
}

async fn run_loop(prompt: &str, ctx: AgentContext, cfg: AgentLoopConfig) -> Vec<AgentEvent> {
    agent_loop(
        vec![AgentMessage::user(prompt)],
        ctx,
        cfg,
        CancellationToken::new(),
    )
    .collect()
    .await
}

/// Event names with runs of `message_update` collapsed to one.
fn names(events: &[AgentEvent]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for e in events {
        if e.name() == "message_update" && out.last() == Some(&"message_update") {
            continue;
        }
        out.push(e.name());
    }
    out
}

fn tool_results(events: &[AgentEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd { result, .. } => Some((
                result.tool_call_id.clone(),
                result.content.clone(),
                result.is_error,
            )),
            _ => None,
        })
        .collect()
}

fn end_reason(events: &[AgentEvent]) -> AgentEndReason {
    match events.last() {
        Some(AgentEvent::AgentEnd { reason, .. }) => *reason,
        other => panic!("last event is not agent_end: {other:?}"),
    }
}

fn tool_result_messages(req: &CompletionRequest) -> Vec<(String, String, bool)> {
    req.messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((r.tool_call_id.clone(), r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_reply_has_the_exact_event_sequence() {
    let provider = Arc::new(ScriptedProvider::new([ScriptedReply::text_only(
        "Hello there, friend.",
    )]));
    let events = run_loop("hi", context(vec![]), config(&provider)).await;
    assert_eq!(
        names(&events),
        vec![
            "agent_start",
            "turn_start",
            "message_start",
            "message_end",
            "message_start",
            "message_update",
            "message_end",
            "turn_end",
            "agent_end"
        ]
    );
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
    let req = &provider.requests()[0];
    assert_eq!(req.system.as_deref(), Some("You are a test."));
    assert_eq!(req.messages, vec![Message::user("hi")]);
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(json, json!({"type": "agent_start"}));
}

#[tokio::test]
async fn tool_call_round_trip_with_events_in_order() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .text("Let me check.")
            .tool_call_with_id("c1", "probe", r#"{"text":"a"}"#),
        ScriptedReply::text_only("Done."),
    ]));
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::ReadOnly]));
    let events = run_loop("go", context(vec![probe]), config(&provider)).await;
    assert_eq!(
        names(&events),
        vec![
            "agent_start",
            "turn_start",
            "message_start",
            "message_end",
            "message_start",
            "message_update",
            "message_end",
            "tool_execution_start",
            "tool_execution_update",
            "tool_execution_end",
            "message_start",
            "message_end",
            "turn_end",
            "turn_start",
            "message_start",
            "message_update",
            "message_end",
            "turn_end",
            "agent_end"
        ]
    );
    assert_eq!(
        tool_results(&events),
        vec![("c1".into(), "echo a".into(), false)]
    );
    let second = &provider.requests()[1];
    assert_eq!(
        tool_result_messages(second),
        vec![("c1".into(), "echo a".into(), false)]
    );
    match &events.last() {
        Some(AgentEvent::AgentEnd { messages, .. }) => assert_eq!(messages.len(), 4),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn read_only_calls_run_in_parallel_and_results_keep_call_order() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call_with_id("c1", "look", r#"{"text":"slow","ms":300}"#)
            .tool_call_with_id("c2", "look", r#"{"text":"fast","ms":10}"#),
        ScriptedReply::text_only("ok"),
    ]));
    let probe = Probe::new("look", &[PolicyTag::ReadOnly]);
    let max = probe.max_running.clone();
    let log = probe.log.clone();
    let started = Instant::now();
    let events = run_loop("go", context(vec![Arc::new(probe)]), config(&provider)).await;
    assert_eq!(
        max.load(Ordering::SeqCst),
        2,
        "both read-only calls ran at once"
    );
    assert!(started.elapsed() < Duration::from_millis(2_000));
    assert_eq!(
        *log.lock().unwrap(),
        vec!["start slow", "start fast", "end fast", "end slow"]
    );
    let ids: Vec<String> = tool_results(&events).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, vec!["c1", "c2"]);
    assert_eq!(
        tool_result_messages(&provider.requests()[1])
            .into_iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
        vec!["c1", "c2"]
    );
}

#[tokio::test]
async fn mutating_calls_run_one_at_a_time() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call("poke", r#"{"text":"1","ms":50}"#)
            .tool_call("poke", r#"{"text":"2","ms":10}"#)
            .tool_call("poke", r#"{"text":"3","ms":10}"#),
        ScriptedReply::text_only("ok"),
    ]));
    let probe = Probe::new("poke", &[PolicyTag::Write]);
    let max = probe.max_running.clone();
    let log = probe.log.clone();
    run_loop("go", context(vec![Arc::new(probe)]), config(&provider)).await;
    assert_eq!(max.load(Ordering::SeqCst), 1);
    assert_eq!(
        *log.lock().unwrap(),
        vec!["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"]
    );
}

#[tokio::test]
async fn steering_skips_the_rest_of_the_batch_and_is_delivered_next_turn() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call_with_id("c1", "poke", r#"{"text":"1"}"#)
            .tool_call_with_id("c2", "poke", r#"{"text":"2"}"#)
            .tool_call_with_id("c3", "poke", r#"{"text":"3"}"#),
        ScriptedReply::text_only("changing course"),
    ]));
    let queue: Arc<Mutex<Vec<AgentMessage>>> = Arc::default();
    let mut probe = Probe::new("poke", &[PolicyTag::Write]);
    let q = queue.clone();
    // The user types while the first call runs.
    probe.on_call = Some(Arc::new(move || {
        q.lock()
            .unwrap()
            .push(AgentMessage::user("stop, do X instead"))
    }));
    let log = probe.log.clone();
    let mut cfg = config(&provider);
    let q = queue.clone();
    let source: MessageSource = Arc::new(move || std::mem::take(&mut *q.lock().unwrap()));
    cfg.steering = Some(source);
    let events = run_loop("go", context(vec![Arc::new(probe)]), cfg).await;
    assert_eq!(*log.lock().unwrap(), vec!["start 1", "end 1"]);
    assert_eq!(
        tool_results(&events),
        vec![
            ("c1".into(), "echo 1".into(), false),
            ("c2".into(), SKIPPED_FOR_STEERING.into(), true),
            ("c3".into(), SKIPPED_FOR_STEERING.into(), true),
        ]
    );
    let second = &provider.requests()[1];
    assert_eq!(
        second.messages.last(),
        Some(&Message::user("stop, do X instead"))
    );
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
}

#[tokio::test]
async fn follow_ups_are_taken_only_when_the_agent_would_stop() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("first answer"),
        ScriptedReply::text_only("second answer"),
    ]));
    let given = Arc::new(AtomicUsize::new(0));
    let mut cfg = config(&provider);
    let g = given.clone();
    cfg.follow_up = Some(Arc::new(move || {
        if g.fetch_add(1, Ordering::SeqCst) == 0 {
            vec![AgentMessage::user("and also this")]
        } else {
            vec![]
        }
    }));
    let events = run_loop("q", context(vec![]), cfg).await;
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].messages.last(),
        Some(&Message::user("and also this"))
    );
    assert_eq!(
        names(&events)
            .iter()
            .filter(|n| **n == "turn_start")
            .count(),
        2
    );
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
}

#[tokio::test]
async fn hooks_block_rewrite_and_replace() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call_with_id("b", "probe", r#"{"text":"dangerous"}"#)
            .tool_call_with_id("r", "probe", r#"{"text":"original"}"#)
            .tool_call_with_id("a", "probe", r#"{"text":"after"}"#),
        ScriptedReply::text_only("ok"),
    ]));
    let mut cfg = config(&provider);
    cfg.before_tool_call = Some(Arc::new(|call| {
        let text = call.arguments["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Box::pin(async move {
            match text.as_str() {
                "dangerous" => BeforeToolCall::Block("not allowed here".into()),
                "original" => BeforeToolCall::Rewrite(json!({"text": "rewritten"})),
                _ => BeforeToolCall::Proceed,
            }
        })
    }));
    cfg.after_tool_call = Some(Arc::new(|call, _result| {
        let replace = call.id == "a";
        Box::pin(async move {
            if replace {
                AfterToolCall {
                    content: Some("replaced".into()),
                    details: Some(json!({"hooked": true})),
                    is_error: Some(true),
                }
            } else {
                AfterToolCall::default()
            }
        })
    }));
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::ReadOnly]));
    let events = run_loop("go", context(vec![probe]), cfg).await;
    let results = tool_results(&events);
    assert_eq!(
        results[0],
        (
            "b".into(),
            "Tool call blocked: not allowed here".into(),
            true
        )
    );
    assert_eq!(results[1], ("r".into(), "echo rewritten".into(), false));
    assert_eq!(results[2], ("a".into(), "replaced".into(), true));
}

#[tokio::test]
async fn invalid_arguments_list_each_failing_path_and_echo_the_input() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id("c", "probe", r#"{"text": 5, "extra": true}"#),
        ScriptedReply::text_only("sorry"),
    ]));
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::ReadOnly]));
    let events = run_loop("go", context(vec![probe]), config(&provider)).await;
    let (_, text, is_error) = tool_results(&events).remove(0);
    assert!(is_error);
    assert!(
        text.contains("Validation failed for tool \"probe\""),
        "{text}"
    );
    assert!(text.contains("/text"), "{text}");
    assert!(text.contains("extra"), "{text}");
    assert!(text.contains("Received arguments"), "{text}");
    assert!(text.contains("\"text\": 5"), "{text}");
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
}

#[tokio::test]
async fn unknown_tool_and_policy_refusal_are_error_results() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call_with_id("u", "nope", r#"{}"#)
            .tool_call_with_id("p", "shell", r#"{"text":"rm"}"#),
        ScriptedReply::text_only("ok"),
    ]));
    let mut cfg = config(&provider);
    cfg.policy = agentd::tools::policy::Policy::read_only();
    let shell: Arc<dyn Tool> = Arc::new(Probe::new("shell", &[PolicyTag::Exec]));
    let events = run_loop("go", context(vec![shell]), cfg).await;
    let results = tool_results(&events);
    assert!(
        results[0].1.contains("Tool \"nope\" not found") && results[0].1.contains("shell"),
        "{results:?}"
    );
    assert!(results[0].2);
    assert!(results[1].2);
    assert!(
        results[1].1.contains("exec") && results[1].1.contains("read_only"),
        "{results:?}"
    );
}

#[tokio::test]
async fn failing_tool_is_an_error_result_and_the_loop_goes_on() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id("c", "probe", r#"{"text":"fail"}"#),
        ScriptedReply::text_only("recovered"),
    ]));
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::ReadOnly]));
    let events = run_loop("go", context(vec![probe]), config(&provider)).await;
    assert_eq!(
        tool_results(&events),
        vec![("c".into(), "it failed".into(), true)]
    );
    assert_eq!(provider.requests().len(), 2);
    assert_eq!(end_reason(&events), AgentEndReason::Completed);
}

#[tokio::test]
async fn max_turns_ends_the_run_with_a_clear_event() {
    let replies =
        (0..10).map(|i| ScriptedReply::new().tool_call("probe", format!(r#"{{"text":"{i}"}}"#)));
    let provider = Arc::new(ScriptedProvider::new(replies));
    let mut cfg = config(&provider);
    cfg.max_turns = 3;
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::ReadOnly]));
    let events = run_loop("loop forever", context(vec![probe]), cfg).await;
    assert_eq!(provider.requests().len(), 3);
    match events.last() {
        Some(AgentEvent::AgentEnd { reason, error, .. }) => {
            assert_eq!(*reason, AgentEndReason::MaxTurns);
            assert!(error
                .as_deref()
                .unwrap_or_default()
                .contains("max_turns = 3"));
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn calls_cut_by_length_are_failed_not_executed() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new()
            .tool_call_with_id("c", "probe", r#"{"text":"x"}"#)
            .stop_reason(StopReason::Length),
        ScriptedReply::text_only("ok"),
    ]));
    let probe = Probe::new("probe", &[PolicyTag::ReadOnly]);
    let log = probe.log.clone();
    let events = run_loop("go", context(vec![Arc::new(probe)]), config(&provider)).await;
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(
        tool_results(&events),
        vec![("c".into(), CUT_BY_LENGTH.into(), true)]
    );
}

#[tokio::test]
async fn provider_error_ends_the_run() {
    let provider = Arc::new(ScriptedProvider::new([ScriptedReply::new()
        .text("partial")
        .fail(ErrorKind::Server, "boom")]));
    let events = run_loop("go", context(vec![]), config(&provider)).await;
    match events.last() {
        Some(AgentEvent::AgentEnd { reason, error, .. }) => {
            assert_eq!(*reason, AgentEndReason::Error);
            assert!(error.as_deref().unwrap_or_default().contains("boom"));
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn agent_state_listeners_queue_and_abort() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("one"),
        ScriptedReply::new().text("thinking...").hang(),
    ]));
    let agent = Agent::new(config(&provider), "sys", vec![]);
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    for tag in ["first", "second"] {
        let o = order.clone();
        agent.subscribe(Arc::new(move |ev: AgentEvent| {
            let o = o.clone();
            Box::pin(async move {
                if ev.name() == "agent_end" {
                    o.lock().unwrap().push(tag.to_string());
                }
            })
        }));
    }
    assert_eq!(agent.state().status, AgentStatus::Ready);
    let reason = agent.prompt(AgentMessage::user("hello")).await.unwrap();
    assert_eq!(reason, AgentEndReason::Completed);
    assert_eq!(agent.state().status, AgentStatus::Completed);
    assert_eq!(agent.state().messages.len(), 2);
    assert_eq!(*order.lock().unwrap(), vec!["first", "second"]);

    // The second prompt hangs in the provider until aborted.
    let a = agent.clone();
    let run = tokio::spawn(async move { a.prompt(AgentMessage::user("again")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(agent.state().is_running());
    assert_eq!(
        agent.prompt(AgentMessage::user("too soon")).await,
        Err(AgentError::AlreadyRunning)
    );
    agent.abort();
    tokio::time::timeout(Duration::from_secs(5), agent.wait_for_idle())
        .await
        .unwrap();
    assert_eq!(run.await.unwrap().unwrap(), AgentEndReason::Aborted);
    assert_eq!(agent.state().status, AgentStatus::Cancelled);
    let last = agent.state().messages.last().cloned().unwrap();
    match last {
        AgentMessage::Assistant(a) => assert_eq!(a.stop_reason, StopReason::Aborted),
        m => panic!("{m:?}"),
    }
}

/// A `before_tool_call` hook (an approval request a door writes out directly) runs only after every listener has
/// handled the events before it: a client never sees the request for the second call ahead of the first call's
/// end, however slow the listeners are. (Found in CI: an RPC client read the read's `tool_execution_end` after
/// the edit's `approval_request`, took it for the edit's end, and read the file before the edit had run.)
#[tokio::test]
async fn a_hook_runs_after_the_listeners_have_the_events_before_it() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id("c1", "probe", r#"{"text":"one"}"#),
        ScriptedReply::new().tool_call_with_id("c2", "probe", r#"{"text":"two"}"#),
        ScriptedReply::text_only("done"),
    ]));
    let heard: Arc<Mutex<Vec<String>>> = Arc::default();
    // Per hook call: the call's id and the events the listener had handled by then.
    type Heard = Vec<(String, Vec<String>)>;
    let at_hook: Arc<Mutex<Heard>> = Arc::default();
    let mut cfg = config(&provider);
    let (h, seen) = (heard.clone(), at_hook.clone());
    cfg.before_tool_call = Some(Arc::new(move |call| {
        let snapshot = h.lock().unwrap().clone();
        seen.lock().unwrap().push((call.id.clone(), snapshot));
        Box::pin(async { BeforeToolCall::Proceed })
    }));
    let probe: Arc<dyn Tool> = Arc::new(Probe::new("probe", &[PolicyTag::Write]));
    let agent = Agent::new(cfg, "sys", vec![probe]);
    let h = heard.clone();
    agent.subscribe(Arc::new(move |ev: AgentEvent| {
        let h = h.clone();
        Box::pin(async move {
            // A slow door: without the barrier the loop runs far ahead of it.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let name = match &ev {
                AgentEvent::ToolExecutionStart { tool_call_id, .. }
                | AgentEvent::ToolExecutionEnd { tool_call_id, .. } => {
                    format!("{} {tool_call_id}", ev.name())
                }
                _ => ev.name().to_string(),
            };
            h.lock().unwrap().push(name);
        })
    }));
    let reason = agent.prompt(AgentMessage::user("go")).await.unwrap();
    assert_eq!(reason, AgentEndReason::Completed);
    let at_hook = at_hook.lock().unwrap().clone();
    assert_eq!(at_hook.len(), 2, "{at_hook:?}");
    for (id, heard) in &at_hook {
        assert_eq!(
            heard.last().map(String::as_str),
            Some(format!("tool_execution_start {id}").as_str()),
            "the hook for {id} ran before the listener had its start: {heard:?}"
        );
    }
    let second = &at_hook[1].1;
    assert!(
        second.contains(&"tool_execution_end c1".to_string()),
        "{second:?}"
    );
}

#[tokio::test]
async fn agent_follow_up_queue_one_at_a_time() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("a"),
        ScriptedReply::text_only("b"),
        ScriptedReply::text_only("c"),
    ]));
    let agent = Agent::new(config(&provider), "", vec![]);
    agent.follow_up(AgentMessage::user("f1"));
    agent.follow_up(AgentMessage::user("f2"));
    agent.prompt(AgentMessage::user("start")).await.unwrap();
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].messages.last(), Some(&Message::user("f1")));
    assert_eq!(reqs[2].messages.last(), Some(&Message::user("f2")));
    // continue_ is refused when the assistant spoke last.
    assert!(matches!(
        agent.continue_().await,
        Err(AgentError::CannotContinue(_))
    ));
}

#[tokio::test]
async fn abort_during_bash_kills_the_whole_process_tree() {
    let provider = Arc::new(ScriptedProvider::new([ScriptedReply::new()
        .tool_call_with_id(
            "b",
            "bash",
            r#"{"command": "echo pgid=$$; sleep 100 & sleep 100 & wait"}"#,
        )]));
    let bash: Arc<dyn Tool> = Arc::new(agentd::tools::bash::BashTool::new());
    let agent = Agent::new(config(&provider), "", vec![bash]);
    let pgid: Arc<Mutex<Option<i32>>> = Arc::default();
    let p = pgid.clone();
    agent.subscribe(Arc::new(move |ev: AgentEvent| {
        let p = p.clone();
        Box::pin(async move {
            if let AgentEvent::ToolExecutionUpdate { partial, .. } = ev {
                if let Some(n) = partial.split("pgid=").nth(1) {
                    let n: String = n.chars().take_while(|c| c.is_ascii_digit()).collect();
                    *p.lock().unwrap() = n.parse().ok();
                }
            }
        })
    }));
    let a = agent.clone();
    let run = tokio::spawn(async move { a.prompt(AgentMessage::user("run it")).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    let group = loop {
        if let Some(g) = *pgid.lock().unwrap() {
            break g;
        }
        assert!(Instant::now() < deadline, "bash never reported its pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // SAFETY: kill with signal 0 only checks whether the process group exists.
    assert_eq!(
        unsafe { libc::kill(-group, 0) },
        0,
        "the group is alive before the abort"
    );
    agent.abort();
    let reason = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(reason, AgentEndReason::Aborted);
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: as above.
        unsafe { libc::kill(-group, 0) != 0 }
    });
    assert!(gone, "processes of group {group} survived the abort");
    let result = agent
        .state()
        .messages
        .iter()
        .find_map(|m| match m {
            AgentMessage::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.is_error);
}
