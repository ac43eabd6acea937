//! Agent sessions over HTTP: coding sessions of the application layer ([`CodingSession`], the same one `agentd
//! chat` and `agentd run` drive: system prompt, compaction with grounding and `recall`, the JSONL session file)
//! exposed as resources under `/v1/sessions`. A session is created with a model, a set of built-in tools, a
//! policy and a workspace root (every file tool is confined to it); it can be resumed from its file by id. Its
//! model calls go through the server's admission queue like every other request.
//!
//! This file holds the registry of live sessions and what one session is; `routes` has the handlers and
//! `gate` the provider wrapper that queues the agent's model calls.

mod gate;
mod routes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentEvent;
use crate::app::CodingSession;

pub use gate::GatedProvider;
pub use routes::routes;

/// Where sessions live and what a session gets when the request does not say.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The directory of the JSONL files (`None`: the session store's default for the workspace,
    /// `$AGENTD_HOME/sessions/<workspace slug>/`).
    pub dir: Option<PathBuf>,
    /// The workspace of a session whose request names none (`None`: the server's working directory).
    pub default_workspace: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One live session.
pub struct Session {
    pub id: String,
    /// The agent, its tools and its session file.
    pub coding: CodingSession,
    pub info: SessionInfo,
    /// Where the running prompt's events go (the open SSE response), if anyone listens.
    subscriber: Arc<Mutex<Option<mpsc::UnboundedSender<AgentEvent>>>>,
    /// Held by the running prompt: one prompt at a time.
    prompt_lock: Arc<tokio::sync::Mutex<()>>,
}

/// What a session was created with (the body of `GET /v1/sessions/{id}` with its status).
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub id: String,
    pub model: String,
    pub tools: Vec<String>,
    pub policy: String,
    pub workspace: PathBuf,
    /// The JSONL session file.
    pub path: PathBuf,
    pub created: u64,
}

impl Session {
    /// Wires `coding` (whose recorder therefore hears every event first) to the event subscriber.
    pub fn new(coding: CodingSession, info: SessionInfo) -> Arc<Self> {
        let subscriber: Arc<Mutex<Option<mpsc::UnboundedSender<AgentEvent>>>> = Arc::default();
        let forward = subscriber.clone();
        coding.subscribe(Arc::new(move |event: AgentEvent| {
            let forward = forward.clone();
            async move {
                if let Some(tx) = lock(&forward).as_ref() {
                    let _ = tx.send(event);
                }
            }
            .boxed()
        }));
        Arc::new(Self {
            id: info.id.clone(),
            coding,
            info,
            subscriber,
            prompt_lock: Arc::default(),
        })
    }

    /// Routes the events of the next run to `tx`.
    fn listen(&self, tx: mpsc::UnboundedSender<AgentEvent>) {
        *lock(&self.subscriber) = Some(tx);
    }
}

/// The live sessions, by id.
pub struct Sessions {
    pub options: SessionOptions,
    live: Mutex<HashMap<String, Arc<Session>>>,
    /// Cancelled when the server stops; runs started after it are refused.
    shutdown: CancellationToken,
}

impl Sessions {
    pub fn new(options: SessionOptions, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            options,
            live: Mutex::new(HashMap::new()),
            shutdown,
        })
    }

    pub fn insert(&self, session: Arc<Session>) {
        lock(&self.live).insert(session.id.clone(), session);
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.live).get(id).cloned()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.live).remove(id)
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = lock(&self.live).values().cloned().collect();
        all.sort_by(|a, b| (a.info.created, &a.id).cmp(&(b.info.created, &b.id)));
        all
    }

    /// Aborts every running agent (shutdown).
    pub fn abort_all(&self) {
        for s in lock(&self.live).values() {
            s.coding.abort();
        }
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}
