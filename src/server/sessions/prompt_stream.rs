//! The event stream of one `POST /v1/sessions/{id}/prompt`: the run's agent events and its approval requests as
//! server-sent events, ending with `agent_end` and `[DONE]`.
//!
//! The stream keeps two promises to its client:
//! - the last `agent_end` is sent only once the run has **finished** (the session let go), so a client that reads
//!   it, or `[DONE]`, and at once sends the next prompt, a rewind or a branch is never refused as busy. (A run that
//!   takes a follow-up queued after its loop's last look runs the loop again: its `agent_end` is followed by the
//!   next `agent_start` on the same stream.)
//! - a client that closes the stream before the run ended aborts the run (as closing a completion stream cancels
//!   it).

use axum::response::sse::Event;
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::agent::AgentEvent;
use crate::app::approvals::ApprovalRequest;
use crate::server::sse;

/// What the stream reads: the run's events, its approval requests, and the signal that the run has finished.
pub struct RunChannels {
    pub events: mpsc::Receiver<AgentEvent>,
    pub approvals: mpsc::UnboundedReceiver<ApprovalRequest>,
    /// Sent (or dropped) once the run is over and the session is free for the next request.
    pub finished: oneshot::Receiver<()>,
}

/// Calls `abort` when the prompt stream is dropped while a run goes on.
struct AbortOnDrop<F: FnOnce()> {
    abort: Option<F>,
    running: bool,
}

impl<F: FnOnce()> Drop for AbortOnDrop<F> {
    fn drop(&mut self) {
        if self.running {
            if let Some(abort) = self.abort.take() {
                abort();
            }
        }
    }
}

struct State<F: FnOnce()> {
    ch: RunChannels,
    watcher: AbortOnDrop<F>,
    /// An `agent_end` not sent yet: sent when the run finishes, or when the next run of the same prompt starts.
    held_end: Option<AgentEvent>,
    ended: bool,
}

/// What the stream waits for next.
enum Next {
    Approval(ApprovalRequest),
    Event(Option<AgentEvent>),
    Finished,
}

