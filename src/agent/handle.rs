//! `Agent`: the stateful wrapper around `agent_loop` — the transcript, the steering and follow-up queues, abort,
//! and listeners that are awaited in registration order for every event.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::events::Emitter;
use super::events::{AgentEndReason, AgentEvent};
use super::hooks::{AgentContext, AgentLoopConfig, MessageSource};
use super::run;
use crate::tools::tool::Tool;
use crate::transcript::AgentMessage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Ready,
    Running,
    Completed,
    Failed,
    Cancelled,
}

/// How queued messages are delivered: one per poll (Pi's default) or all at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueMode {
    #[default]
    OneAtATime,
    All,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AgentError {
    /// `prompt`/`continue_` while a run is in progress: steer or follow up instead, or wait.
    #[error("the agent is already running; use steer or follow_up, or wait for it to finish")]
    AlreadyRunning,
    /// `continue_` needs a transcript ending in a user message or tool result.
    #[error("nothing to continue: {0}")]
    CannotContinue(String),
}

/// A snapshot of the agent's state.
#[derive(Clone)]
pub struct AgentState {
    pub system_prompt: String,
    pub model: String,
    pub tools: Vec<Arc<dyn Tool>>,
    pub messages: Vec<AgentMessage>,
    pub status: AgentStatus,
    /// Ids of tool calls that are running.
    pub pending_tool_calls: BTreeSet<String>,
    /// The assistant message being streamed, if any.
    pub streaming: Option<AgentMessage>,
    pub last_error: Option<String>,
}

impl AgentState {
    pub fn is_running(&self) -> bool {
        self.status == AgentStatus::Running
    }
}

pub type Listener = Arc<dyn Fn(AgentEvent) -> BoxFuture<'static, ()> + Send + Sync>;

struct Inner {
    state: Mutex<AgentState>,
    config: Mutex<AgentLoopConfig>,
    steering: Arc<Mutex<VecDeque<AgentMessage>>>,
    follow_ups: Arc<Mutex<VecDeque<AgentMessage>>>,
    steering_mode: Mutex<QueueMode>,
    follow_up_mode: Mutex<QueueMode>,
    listeners: Mutex<Vec<Listener>>,
    cancel: Mutex<Option<CancellationToken>>,
    /// `true` while a run is in progress.
    running: watch::Sender<bool>,
}

/// A long-lived agent. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

