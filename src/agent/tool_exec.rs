//! Running one assistant message's tool calls: each call checked (known tool, valid arguments, policy,
//! `before_tool_call`), run with its events, and answered through `after_tool_call`; consecutive read-only calls
//! run in parallel; steering, an abort or a hook's stop skip the calls left.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::events::AgentEvent;
use super::events::Emitter;
use super::harness::RunEnd;
use super::hooks::{AgentContext, AgentLoopConfig, BeforeToolCall};
use crate::env::now_ms;
use crate::provider::ToolCall;
use crate::tools::tool::{PolicyTag, Tool, ToolContext, ToolError};
use crate::transcript::{AgentMessage, ToolResult};

/// The result text of calls skipped because the user queued a steering message.
pub const SKIPPED_FOR_STEERING: &str = "Skipped due to queued user message.";
/// The result text of calls not run because the run was aborted.
pub const SKIPPED_FOR_ABORT: &str = "Aborted: the run was cancelled before this tool call ran.";
/// The result text of calls not run because a hook stopped the run.
pub const SKIPPED_FOR_STOP: &str = "Skipped: the run was stopped before this tool call ran.";
/// The result text of calls the model did not finish (the reply hit `max_tokens`).
pub const CUT_BY_LENGTH: &str =
    "This tool call was cut off by the output token limit and was not executed. Retry with a shorter call.";

fn error_result(call: &ToolCall, text: impl Into<String>) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: text.into(),
        details: serde_json::Value::Null,
        is_error: true,
        timestamp: now_ms(),
    }
}

/// Answers every call with the same error, without running anything (start and end events still go out).
pub(super) async fn fail_all(calls: &[ToolCall], text: &str, em: &Emitter) -> Vec<ToolResult> {
    let mut out = Vec::new();
    for call in calls {
        out.push(announce_failure(call, text, em).await);
    }
    out
}

async fn announce_failure(call: &ToolCall, text: &str, em: &Emitter) -> ToolResult {
    em.emit(AgentEvent::ToolExecutionStart {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.arguments.clone(),
    })
    .await;
    let r = error_result(call, text);
    finish(call, r, em).await
}

async fn finish(call: &ToolCall, r: ToolResult, em: &Emitter) -> ToolResult {
    em.emit(AgentEvent::ToolExecutionEnd {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        result: r.clone(),
        is_error: r.is_error,
    })
    .await;
    em.message(&AgentMessage::ToolResult(r.clone())).await;
    r
}

/// A call that passed every check: the tool and the (possibly rewritten) arguments to run it with, or the
/// answer a hook gave in its place.
enum Prepared {
    Run {
        tool: Arc<dyn Tool>,
        args: serde_json::Value,
    },
    Answer {
        content: String,
        is_error: bool,
    },
}

/// Unknown tool, invalid call, policy, schema validation, `before_tool_call`: any refusal is an error result.
async fn prepare(
    call: &ToolCall,
    context: &AgentContext,
    config: &AgentLoopConfig,
) -> Result<Prepared, String> {
    let Some(tool) = context
        .tools
        .iter()
        .find(|t| t.spec().name == call.name)
        .cloned()
    else {
        let known: Vec<&str> = context
            .tools
            .iter()
            .map(|t| t.spec().name.as_str())
            .collect();
        return Err(format!(
            "Tool \"{}\" not found. Available tools: {}",
            call.name,
            if known.is_empty() {
                "(none)".into()
            } else {
                known.join(", ")
            }
        ));
    };
    if let Some(invalid) = &call.invalid {
        // Schema violations are re-checked below, with our message (every failing path, the input echoed).
        if invalid.kind != crate::provider::InvalidToolCallKind::SchemaViolation {
            return Err(invalid.message_for_model().to_string());
        }
    }
    config.policy.check_tags(&call.name, tool.tags())?;
    let mut args = call.arguments.clone();
    validate(&tool, &args)?;
    let by_harness = match &config.harness {
        Some(harness) => Some(harness.before_call(call).await),
        None => None,
    };
    let decided = match (by_harness, &config.before_tool_call) {
        (Some(d), _) if d != BeforeToolCall::Proceed => Some(d),
        (_, Some(hook)) => Some(hook(call).await),
        (d, None) => d,
    };
    if let Some(decision) = decided {
        match decision {
            BeforeToolCall::Proceed => {}
            BeforeToolCall::Block(reason) => return Err(format!("Tool call blocked: {reason}")),
            BeforeToolCall::Rewrite(new_args) => {
                validate(&tool, &new_args)?;
                args = new_args;
            }
            BeforeToolCall::Respond { content, is_error } => {
                return Ok(Prepared::Answer { content, is_error })
            }
        }
    }
    Ok(Prepared::Run { tool, args })
}