/// The server-sent events of the run that `ch` carries; `abort` cancels the run when the client leaves early.
pub fn events<F>(ch: RunChannels, abort: F) -> BoxStream<'static, Event>
where
    F: FnOnce() + Send + 'static,
{
    let state = State {
        ch,
        watcher: AbortOnDrop {
            abort: Some(abort),
            running: true,
        },
        held_end: None,
        ended: false,
    };
    stream::unfold(state, |mut st| async move {
        if st.ended {
            return None;
        }
        let next = tokio::select! {
            biased;
            Some(request) = st.ch.approvals.recv() => Next::Approval(request),
            ev = st.ch.events.recv() => Next::Event(ev),
            _ = &mut st.ch.finished => Next::Finished,
        };
        let mut out = Vec::new();
        match next {
            Next::Approval(request) => {
                let mut v = serde_json::to_value(&request).unwrap_or_default();
                v["type"] = json!("approval_request");
                out.push(sse::json_event(&v));
            }
            Next::Event(Some(ev)) => {
                if let Some(end) = st.held_end.take() {
                    out.push(sse::json_event(&end));
                }
                if matches!(ev, AgentEvent::AgentEnd { .. }) {
                    // The run has ended but may still be letting the session go: the end waits for that.
                    st.watcher.running = false;
                    st.held_end = Some(ev);
                } else {
                    st.watcher.running = true;
                    out.push(sse::json_event(&ev));
                }
            }
            Next::Event(None) | Next::Finished => {
                // The run is over (the task that runs it holds a sender until then): whatever it sent is queued.
                if let Some(end) = st.held_end.take() {
                    out.push(sse::json_event(&end));
                }
                while let Ok(ev) = st.ch.events.try_recv() {
                    out.push(sse::json_event(&ev));
                }
                out.push(sse::done());
                st.watcher.running = false;
                st.ended = true;
            }
        }
        Some((stream::iter(out), st))
    })
    .flatten()
    .boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use futures::FutureExt;

    use super::*;
    use crate::agent::AgentEndReason;

    fn end() -> AgentEvent {
        AgentEvent::AgentEnd {
            reason: AgentEndReason::Completed,
            messages: Vec::new(),
            error: None,
        }
    }

    struct Rig {
        events: mpsc::Sender<AgentEvent>,
        _approvals: mpsc::UnboundedSender<ApprovalRequest>,
        finished: Option<oneshot::Sender<()>>,
        aborted: Arc<AtomicBool>,
        stream: BoxStream<'static, Event>,
    }

    fn rig() -> Rig {
        let (events, rx) = mpsc::channel(16);
        let (approvals, approvals_rx) = mpsc::unbounded_channel();
        let (finished, finished_rx) = oneshot::channel();
        let aborted = Arc::new(AtomicBool::new(false));
        let flag = aborted.clone();
        let stream = super::events(
            RunChannels {
                events: rx,
                approvals: approvals_rx,
                finished: finished_rx,
            },
            move || flag.store(true, Ordering::SeqCst),
        );
        Rig {
            events,
            _approvals: approvals,
            finished: Some(finished),
            aborted,
            stream,
        }
    }

    /// The event's text as the client reads it.
    fn text(ev: &Event) -> String {
        format!("{ev:?}")
    }

    #[tokio::test]
    async fn the_end_waits_until_the_run_has_let_the_session_go() {
        let mut r = rig();
        r.events.send(AgentEvent::AgentStart).await.unwrap();
        r.events.send(end()).await.unwrap();
        let first = r.stream.next().await.unwrap();
        assert!(text(&first).contains("agent_start"), "{}", text(&first));
        // The run has sent its end but not finished: nothing more is sent yet.
        for _ in 0..10 {
            tokio::task::yield_now().await;
            assert!(r.stream.next().now_or_never().is_none());
        }
        r.finished.take().unwrap().send(()).unwrap();
        let rest: Vec<String> = r.stream.by_ref().map(|e| text(&e)).collect().await;
        assert_eq!(rest.len(), 2, "{rest:?}");
        assert!(rest[0].contains("agent_end"), "{rest:?}");
        assert!(rest[1].contains("[DONE]"), "{rest:?}");
        assert!(!r.aborted.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_second_loop_of_the_same_run_follows_on_the_same_stream() {
        let mut r = rig();
        for ev in [AgentEvent::AgentStart, end(), AgentEvent::AgentStart, end()] {
            r.events.send(ev).await.unwrap();
        }
        r.finished.take().unwrap().send(()).unwrap();
        let all: Vec<String> = r.stream.by_ref().map(|e| text(&e)).collect().await;
        let kinds: Vec<&str> = all
            .iter()
            .map(|t| {
                ["agent_start", "agent_end", "[DONE]"]
                    .into_iter()
                    .find(|k| t.contains(k))
                    .unwrap_or("?")
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "agent_start",
                "agent_end",
                "agent_start",
                "agent_end",
                "[DONE]"
            ]
        );
    }

    #[tokio::test]
    async fn leaving_during_the_run_aborts_it_and_after_its_end_does_not() {
        let mut r = rig();
        r.events.send(AgentEvent::AgentStart).await.unwrap();
        assert!(text(&r.stream.next().await.unwrap()).contains("agent_start"));
        drop(r.stream);
        assert!(r.aborted.load(Ordering::SeqCst), "left mid-run");

        let mut r = rig();
        r.events.send(AgentEvent::AgentStart).await.unwrap();
        r.events.send(end()).await.unwrap();
        assert!(text(&r.stream.next().await.unwrap()).contains("agent_start"));
        // Read up to the held end, then leave before the run let the session go.
        assert!(r.stream.next().now_or_never().is_none());
        drop(r.stream);
        assert!(!r.aborted.load(Ordering::SeqCst), "left after the end");
    }
}
