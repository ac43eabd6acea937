//! Compaction (Pi's algorithm, with exact counts): when the prompt the next turn would send is larger than
//! `context_window − reserve_tokens`, keep the newest `keep_recent_tokens` of the transcript, cut only where no
//! tool call is separated from its result, and replace everything older by a summary the model writes (updating
//! the previous summary when there is one). Tool results that are dropped are stored content-addressed and the
//! summary points at them (`[ref:ab12cd] read(path="src/lib.rs") — 240 lines`) for the `recall` tool; files read
//! and modified are listed. When summarising is disabled or fails, the summary is a deterministic truncation note.
//!
//! Sizes are the provider's counts of real requests ([`super::context::context_tokens`]), so on the local engine
//! every number here is an exact token count; the cut point is found by binary search over candidate cuts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::compaction_record::{Compaction, CompactionDetails, CompactionReason};
use super::context::{context_tokens, count, model_descriptor};
use super::hooks::{AgentContext, AgentLoopConfig, ContextPolicy};
use super::summary;
use crate::provider::{collect, CompletionRequest, Message, Sampling, ToolCall, ToolChoice};
use crate::session::blobs::BlobStore;
use crate::transcript::AgentMessage;

/// Tool-result text kept per result in the transcript shown to the summariser.
const MAX_RESULT_CHARS: usize = 2_000;
/// Most pointer lines a summary carries (the newest are kept; older blobs stay on disk).
const MAX_REFS: usize = 40;
/// Tokens allowed for the summary message's framing around the model's text.
const SUMMARY_FRAMING: u64 = 64;

/// When and how to compact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionSettings {
    /// Compact automatically (at `turn_end`, and on a context-overflow error). Manual compaction always works.
    pub enabled: bool,
    /// Tokens kept free for the reply (and the summary): compaction starts above `window − reserve`. Capped at a
    /// quarter of the window, so small models keep three quarters for the conversation.
    pub reserve_tokens: u64,
    /// Tokens of the newest messages kept verbatim. Capped at a quarter of the window.
    pub keep_recent_tokens: u64,
    /// Ask the model for the summary; `false` always truncates.
    pub summarize: bool,
    /// Overrides the provider's context window (tests, or a server that reports none).
    pub context_window: Option<u64>,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            summarize: true,
            context_window: None,
        }
    }
}

/// The numbers one compaction works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub window: u64,
    pub reserve: u64,
    pub keep_recent: u64,
}

impl Budget {
    /// The most tokens a prompt may have before compaction starts.
    pub fn limit(&self) -> u64 {
        self.window.saturating_sub(self.reserve)
    }

    /// The most tokens the summariser may write (Pi: 80% of the reserve).
    pub fn summary_tokens(&self) -> u64 {
        (self.reserve * 4 / 5).max(64)
    }
}

/// Why a compaction could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    /// No cut leaves something to summarise (too few messages). Nothing to do; a context still too large needs a
    /// model with a larger window or smaller tool outputs.
    #[error("nothing to compact: {0}")]
    NothingToCompact(String),
    /// The run was cancelled while summarising.
    #[error("compaction cancelled")]
    Cancelled,
}

/// Counters for metrics.
#[derive(Debug, Default)]
pub struct CompactionStats {
    /// Budget checks made.
    pub checks: AtomicU64,
    pub compactions: AtomicU64,
    /// Compactions that fell back to truncation although summarising was enabled.
    pub summary_failures: AtomicU64,
    /// The exact prompt size found by the latest check.
    pub last_context_tokens: AtomicU64,
}

/// The compacting [`ContextPolicy`]. Share it with `Arc` (in `AgentLoopConfig::context_policy`).
#[derive(Debug, Clone, Default)]
pub struct Compactor {
    pub settings: CompactionSettings,
    blobs: Option<BlobStore>,
    stats: Arc<CompactionStats>,
}

impl Compactor {
    pub fn new(settings: CompactionSettings) -> Self {
        Self {
            settings,
            blobs: None,
            stats: Arc::default(),
        }
    }

    /// Keeps dropped tool results in `blobs` and points at them from summaries (grounding).
    pub fn with_blobs(mut self, blobs: BlobStore) -> Self {
        self.blobs = Some(blobs);
        self
    }

    pub fn stats(&self) -> &Arc<CompactionStats> {
        &self.stats
    }

    /// The budget for `config`'s model: its window (or the override) with the capped reserve and keep.
    pub fn budget(&self, config: &AgentLoopConfig) -> Budget {
        let window = self
            .settings
            .context_window
            .or_else(|| model_descriptor(config).map(|m| m.context_window))
            .unwrap_or(8_192);
        Budget {
            window,
            reserve: self.settings.reserve_tokens.min(window / 4),
            keep_recent: self.settings.keep_recent_tokens.min(window / 4),
        }
    }

