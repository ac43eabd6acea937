//! Streaming partial tool output without unbounded growth: the bounded channel a call's [`ToolUpdate`]s travel
//! through, and [`CoalescedUpdates`], which a streaming tool (bash) pushes its output into. It never waits for the
//! consumer: what does not fit in the channel is merged into the next update, and when the consumer is so slow
//! that the merged text passes a cap, only its latest tail is kept (with a marker saying how much was skipped).

use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{channel, Receiver, Sender};

use super::truncate::{format_size, tail_bytes};
use crate::tools::tool::{ToolContext, ToolUpdate};

/// Updates a channel from [`update_channel`] holds before tools start merging.
pub const UPDATE_CHANNEL_CAPACITY: usize = 64;
/// Most text [`CoalescedUpdates`] keeps waiting for room by default (64 KB); older text is skipped.
pub const MAX_PENDING_UPDATE_BYTES: usize = 64 * 1024;

/// The bounded channel for [`ToolContext::with_updates`]: the sender goes into every call's context, the
/// receiver to whoever forwards updates (the agent loop). Memory stays bounded whatever the consumer does:
/// at most [`UPDATE_CHANNEL_CAPACITY`] updates wait, each of bounded size.
pub fn update_channel() -> (Sender<ToolUpdate>, Receiver<ToolUpdate>) {
    channel(UPDATE_CHANNEL_CAPACITY)
}

/// A call's stream of partial output: pushes never wait; text that finds the channel full waits here, merged,
/// and goes out with the next push that finds room.
#[derive(Debug)]
pub struct CoalescedUpdates {
    pending: String,
    /// Bytes dropped from the front of `pending` since the last delivered update.
    skipped: u64,
    max_pending: usize,
}

impl CoalescedUpdates {
    /// Keeps at most `max_pending` bytes (at least 1 KB) waiting for room.
    pub fn new(max_pending: usize) -> Self {
        Self {
            pending: String::new(),
            skipped: 0,
            max_pending: max_pending.max(1024),
        }
    }

    /// Bytes waiting for room in the channel.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Queues `text` and sends everything waiting if the channel has room; never waits. When there is no room,
    /// at most the latest `max_pending` bytes keep waiting. Without a listener nothing is kept.
    pub fn push(&mut self, ctx: &ToolContext, text: &str) {
        if ctx.updates.is_none() || text.is_empty() {
            return;
        }
        self.pending.push_str(text);
        if self.try_deliver(ctx) || self.pending.len() <= self.max_pending {
            return;
        }
        // The consumer is behind: keep only the latest tail.
        let keep = tail_bytes(&self.pending, self.max_pending).len();
        let cut = self.pending.len() - keep;
        self.skipped += cut as u64;
        self.pending.drain(..cut);
    }

    /// Sends what is waiting, giving the consumer up to `wait` to make room (zero: one try, no waiting).
    pub async fn flush(&mut self, ctx: &ToolContext, wait: Duration) {
        if self.try_deliver(ctx) {
            return;
        }
        let Some(tx) = &ctx.updates else {
            return;
        };
        // A consumer that stays full past `wait` loses this last piece; the call's result carries the tail anyway.
        if let Ok(Ok(permit)) = tokio::time::timeout(wait, tx.reserve()).await {
            permit.send(self.take_update(ctx));
        }
    }

    /// One non-waiting send of everything pending; `true` when nothing is left waiting.
    fn try_deliver(&mut self, ctx: &ToolContext) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let Some(tx) = &ctx.updates else {
            return true;
        };
        match tx.try_reserve() {
            Ok(permit) => {
                permit.send(self.take_update(ctx));
                true
            }
            Err(TrySendError::Full(())) => false,
            Err(TrySendError::Closed(())) => {
                // Nobody listens any more: nothing to keep.
                self.pending.clear();
                self.skipped = 0;
                true
            }
        }
    }

    /// The pending text as one update, led by a marker when older text was skipped; resets the state.
    fn take_update(&mut self, ctx: &ToolContext) -> ToolUpdate {
        let body = std::mem::take(&mut self.pending);
        let skipped = std::mem::take(&mut self.skipped);
        let text = if skipped == 0 {
            body
        } else {
            let size = format_size(usize::try_from(skipped).unwrap_or(usize::MAX));
            format!("[... {size} of output not streamed ...]\n{body}")
        };
        ToolUpdate {
            call_id: ctx.call_id.clone(),
            text,
        }
    }
}

impl Default for CoalescedUpdates {
    fn default() -> Self {
        Self::new(MAX_PENDING_UPDATE_BYTES)
    }
}
