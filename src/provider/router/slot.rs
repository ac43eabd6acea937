//! One model of the router: its state (unloaded, loading, loaded, failed), the requests it runs and those
//! waiting for it to load, and when it may be unloaded. Loading runs on a blocking thread, not tied to the request
//! that started it (the others wait for the same load); everyone waiting is woken when it ends.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{ModelSpec, Shared};
use crate::provider::{
    KeepAlive, ModelDescriptor, ModelState, ModelStatus, Provider, ProviderError,
};

enum State {
    Unloaded,
    Loading,
    Loaded(Arc<dyn Provider>),
    Failed(String),
}

struct Inner {
    state: State,
    /// Load attempts so far: a waiter fails only on the failure of the load it waited for.
    generation: u64,
    in_flight: usize,
    waiting: usize,
    last_used: Instant,
    /// When it may be unloaded while idle (`None`: not on a timer).
    expires: Option<Instant>,
}

pub(super) struct Slot {
    pub(super) spec: ModelSpec,
    inner: Mutex<Inner>,
    changed: tokio::sync::Notify,
}

impl Slot {
    pub(super) fn new(spec: ModelSpec) -> Self {
        Self {
            spec,
            inner: Mutex::new(Inner {
                state: State::Unloaded,
                generation: 0,
                in_flight: 0,
                waiting: 0,
                last_used: Instant::now(),
                expires: None,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The counters hold no invariant a panic elsewhere could break: recover them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The loaded provider, loading it first (or waiting for the load under way); counts the request in flight.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Lease, ProviderError> {
        // The load this request waits for (it is counted in `waiting` while it has one).
        let mut waiting_for: Option<u64> = None;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let start = {
                let mut g = self.lock();
                match &g.state {
                    State::Loaded(p) => {
                        let provider = p.clone();
                        if waiting_for.is_some() {
                            g.waiting -= 1;
                        }
                        g.in_flight += 1;
                        g.last_used = Instant::now();
                        g.expires = None;
                        return Ok(Lease {
                            slot: self.clone(),
                            shared: shared.clone(),
                            provider,
                            released: false,
                        });
                    }
                    State::Failed(message) if waiting_for == Some(g.generation) => {
                        let message = message.clone();
                        g.waiting -= 1;
                        return Err(ProviderError::Load {
                            model: self.spec.id.clone(),
                            message,
                        });
                    }
                    State::Loading => {
                        if waiting_for.is_none() {
                            if g.waiting >= shared.options.max_waiting {
                                return Err(ProviderError::Busy(format!(
                                    "model `{}` is loading and {} requests already wait for it",
                                    self.spec.id, g.waiting
                                )));
                            }
                            g.waiting += 1;
                            waiting_for = Some(g.generation);
                        }
                        false
                    }
                    State::Unloaded | State::Failed(_) => {
                        g.state = State::Loading;
                        g.generation += 1;
                        if waiting_for.is_none() {
                            g.waiting += 1;
                        }
                        waiting_for = Some(g.generation);
                        true
                    }
                }
            };
            if start {
                if !shared.make_room(self, self.spec.size_bytes) {
                    let mut g = self.lock();
                    g.state = State::Unloaded;
                    g.waiting -= 1;
                    drop(g);
                    self.changed.notify_waiters();
                    return Err(ProviderError::Busy(format!(
                        "model `{}` cannot be loaded now: the loaded models are busy and none may be unloaded \
                         for it",
                        self.spec.id
                    )));
                }
                self.clone().spawn_load();
            }
            let cancelled = async {
                match cancel {
                    Some(c) => c.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut notified => {}
                () = cancelled => {
                    self.lock().waiting -= 1;
                    return Err(ProviderError::Cancelled);
                }
            }
        }
    }

    /// Runs the loader on a blocking thread and records what it gave.
    fn spawn_load(self: Arc<Self>) {
        let started = Instant::now();
        let loader = self.spec.loader.clone();
        let slot = self;
        let finish = move |outcome: Result<Arc<dyn Provider>, ProviderError>| {
            let mut g = slot.lock();
            g.state = match outcome {
                Ok(p) => {
                    tracing::info!(model = %slot.spec.id, secs = started.elapsed().as_secs_f64(), "model loaded");
                    State::Loaded(p)
                }
                Err(e) => {
                    tracing::warn!(model = %slot.spec.id, error = %e, "model failed to load");
                    State::Failed(e.to_string())
                }
            };
            g.last_used = Instant::now();
            drop(g);
            slot.changed.notify_waiters();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let outcome = tokio::task::spawn_blocking(move || loader())
                        .await
                        .unwrap_or_else(|e| {
                            Err(ProviderError::Internal(format!(
                                "the loading task failed: {e}"
                            )))
                        });
                    finish(outcome);
                });
            }
            Err(_) => finish(loader()),
        }
    }

    /// Loaded or loading: it holds (or is about to hold) memory.
    pub(super) fn holds_memory(&self) -> bool {
        matches!(self.lock().state, State::Loaded(_) | State::Loading)
    }

    /// Since when it is loaded and unused (`None`: not loaded, or in use).
    pub(super) fn idle_since(&self) -> Option<Instant> {
        let g = self.lock();
        (matches!(g.state, State::Loaded(_)) && g.in_flight == 0).then_some(g.last_used)
    }

    /// The loaded provider, if it is loaded.
    pub(super) fn loaded_provider(&self) -> Option<Arc<dyn Provider>> {
        match &self.lock().state {
            State::Loaded(p) => Some(p.clone()),
            _ => None,
        }
    }

    /// Unloads it (requests still running keep their handle to it until they end).
    pub(super) fn unload(&self) {
        let mut g = self.lock();
        if matches!(g.state, State::Loaded(_) | State::Failed(_)) {
            g.state = State::Unloaded;
            g.expires = None;
            tracing::info!(model = %self.spec.id, "model unloaded");
        }
    }

    /// Unloads it when it is idle and its keep-alive ran out by `now`.
    pub(super) fn unload_if_expired(&self, now: Instant) {
        let expired = {
            let g = self.lock();
            matches!(g.state, State::Loaded(_))
                && g.in_flight == 0
                && g.expires.is_some_and(|e| e <= now)
        };
        if expired {
            self.unload();
        }
    }

    pub(super) fn status(&self) -> ModelStatus {
        let g = self.lock();
        let loaded = match &g.state {
            State::Loaded(p) => p.models().into_iter().next(),
            _ => None,
        };
        let model = match loaded {
            Some(d) => ModelDescriptor {
                id: self.spec.id.clone(),
                ..d
            },
            None => ModelDescriptor {
                id: self.spec.id.clone(),
                context_window: self.spec.context_window,
                max_output_tokens: self.spec.context_window,
                device: None,
            },
        };
        let state = match &g.state {
            State::Unloaded => ModelState::Unloaded,
            State::Loading => ModelState::Loading,
            State::Loaded(_) => ModelState::Loaded,
            State::Failed(message) => ModelState::Failed {
                message: message.clone(),
            },
        };
        let now = Instant::now();
        let expires_at = g
            .expires
            .map(|e| SystemTime::now() + e.saturating_duration_since(now));
        ModelStatus {
            model,
            state,
            size_bytes: (self.spec.size_bytes > 0).then_some(self.spec.size_bytes),
            expires_at,
            in_flight: g.in_flight + g.waiting,
            details: self.spec.details.clone(),
        }
    }
}

/// A request's hold on a loaded model: the model is not unloaded for idleness while a lease lives.
pub(super) struct Lease {
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    provider: Arc<dyn Provider>,
    released: bool,
}

impl Lease {
    pub(super) fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Ends the request's hold; `keep_alive` (else the router's idle timeout) says how long the model stays.
    pub(super) fn release(mut self, keep_alive: Option<KeepAlive>) {
        self.finish(keep_alive);
    }

    fn finish(&mut self, keep_alive: Option<KeepAlive>) {
        if self.released {
            return;
        }
        self.released = true;
        let now = Instant::now();
        let unload_now = {
            let mut g = self.slot.lock();
            g.in_flight = g.in_flight.saturating_sub(1);
            g.last_used = now;
            let keep = keep_alive.or(self.shared.options.idle_unload.map(KeepAlive::For));
            g.expires = match keep {
                Some(KeepAlive::Unload) => Some(now),
                Some(KeepAlive::For(d)) => Some(now + d),
                Some(KeepAlive::Forever) | None => None,
            };
            g.in_flight == 0 && keep == Some(KeepAlive::Unload)
        };
        if unload_now {
            self.slot.unload();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.finish(None);
    }
}