    /// Compacts `context.messages` now (whatever its size) and returns the result; `context` is not changed
    /// (apply the result with [`Compaction::apply`]). `focus` is added to the summariser's instructions.
    pub async fn compact(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        focus: Option<&str>,
        reason: CompactionReason,
        cancel: &CancellationToken,
    ) -> Result<Compaction, CompactionError> {
        let msgs = &context.messages;
        let budget = self.budget(config);
        let tokens_before = context_tokens(context, msgs, config).await.tokens;
        let start = usize::from(matches!(
            msgs.first(),
            Some(AgentMessage::CompactionSummary { .. })
        ));
        let previous = match msgs.first() {
            Some(AgentMessage::CompactionSummary { summary, .. }) => Some(summary::split(summary)),
            _ => None,
        };
        // A cut at `c` keeps msgs[c..]; it must leave something to summarise and never start at a tool result
        // (results follow their call, so the call and all its results stay on one side).
        let cuts: Vec<usize> = (start + 1..msgs.len())
            .filter(|&i| !matches!(msgs[i], AgentMessage::ToolResult(_)))
            .collect();
        if cuts.is_empty() {
            return Err(CompactionError::NothingToCompact(format!(
                "{} message(s) after the last summary and no place to cut",
                msgs.len() - start
            )));
        }
        let cut = self.find_cut(context, config, budget, &cuts).await;
        let dropped = &msgs[start..cut];
        let split_request = if matches!(msgs[cut], AgentMessage::User { .. }) {
            None
        } else {
            dropped.iter().rev().find_map(|m| match m {
                AgentMessage::User { content, .. } => Some(content.clone()),
                _ => None,
            })
        };
        let mut carried = previous.clone().unwrap_or_default();
        summary::file_ops(
            dropped,
            &mut carried.read_files,
            &mut carried.modified_files,
        );
        self.ground(dropped, &mut carried.refs);
        let previous_body = previous.as_ref().map(|p| p.body.as_str());
        let (body, summarized, fallback_reason) = if !self.settings.summarize {
            let why = "summarising is disabled";
            (
                summary::truncation_body(previous_body, dropped, why),
                false,
                Some(why.to_string()),
            )
        } else {
            let split = split_request.is_some();
            match self
                .summarize(dropped, previous_body, focus, split, budget, config, cancel)
                .await
            {
                Ok(text) => (text, true, None),
                Err(SummaryError::Cancelled) => return Err(CompactionError::Cancelled),
                Err(SummaryError::Failed(why)) => {
                    tracing::warn!(error = %why, "summarising failed; truncating instead");
                    self.stats.summary_failures.fetch_add(1, Ordering::Relaxed);
                    let why = format!("summarising failed: {why}");
                    (
                        summary::truncation_body(previous_body, dropped, &why),
                        false,
                        Some(why),
                    )
                }
            }
        };
        let text = summary::compose(&body, split_request.as_deref(), &carried);
        let mut compaction = Compaction {
            summary: text,
            first_kept: cut,
            tokens_before,
            tokens_after: 0,
            reason,
            details: CompactionDetails {
                read_files: carried.read_files.iter().cloned().collect(),
                modified_files: carried.modified_files.iter().cloned().collect(),
                refs: carried.refs.clone(),
                summarized,
                split_turn: split_request.is_some(),
                dropped_messages: dropped.len(),
                fallback_reason,
            },
        };
        compaction.tokens_after = context_tokens(context, &compaction.apply(msgs), config)
            .await
            .tokens;
        self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        if compaction.tokens_after > budget.limit() {
            tracing::warn!(
                tokens_after = compaction.tokens_after,
                limit = budget.limit(),
                "the context is still over budget after compaction (the kept messages are too large)"
            );
        }
        tracing::info!(
            name: "compaction",
            session_id = config.cache_key.as_deref().unwrap_or(""),
            reason = ?reason,
            tokens_before = compaction.tokens_before,
            tokens_after = compaction.tokens_after,
            first_kept = cut,
            dropped_messages = dropped.len(),
            summarized,
        );
        Ok(compaction)
    }

