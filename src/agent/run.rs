//! `agent_loop`: one run of the agent, owning no state. A turn loop (model call → tool calls → results) inside a
//! follow-up loop; steering messages are polled after every tool batch, follow-ups when the agent would stop.
//! Events go out on a bounded channel, so a slow consumer slows the run instead of piling events up. A turn's
//! calls run in `tool_exec`; a reply that starts from a prefill goes through `prefill`.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::compaction_record::Compaction;
use super::context::prompt_request;
use super::events::Emitter;
use super::events::{AgentEndReason, AgentEvent};
use super::harness::{EndDecision, RunEnd};
use super::hooks::{AgentContext, AgentLoopConfig};
use super::tool_exec::{execute_tool_calls, fail_all};
use crate::env::now_ms;
use crate::provider::{ContentBlock, ErrorKind, ErrorReason, ProviderEvent, StopReason, ToolCall};
use crate::transcript::{AgentMessage, AssistantTurn};

pub use super::tool_exec::{
    CUT_BY_LENGTH, SKIPPED_FOR_ABORT, SKIPPED_FOR_STEERING, SKIPPED_FOR_STOP,
};

/// Starts a run on the current tokio runtime and returns its events. The stream ends after `agent_end`.
pub fn agent_loop(
    prompts: Vec<AgentMessage>,
    context: AgentContext,
    config: AgentLoopConfig,
    cancel: CancellationToken,
) -> impl Stream<Item = AgentEvent> + Send + 'static {
    let (tx, mut rx) = mpsc::channel(32);
    tokio::spawn(async move {
        run(prompts, context, config, cancel, &Emitter(tx)).await;
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .filter_map(|envelope| std::future::ready(envelope.into_event()))
}

/// The loop itself. `prompts` may be empty (continue from the context as it is).
pub(crate) async fn run(
    prompts: Vec<AgentMessage>,
    mut context: AgentContext,
    config: AgentLoopConfig,
    cancel: CancellationToken,
    em: &Emitter,
) {
    let mut added: Vec<AgentMessage> = Vec::new();
    em.emit(AgentEvent::AgentStart).await;
    em.emit(AgentEvent::TurnStart).await;
    for p in prompts {
        em.message(&p).await;
        context.messages.push(p.clone());
        added.push(p);
    }
    let mut pending: Vec<AgentMessage> = config.steering.as_ref().map(|s| s()).unwrap_or_default();
    let mut first_turn = true;
    let mut turns = 0usize;
    // Whether messages were added since the last budget check (the check runs at every turn_end and before a
    // model call that would send unchecked messages).
    let mut unchecked = true;
    // Where the next reply starts (the harness's `next_prefill`), decided after a turn's calls ran.
    let mut prefill: Option<String> = None;
    // How the run ends when nothing more comes (the harness's verdict when the model last stopped).
    let mut verdict = RunEnd::Completed;
    loop {
        let mut more_tool_calls = true;
        while more_tool_calls || !pending.is_empty() {
            if !first_turn {
                em.emit(AgentEvent::TurnStart).await;
            }
            first_turn = false;
            for m in pending.drain(..) {
                em.message(&m).await;
                context.messages.push(m.clone());
                added.push(m);
                unchecked = true;
            }
            if unchecked {
                check_budget(&mut context, &config, &cancel, em).await;
            }
            let start = prefill.take();
            let mut trace = super::prefill::trace(start.as_deref());
            let reply = stream_assistant(&context, &config, &cancel, em, true, start, &mut trace);
            let turn = match reply.await {
                Ok(turn) => turn,
                // The prompt was too long for the window: compact and retry once.
                Err(overflow) => {
                    retry_after_overflow(&mut context, &config, &cancel, em, overflow).await
                }
            };
            let message = AgentMessage::Assistant(turn.clone());
            context.messages.push(message.clone());
            added.push(message.clone());
            if matches!(turn.stop_reason, StopReason::Error | StopReason::Aborted) {
                em.emit(AgentEvent::TurnEnd {
                    message,
                    tool_results: vec![],
                })
                .await;
                let reason = if turn.stop_reason == StopReason::Aborted {
                    AgentEndReason::Aborted
                } else {
                    AgentEndReason::Error
                };
                return end(em, reason, added, turn.error_message.clone()).await;
            }
            let calls = turn.tool_calls();
            more_tool_calls = !calls.is_empty();
            let mut results = Vec::new();
            let mut stopped = None;
            if more_tool_calls {
                let (done, steering, stop) = if turn.stop_reason == StopReason::Length {
                    (fail_all(&calls, CUT_BY_LENGTH, em).await, Vec::new(), None)
                } else {
                    execute_tool_calls(&calls, &context, &config, &cancel, em).await
                };
                for r in &done {
                    let m = AgentMessage::ToolResult(r.clone());
                    context.messages.push(m.clone());
                    added.push(m);
                }
                results = done;
                pending = steering;
                stopped = stop;
                if let Some(harness) = &config.harness {
                    if pending.is_empty() && turn.stop_reason == StopReason::Stop {
                        trace.text = turn.text();
                        prefill = harness.next_prefill(&trace, &calls, &results);
                    }
                }
            }
            em.emit(AgentEvent::TurnEnd {
                message,
                tool_results: results,
            })
            .await;
            if !cancel.is_cancelled() {
                check_budget(&mut context, &config, &cancel, em).await;
            }
            unchecked = false;
            turns += 1;
            if cancel.is_cancelled() {
                return end(em, AgentEndReason::Aborted, added, None).await;
            }
            // A result that finished the job still goes past the harness's end check.
            let ending = match (stopped, &config.harness) {
                (Some(RunEnd::Completed), Some(harness)) => {
                    end_check(harness.as_ref(), &mut pending, &mut prefill).await
                }
                (other, _) => other,
            };
            if let Some(ending) = ending {
                return end_as(em, ending, added).await;
            }
            if pending.is_empty() {
                pending = config.steering.as_ref().map(|s| s()).unwrap_or_default();
            }
            verdict = RunEnd::Completed;
            if !more_tool_calls && pending.is_empty() && turn.stop_reason == StopReason::Stop {
                if let Some(harness) = &config.harness {
                    if let Some(ending) =
                        end_check(harness.as_ref(), &mut pending, &mut prefill).await
                    {
                        verdict = ending;
                    }
                }
            }
            if turns >= config.max_turns && (more_tool_calls || !pending.is_empty()) {
                let note = format!(
                    "stopped after {turns} turns (max_turns = {})",
                    config.max_turns
                );
                return end(em, AgentEndReason::MaxTurns, added, Some(note)).await;
            }
        }
        let follow_ups = config.follow_up.as_ref().map(|f| f()).unwrap_or_default();
        if follow_ups.is_empty() {
            break;
        }
        pending = follow_ups;
    }
    end_as(em, verdict, added).await
}

/// Asks the harness whether the run may end: how it ends when it may; else its note is queued and the next
/// reply's start set.
async fn end_check(
    harness: &dyn super::harness::LoopHarness,
    pending: &mut Vec<AgentMessage>,
    prefill: &mut Option<String>,
) -> Option<RunEnd> {
    match harness.before_end().await {
        EndDecision::End(ending) => Some(ending),
        EndDecision::Continue {
            note,
            prefill: start,
        } => {
            pending.push(AgentMessage::user(note));
            *prefill = start;
            None
        }
    }
}

/// Ends the run as the harness (or the loop) decided.
async fn end_as(em: &Emitter, ending: RunEnd, messages: Vec<AgentMessage>) {
    match ending {
        RunEnd::Completed => end(em, AgentEndReason::Completed, messages, None).await,
        RunEnd::Stopped(why) => end(em, AgentEndReason::Stopped, messages, Some(why)).await,
        RunEnd::Failed(why) => end(em, AgentEndReason::Failed, messages, Some(why)).await,
    }
}

async fn end(
    em: &Emitter,
    reason: AgentEndReason,
    messages: Vec<AgentMessage>,
    error: Option<String>,
) {
    em.emit(AgentEvent::AgentEnd {
        reason,
        messages,
        error,
    })
    .await;
}

/// Asks the context policy (if any) whether the transcript is over budget, and applies its compaction.
async fn check_budget(
    context: &mut AgentContext,
    config: &AgentLoopConfig,
    cancel: &CancellationToken,
    em: &Emitter,
) {
    if let Some(policy) = &config.context_policy {
        if let Some(c) = policy.check(context, config, cancel).await {
            apply_compaction(context, c, em).await;
        }
    }
}

/// Replaces the compacted messages by the summary and announces it.
async fn apply_compaction(context: &mut AgentContext, c: Compaction, em: &Emitter) {
    let message = c.message();
    let first_kept = c.first_kept.min(context.messages.len());
    let kept = context.messages.split_off(first_kept);
    context.messages = std::iter::once(message.clone()).chain(kept).collect();
    em.emit(AgentEvent::Compaction {
        message,
        first_kept,
        tokens_before: c.tokens_before,
        tokens_after: c.tokens_after,
        reason: c.reason,
        details: c.details,
    })
    .await;
}

/// After a context-overflow error (not yet announced): compact and stream again, once. Without a compaction the
/// error turn is announced as it is.
async fn retry_after_overflow(
    context: &mut AgentContext,
    config: &AgentLoopConfig,
    cancel: &CancellationToken,
    em: &Emitter,
    overflow: AssistantTurn,
) -> AssistantTurn {
    let compaction = match &config.context_policy {
        Some(policy) => policy.on_overflow(context, config, cancel).await,
        None => None,
    };
    match compaction {
        Some(c) => {
            apply_compaction(context, c, em).await;
            let mut trace = super::prefill::trace(None);
            match stream_assistant(context, config, cancel, em, false, None, &mut trace).await {
                Ok(turn) | Err(turn) => turn,
            }
        }
        None => {
            let m = AgentMessage::Assistant(overflow.clone());
            em.message(&m).await;
            overflow
        }
    }
}

/// One model call, streamed into `message_start` / `message_update` / `message_end`.
///
/// With `defer_overflow` (and a context policy), a context-overflow error that arrives before any output is not
/// announced: it comes back as `Err` so the caller can compact and retry.
async fn stream_assistant(
    context: &AgentContext,
    config: &AgentLoopConfig,
    cancel: &CancellationToken,
    em: &Emitter,
    defer_overflow: bool,
    prefill: Option<String>,
    trace: &mut super::harness::ReplyTrace,
) -> Result<AssistantTurn, AssistantTurn> {
    let defer_overflow = defer_overflow && config.context_policy.is_some();
    let messages = match &config.transform_context {
        Some(t) => t(context.messages.clone()).await,
        None => context.messages.clone(),
    };
    let mut request = prompt_request(context, &messages, config);
    super::prefill::prepare(&mut request, prefill.as_deref(), config);
    let session_id = config.cache_key.clone().unwrap_or_default();
    let model = crate::provider::named_or_default(&request.model, &config.provider.models());
    tracing::info!(
        name: "llm.request_start",
        session_id = %session_id,
        model = %model,
        messages = request.messages.len(),
        tools = request.tools.len(),
    );
    let started_at = std::time::Instant::now();
    let log_end = |turn: &AssistantTurn| {
        tracing::info!(
            name: "llm.request_end",
            session_id = %session_id,
            model = %model,
            tokens.prompt = turn.usage.input,
            tokens.completion = turn.usage.output,
            tokens.cached = turn.usage.cached_input,
            latency_ms = started_at.elapsed().as_millis() as u64,
            stop_reason = ?turn.stop_reason,
        );
    };
    let mut turn = AssistantTurn {
        content: Vec::new(),
        stop_reason: StopReason::Stop,
        usage: Default::default(),
        model: config.model.clone(),
        error_message: None,
        timestamp: now_ms(),
    };
    let mut stream = config.provider.stream(request, cancel.clone());
    if let Some(text) = prefill {
        stream = super::prefill::whole_reply(stream, text);
    }
    let mut started = false;
    // Tool-call index → position of its block in `turn.content`.
    let mut call_blocks: HashMap<usize, usize> = HashMap::new();
    while let Some(ev) = stream.next().await {
        match &ev {
            ProviderEvent::Start { model } => {
                if !model.is_empty() {
                    turn.model = model.clone();
                }
            }
            ProviderEvent::TextDelta { delta } => match turn.content.last_mut() {
                Some(ContentBlock::Text { text }) => text.push_str(delta),
                _ => turn.content.push(ContentBlock::Text {
                    text: delta.clone(),
                }),
            },
            ProviderEvent::ThinkingDelta { delta } => match turn.content.last_mut() {
                Some(ContentBlock::Thinking { thinking }) => thinking.push_str(delta),
                _ => turn.content.push(ContentBlock::Thinking {
                    thinking: delta.clone(),
                }),
            },
            ProviderEvent::ToolCallStart { index, id, name } => {
                call_blocks.insert(*index, turn.content.len());
                turn.content.push(ContentBlock::ToolCall(ToolCall::new(
                    id.clone(),
                    name.clone(),
                    serde_json::Value::Null,
                )));
            }
            ProviderEvent::ToolCallDelta { .. } => {}
            ProviderEvent::Logprobs { entries } => trace.tokens.extend(entries.iter().cloned()),
            ProviderEvent::ToolCallEnd { index, call } => match call_blocks.get(index) {
                Some(&at) => turn.content[at] = ContentBlock::ToolCall(call.clone()),
                None => turn.content.push(ContentBlock::ToolCall(call.clone())),
            },
            ProviderEvent::Done {
                stop_reason,
                usage,
                message,
            } => {
                turn.content = message.content.clone();
                turn.stop_reason = *stop_reason;
                turn.usage = *usage;
                if let Some(harness) = &config.harness {
                    let text: String = turn
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    turn.content.extend(
                        harness
                            .text_calls(&text)
                            .into_iter()
                            .map(ContentBlock::ToolCall),
                    );
                }
            }
            ProviderEvent::Error {
                reason,
                message,
                usage,
                partial,
                ..
            } => {
                turn.content = partial.content.clone();
                turn.stop_reason = match reason {
                    ErrorReason::Aborted => StopReason::Aborted,
                    ErrorReason::Error => StopReason::Error,
                };
                turn.usage = *usage;
                turn.error_message = Some(message.clone());
            }
        }
        if !started {
            if defer_overflow {
                // Hold `message_start` until something other than `start` arrives.
                if matches!(ev, ProviderEvent::Start { .. }) {
                    continue;
                }
                if matches!(
                    ev,
                    ProviderEvent::Error {
                        kind: ErrorKind::ContextOverflow,
                        reason: ErrorReason::Error,
                        ..
                    }
                ) {
                    log_end(&turn);
                    return Err(turn);
                }
            }
            started = true;
            em.emit(AgentEvent::MessageStart {
                message: AgentMessage::Assistant(turn.clone()),
            })
            .await;
        }
        if ev.is_terminal() {
            em.emit(AgentEvent::MessageEnd {
                message: AgentMessage::Assistant(turn.clone()),
            })
            .await;
            log_end(&turn);
            return Ok(turn);
        }
        if !matches!(ev, ProviderEvent::Start { .. }) {
            em.emit(AgentEvent::MessageUpdate {
                message: AgentMessage::Assistant(turn.clone()),
                delta: ev,
            })
            .await;
        }
    }
    // A provider must end with done or error; treat a silent end as an error rather than hang or panic.
    turn.stop_reason = StopReason::Error;
    turn.error_message = Some("the provider's stream ended without a final event".into());
    if !started {
        em.emit(AgentEvent::MessageStart {
            message: AgentMessage::Assistant(turn.clone()),
        })
        .await;
    }
    em.emit(AgentEvent::MessageEnd {
        message: AgentMessage::Assistant(turn.clone()),
    })
    .await;
    log_end(&turn);
    Ok(turn)
}