/// Locks a mutex, recovering the data if a listener panicked while holding it (the state stays usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Agent {
    pub fn new(
        config: AgentLoopConfig,
        system_prompt: impl Into<String>,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Self {
        let (running, _) = watch::channel(false);
        let model = config.model.clone();
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(AgentState {
                    system_prompt: system_prompt.into(),
                    model,
                    tools,
                    messages: Vec::new(),
                    status: AgentStatus::Ready,
                    pending_tool_calls: BTreeSet::new(),
                    streaming: None,
                    last_error: None,
                }),
                config: Mutex::new(config),
                steering: Arc::default(),
                follow_ups: Arc::default(),
                steering_mode: Mutex::new(QueueMode::OneAtATime),
                follow_up_mode: Mutex::new(QueueMode::OneAtATime),
                listeners: Mutex::new(Vec::new()),
                cancel: Mutex::new(None),
                running,
            }),
        }
    }

    pub fn state(&self) -> AgentState {
        lock(&self.inner.state).clone()
    }

    // Setters take effect from the next turn's snapshot (the running turn keeps what it started with).
    pub fn set_system_prompt(&self, s: impl Into<String>) {
        lock(&self.inner.state).system_prompt = s.into();
    }
    pub fn set_model(&self, model: impl Into<String>) {
        let model = model.into();
        lock(&self.inner.config).model = model.clone();
        lock(&self.inner.state).model = model;
    }
    pub fn set_tools(&self, tools: Vec<Arc<dyn Tool>>) {
        lock(&self.inner.state).tools = tools;
    }
    pub fn set_messages(&self, messages: Vec<AgentMessage>) {
        lock(&self.inner.state).messages = messages;
    }
    pub fn update_config(&self, f: impl FnOnce(&mut AgentLoopConfig)) {
        f(&mut lock(&self.inner.config));
    }
    pub fn set_steering_mode(&self, mode: QueueMode) {
        *lock(&self.inner.steering_mode) = mode;
    }
    pub fn set_follow_up_mode(&self, mode: QueueMode) {
        *lock(&self.inner.follow_up_mode) = mode;
    }

    /// Adds a listener; every event is passed to every listener in registration order, each awaited.
    pub fn subscribe(&self, listener: Listener) {
        lock(&self.inner.listeners).push(listener);
    }

    /// Queues a message delivered after the current tool batch (remaining calls of the batch are skipped).
    /// True when a run is in progress and will deliver it (a run that has passed its last check runs once more
    /// for it); false when the agent is idle: the message waits for the next `prompt` or `continue_`.
    pub fn steer(&self, message: AgentMessage) -> bool {
        let mut queue = lock(&self.inner.steering);
        queue.push_back(message);
        // Read under the queue's lock: a finishing run checks the queues and clears `running` under it too.
        *self.inner.running.borrow()
    }

    /// Queues a message delivered when the agent would otherwise stop. The return value is as for `steer`.
    pub fn follow_up(&self, message: AgentMessage) -> bool {
        let mut queue = lock(&self.inner.follow_ups);
        queue.push_back(message);
        *self.inner.running.borrow()
    }

    /// Whether steering or follow-up messages are waiting.
    pub fn has_queued(&self) -> bool {
        !lock(&self.inner.steering).is_empty() || !lock(&self.inner.follow_ups).is_empty()
    }

    pub fn clear_queues(&self) {
        lock(&self.inner.steering).clear();
        lock(&self.inner.follow_ups).clear();
    }

    /// Cancels the running run: the provider stream and running tools see it.
    pub fn abort(&self) {
        if let Some(c) = lock(&self.inner.cancel).as_ref() {
            c.cancel();
        }
    }

    /// Resolves when no run is in progress.
    pub async fn wait_for_idle(&self) {
        let mut rx = self.inner.running.subscribe();
        // An error means the sender is gone, i.e. the agent itself: nothing can be running.
        let _ = rx.wait_for(|running| !running).await;
    }

    /// Adds `message` and runs until the agent stops. An error if a run is already in progress.
    pub async fn prompt(&self, message: AgentMessage) -> Result<AgentEndReason, AgentError> {
        self.start_run(vec![message], false).await
    }

    /// Runs from the transcript as it is (its last message must be a user message or a tool result), or, when
    /// messages are queued, delivers them (steering first, then follow-ups) as Pi's `continue` does.
    pub async fn continue_(&self) -> Result<AgentEndReason, AgentError> {
        if self.has_queued() {
            return self.start_run(vec![], true).await;
        }
        {
            let state = lock(&self.inner.state);
            match state.messages.last() {
                None => return Err(AgentError::CannotContinue("the transcript is empty".into())),
                Some(AgentMessage::Assistant(_)) => {
                    return Err(AgentError::CannotContinue(
                        "the last message is the assistant's; prompt instead".into(),
                    ))
                }
                Some(_) => {}
            }
        }
        self.start_run(vec![], false).await
    }

    /// Takes every queued message, steering first.
    fn drain_queues(
        steering: &mut VecDeque<AgentMessage>,
        follow_ups: &mut VecDeque<AgentMessage>,
    ) -> Vec<AgentMessage> {
        steering.drain(..).chain(follow_ups.drain(..)).collect()
    }

    fn source(queue: &Arc<Mutex<VecDeque<AgentMessage>>>, mode: QueueMode) -> MessageSource {
        let queue = queue.clone();
        Arc::new(move || {
            let mut q = lock(&queue);
            match mode {
                QueueMode::All => q.drain(..).collect(),
                QueueMode::OneAtATime => q.pop_front().into_iter().collect(),
            }
        })
    }

    /// Claims the agent, then runs: first with `prompts` (plus every queued message when `take_queued`), then
    /// once more for each batch of messages queued after the loop's last look at the queues, so a steer or
    /// follow-up accepted while `running` was true is never left behind. A run that did not complete (aborted,
    /// failed, out of turns) leaves late messages queued for the next prompt.
    async fn start_run(
        &self,
        prompts: Vec<AgentMessage>,
        take_queued: bool,
    ) -> Result<AgentEndReason, AgentError> {
        let mut started = false;
        self.inner.running.send_if_modified(|running| {
            if *running {
                false
            } else {
                *running = true;
                started = true;
                true
            }
        });
        if !started {
            return Err(AgentError::AlreadyRunning);
        }
        let mut prompts = prompts;
        if take_queued {
            let mut steering = lock(&self.inner.steering);
            let mut follow_ups = lock(&self.inner.follow_ups);
            prompts.extend(Self::drain_queues(&mut steering, &mut follow_ups));
        }
        loop {
            let reason = self.run_once(prompts).await;
            let mut steering = lock(&self.inner.steering);
            let mut follow_ups = lock(&self.inner.follow_ups);
            if reason != AgentEndReason::Completed || (steering.is_empty() && follow_ups.is_empty())
            {
                // Cleared under the queues' locks: `steer` reads it under them, so a message pushed after this
                // reports that no run will deliver it.
                self.inner.running.send_replace(false);
                return Ok(reason);
            }
            prompts = Self::drain_queues(&mut steering, &mut follow_ups);
        }
    }

    /// One pass of the agent loop from the current state with `prompts`.
    async fn run_once(&self, prompts: Vec<AgentMessage>) -> AgentEndReason {
        let cancel = CancellationToken::new();
        *lock(&self.inner.cancel) = Some(cancel.clone());
        let (context, config) = {
            let mut state = lock(&self.inner.state);
            state.status = AgentStatus::Running;
            state.last_error = None;
            let mut config = lock(&self.inner.config).clone();
            config.model = state.model.clone();
            config.steering = Some(Self::source(
                &self.inner.steering,
                *lock(&self.inner.steering_mode),
            ));
            config.follow_up = Some(Self::source(
                &self.inner.follow_ups,
                *lock(&self.inner.follow_up_mode),
            ));
            (
                AgentContext {
                    system_prompt: state.system_prompt.clone(),
                    messages: state.messages.clone(),
                    tools: state.tools.clone(),
                },
                config,
            )
        };
        let (tx, mut rx) = mpsc::channel(32);
        let task =
            tokio::spawn(
                async move { run::run(prompts, context, config, cancel, &Emitter(tx)).await },
            );
        let mut reason = AgentEndReason::Error;
        while let Some(envelope) = rx.recv().await {
            let Some(ev) = envelope.into_event() else {
                continue;
            };
            self.apply(&ev, &mut reason);
            let listeners = lock(&self.inner.listeners).clone();
            for l in listeners {
                l(ev.clone()).await;
            }
        }
        if task.await.is_err() {
            // The loop task panicked: a bug. Record it rather than leave the agent stuck in Running.
            let mut state = lock(&self.inner.state);
            state.status = AgentStatus::Failed;
            state.last_error = Some("internal error: the agent loop panicked".into());
            reason = AgentEndReason::Error;
        }
        *lock(&self.inner.cancel) = None;
        reason
    }

    /// Folds one event into the state.
    fn apply(&self, ev: &AgentEvent, reason: &mut AgentEndReason) {
        let mut state = lock(&self.inner.state);
        match ev {
            AgentEvent::MessageStart { message } | AgentEvent::MessageUpdate { message, .. } => {
                if matches!(message, AgentMessage::Assistant(_)) {
                    state.streaming = Some(message.clone());
                }
            }
            AgentEvent::MessageEnd { message } => {
                state.streaming = None;
                state.messages.push(message.clone());
            }
            AgentEvent::ToolExecutionStart { tool_call_id, .. } => {
                state.pending_tool_calls.insert(tool_call_id.clone());
            }
            AgentEvent::ToolExecutionEnd { tool_call_id, .. } => {
                state.pending_tool_calls.remove(tool_call_id);
            }
            AgentEvent::Compaction {
                message,
                first_kept,
                ..
            } => {
                let at = (*first_kept).min(state.messages.len());
                let kept = state.messages.split_off(at);
                state.messages = std::iter::once(message.clone()).chain(kept).collect();
            }
            AgentEvent::AgentEnd {
                reason: r, error, ..
            } => {
                *reason = *r;
                state.status = match r {
                    AgentEndReason::Completed => AgentStatus::Completed,
                    AgentEndReason::MaxTurns => AgentStatus::Completed,
                    AgentEndReason::Error => AgentStatus::Failed,
                    AgentEndReason::Aborted => AgentStatus::Cancelled,
                    AgentEndReason::Stopped | AgentEndReason::Failed => AgentStatus::Failed,
                };
                state.last_error = error.clone();
                state.pending_tool_calls.clear();
            }
            _ => {}
        }
    }
}