fn validate(tool: &Arc<dyn Tool>, args: &serde_json::Value) -> Result<(), String> {
    tool.spec().validate_arguments(args).map_err(|errors| {
        let received = serde_json::to_string_pretty(args).unwrap_or_else(|_| args.to_string());
        format!(
            "Validation failed for tool \"{}\":\n{}\n\nReceived arguments:\n{received}",
            tool.spec().name,
            errors
                .iter()
                .map(|e| format!("  - {e}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

/// Runs the calls of one assistant message. Consecutive read-only calls form a batch that runs in parallel;
/// any other call is a batch of its own. Results come back in call order. Steering is polled after each batch:
/// if the user queued a message, the remaining calls are skipped and the messages returned.
pub(super) async fn execute_tool_calls(
    calls: &[ToolCall],
    context: &AgentContext,
    config: &AgentLoopConfig,
    cancel: &CancellationToken,
    em: &Emitter,
) -> (Vec<ToolResult>, Vec<AgentMessage>, Option<RunEnd>) {
    let read_only = |c: &ToolCall| {
        context
            .tools
            .iter()
            .find(|t| t.spec().name == c.name)
            .is_some_and(|t| t.tags().iter().all(|g| *g == PolicyTag::ReadOnly))
    };
    let mut results = Vec::new();
    let mut stop = None;
    let mut i = 0;
    while i < calls.len() {
        let mut j = i + 1;
        if read_only(&calls[i]) {
            while j < calls.len() && read_only(&calls[j]) {
                j += 1;
            }
        }
        results.extend(run_batch(&calls[i..j], context, config, cancel, em, &mut stop).await);
        i = j;
        if i < calls.len() {
            if stop.is_some() {
                results.extend(fail_all(&calls[i..], SKIPPED_FOR_STOP, em).await);
                break;
            }
            if cancel.is_cancelled() {
                results.extend(fail_all(&calls[i..], SKIPPED_FOR_ABORT, em).await);
                break;
            }
            let steering = config.steering.as_ref().map(|s| s()).unwrap_or_default();
            if !steering.is_empty() {
                results.extend(fail_all(&calls[i..], SKIPPED_FOR_STEERING, em).await);
                return (results, steering, stop);
            }
        }
    }
    (results, Vec::new(), stop)
}

async fn run_batch(
    calls: &[ToolCall],
    context: &AgentContext,
    config: &AgentLoopConfig,
    cancel: &CancellationToken,
    em: &Emitter,
    stop: &mut Option<RunEnd>,
) -> Vec<ToolResult> {
    let (updates_tx, mut updates) = crate::tools::support::update_channel::update_channel();
    let mut prepared = Vec::new();
    for call in calls {
        em.emit(AgentEvent::ToolExecutionStart {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            args: call.arguments.clone(),
        })
        .await;
        // The hooks may ask the user (an approval request goes to the door directly): the door has the events first.
        em.delivered().await;
        prepared.push(prepare(call, context, config).await);
    }
    let names: HashMap<String, String> = calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone()))
        .collect();
    let runs: Vec<_> = calls
        .iter()
        .zip(prepared)
        .map(|(call, prep)| {
            let mut ctx = ToolContext::new(config.cwd.clone())
                .with_cancel(cancel.child_token())
                .with_updates(updates_tx.clone())
                .with_call_id(call.id.clone());
            ctx.workspace = config.workspace.clone();
            if let Some(state) = &config.workspace_state {
                ctx = ctx.with_workspace_state(state.clone());
            }
            if let Some(resources) = &config.resources {
                ctx = ctx.with_resources(resources.clone());
            }
            let session_id = config.cache_key.clone().unwrap_or_default();
            async move {
                let (tool, args) = match prep {
                    Ok(Prepared::Run { tool, args }) => (tool, args),
                    Ok(Prepared::Answer { content, is_error }) => {
                        return ToolResult {
                            is_error,
                            ..error_result(call, content)
                        }
                    }
                    Err(text) => return error_result(call, text),
                };
                tracing::info!(
                    name: "tool.before_invoke",
                    session_id = %session_id,
                    tool = %call.name,
                    call_id = %call.id,
                );
                let started_at = std::time::Instant::now();
                let outcome = tool.call(args, &ctx).await;
                let (content, details, is_error) = match outcome {
                    Ok(out) => (out.content, out.details, false),
                    Err(ToolError::RespondToModel(text)) => (text, serde_json::Value::Null, true),
                    Err(e @ ToolError::Fatal(_)) => (e.to_string(), serde_json::Value::Null, true),
                };
                tracing::info!(
                    name: "tool.after_invoke",
                    session_id = %session_id,
                    tool = %call.name,
                    call_id = %call.id,
                    duration_ms = started_at.elapsed().as_millis() as u64,
                    is_error,
                );
                ToolResult {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    content,
                    details,
                    is_error,
                    timestamp: now_ms(),
                }
            }
        })
        .collect();
    drop(updates_tx);
    let mut all = Box::pin(futures::future::join_all(runs));
    let raw = loop {
        tokio::select! {
            done = &mut all => break done,
            Some(u) = updates.recv() => {
                let tool_name = names.get(&u.call_id).cloned().unwrap_or_default();
                em.emit(AgentEvent::ToolExecutionUpdate { tool_call_id: u.call_id, tool_name, partial: u.text }).await;
            }
        }
    };
    while let Ok(u) = updates.try_recv() {
        let tool_name = names.get(&u.call_id).cloned().unwrap_or_default();
        em.emit(AgentEvent::ToolExecutionUpdate {
            tool_call_id: u.call_id,
            tool_name,
            partial: u.text,
        })
        .await;
    }
    // A command (or any tool that is not read-only) may have changed the tree: the next turn's grammar lists it
    // anew.
    if let Some(state) = &config.workspace_state {
        let mutating = calls.iter().any(|c| {
            context
                .tools
                .iter()
                .find(|t| t.spec().name == c.name)
                .is_some_and(|t| t.tags().iter().any(|g| *g != PolicyTag::ReadOnly))
        });
        if mutating {
            state.changed();
        }
    }
    let mut out = Vec::new();
    for (call, mut r) in calls.iter().zip(raw) {
        if let Some(hook) = &config.after_tool_call {
            let change = hook(call, &r).await;
            if let Some(c) = change.content {
                r.content = c;
            }
            if let Some(d) = change.details {
                r.details = d;
            }
            if let Some(e) = change.is_error {
                r.is_error = e;
            }
        }
        if let Some(harness) = &config.harness {
            let revision = harness.after_call(call, &r).await;
            if let Some(c) = revision.content {
                r.content = c;
            }
            if let Some(e) = revision.is_error {
                r.is_error = e;
            }
            if let Some(ending) = revision.end {
                stop.get_or_insert(ending);
            }
        }
        out.push(finish(call, r, em).await);
    }
    out
}