    /// The smallest candidate cut whose kept part fits `keep_recent` (and leaves room for the summary), found by
    /// binary search on exact counts; the last candidate when none fits.
    async fn find_cut(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        budget: Budget,
        cuts: &[usize],
    ) -> usize {
        let msgs = &context.messages;
        // Measured as it will be sent: behind a summary message (templates may need a user message first).
        let placeholder = AgentMessage::CompactionSummary {
            summary: String::new(),
            tokens_before: 0,
            timestamp: 0,
        };
        let with_summary = |from: usize| -> Vec<AgentMessage> {
            std::iter::once(placeholder.clone())
                .chain(msgs[from..].iter().cloned())
                .collect()
        };
        let base = context_tokens(context, std::slice::from_ref(&placeholder), config)
            .await
            .tokens;
        let room = budget
            .limit()
            .saturating_sub(base + budget.summary_tokens() + SUMMARY_FRAMING);
        let keep = budget.keep_recent.min(room);
        let (mut lo, mut hi) = (0, cuts.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let kept = context_tokens(context, &with_summary(cuts[mid]), config)
                .await
                .tokens;
            if kept.saturating_sub(base) <= keep {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        cuts[lo]
    }

    /// Stores each dropped tool result and adds its pointer line (the newest [`MAX_REFS`] are kept).
    fn ground(&self, dropped: &[AgentMessage], refs: &mut Vec<String>) {
        let Some(blobs) = &self.blobs else { return };
        let calls: HashMap<&str, &ToolCall> = dropped
            .iter()
            .filter_map(AgentMessage::as_assistant)
            .flat_map(|a| a.content.iter())
            .filter_map(|b| match b {
                crate::provider::ContentBlock::ToolCall(c) => Some((c.id.as_str(), c)),
                _ => None,
            })
            .collect();
        for m in dropped {
            let AgentMessage::ToolResult(r) = m else {
                continue;
            };
            if r.content.is_empty() {
                continue;
            }
            match blobs.save(&r.content) {
                Ok(reference) => {
                    let call = calls.get(r.tool_call_id.as_str()).map_or_else(
                        || format!("{}(…)", r.tool_name),
                        |c| summary::render_call(c),
                    );
                    let line = summary::pointer(&reference, &call, &r.content, r.is_error);
                    refs.retain(|l| summary::pointer_ref(l) != Some(reference.as_str()));
                    refs.push(line);
                }
                Err(e) => tracing::warn!(error = %e, "could not keep a dropped tool result"),
            }
        }
        if refs.len() > MAX_REFS {
            refs.drain(..refs.len() - MAX_REFS);
        }
    }

    /// Asks the model for the summary of `dropped` (merged into `previous`). The serialised transcript is
    /// shortened from its oldest end until the request fits the window.
    #[allow(clippy::too_many_arguments)]
    async fn summarize(
        &self,
        dropped: &[AgentMessage],
        previous: Option<&str>,
        focus: Option<&str>,
        split: bool,
        budget: Budget,
        config: &AgentLoopConfig,
        cancel: &CancellationToken,
    ) -> Result<String, SummaryError> {
        let max_tokens = budget.summary_tokens();
        let instructions = summary::instructions(previous.is_some(), split, focus);
        let mut omit = 0;
        let request = loop {
            let mut conversation = summary::serialize(&dropped[omit..], MAX_RESULT_CHARS);
            if omit > 0 {
                conversation = format!("[… {omit} earlier messages omitted]\n\n{conversation}");
            }
            let request = CompletionRequest {
                model: config.model.clone(),
                system: Some(summary::SUMMARY_SYSTEM_PROMPT.to_string()),
                messages: vec![Message::user(summary::prompt(
                    &conversation,
                    previous,
                    &instructions,
                ))],
                tool_choice: ToolChoice::None,
                sampling: Sampling::greedy(),
                max_tokens: Some(max_tokens.min(u64::from(u32::MAX)) as u32),
                // No cache key: the summary must not evict the conversation's KV prefix.
                cache_key: None,
                cache_scope: config.cache_key.clone(),
                ..CompletionRequest::default()
            };
            let size = count(config, &request).await.tokens;
            if size + max_tokens <= budget.window {
                break request;
            }
            if omit >= dropped.len() {
                return Err(SummaryError::Failed(format!(
                    "the summarisation prompt ({size} tokens) does not fit the window ({})",
                    budget.window
                )));
            }
            omit += ((dropped.len() - omit) / 4).max(1);
        };
        let done = collect(config.provider.stream(request, cancel.child_token())).await;
        if cancel.is_cancelled() {
            return Err(SummaryError::Cancelled);
        }
        if let Some(e) = done.error {
            return Err(SummaryError::Failed(e.message));
        }
        let text = done.message.text();
        if text.trim().is_empty() {
            return Err(SummaryError::Failed(
                "the model returned an empty summary".into(),
            ));
        }
        Ok(text.trim().to_string())
    }
}

enum SummaryError {
    Cancelled,
    Failed(String),
}

#[async_trait]
impl ContextPolicy for Compactor {
    async fn check(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        cancel: &CancellationToken,
    ) -> Option<Compaction> {
        self.stats.checks.fetch_add(1, Ordering::Relaxed);
        let tokens = context_tokens(context, &context.messages, config).await;
        self.stats
            .last_context_tokens
            .store(tokens.tokens, Ordering::Relaxed);
        let budget = self.budget(config);
        tracing::debug!(
            context_tokens = tokens.tokens,
            exact = tokens.exact,
            limit = budget.limit(),
            "context budget check"
        );
        if !self.settings.enabled || tokens.tokens <= budget.limit() {
            return None;
        }
        self.compact(context, config, None, CompactionReason::Threshold, cancel)
            .await
            .map_err(|e| tracing::warn!(error = %e, "compaction at the budget limit failed"))
            .ok()
    }

    async fn on_overflow(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        cancel: &CancellationToken,
    ) -> Option<Compaction> {
        if !self.settings.enabled {
            return None;
        }
        self.compact(context, config, None, CompactionReason::Overflow, cancel)
            .await
            .map_err(|e| tracing::warn!(error = %e, "compaction after a context overflow failed"))
            .ok()
    }
}
