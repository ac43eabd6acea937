//! Agent sessions over HTTP: coding sessions of the application layer ([`CodingSession`], the same one `agentd
//! chat` and `agentd run` drive: system prompt, compaction with grounding and `recall`, the JSONL session file)
//! exposed as resources under `/v1/sessions`. A session is created with a model, a set of built-in tools, a
//! policy and a workspace root (every file tool is confined to it); it can be resumed from its file by id. Its
//! model calls go through the server's admission queue like every other request.
//!
//! This file holds the registry of live sessions and what one session is; `routes` has the handlers,
//! `prompt_stream` the event stream of one prompt and `gate` the provider wrapper that queues the agent's model
//! calls.

mod gate;
mod prompt_stream;
mod routes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentEvent;
use crate::app::CodingSession;
use crate::server::error::ApiError;

pub use gate::GatedProvider;
pub use routes::routes;

/// Where sessions live, what a session gets when the request does not say, and how many stay live.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The directory of the JSONL files (`None`: the session store's default for the workspace,
    /// `$AGENTD_HOME/sessions/<workspace slug>/`).
    pub dir: Option<PathBuf>,
    /// The workspace of a session whose request names none (`None`: the server's working directory).
    pub default_workspace: Option<PathBuf>,
    /// Sessions live at once. Creating one more closes the least recently used idle session (its file stays and
    /// it can be resumed); when every live session is running, creating is refused with 503.
    pub max_live: usize,
    /// An idle session is closed after this long without a request.
    pub idle_timeout: Duration,
    /// The `bash` tool's timeout when a call names none (`None`: the tool's default).
    pub bash_timeout: Option<Duration>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            dir: None,
            default_workspace: None,
            max_live: 64,
            idle_timeout: Duration::from_secs(30 * 60),
            bash_timeout: None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Events buffered for one prompt stream before the agent waits for its client.
pub const EVENT_BUFFER: usize = 256;

/// One live session.
pub struct Session {
    pub id: String,
    /// The agent, its tools and its session file.
    pub coding: CodingSession,
    pub info: SessionInfo,
    /// Where the running prompt's events go (the open SSE response), if anyone listens.
    subscriber: Arc<Mutex<Option<mpsc::Sender<AgentEvent>>>>,
    /// Held by the running prompt: one prompt at a time.
    prompt_lock: Arc<tokio::sync::Mutex<()>>,
    /// When a request last touched the session (idle expiry, least-recently-used eviction).
    last_used: Mutex<Instant>,
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
        let subscriber: Arc<Mutex<Option<mpsc::Sender<AgentEvent>>>> = Arc::default();
        let forward = subscriber.clone();
        coding.subscribe(Arc::new(move |event: AgentEvent| {
            let forward = forward.clone();
            async move {
                // Bounded: a slow client slows the agent down (listeners are awaited) instead of queueing
                // events without limit; a client that left makes the send fail at once.
                let tx = lock(&forward).clone();
                if let Some(tx) = tx {
                    let _ = tx.send(event).await;
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
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Marks the session used now.
    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Whether a prompt runs (or holds the session for a tree operation).
    pub fn busy(&self) -> bool {
        self.prompt_lock.try_lock().is_err() || self.coding.is_running()
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    /// Routes the events of the next run to `tx`.
    fn listen(&self, tx: mpsc::Sender<AgentEvent>) {
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

    /// Makes room for one more session: closes idle sessions past their timeout, then, at the cap, the least
    /// recently used idle one. 503 when every live session is busy.
    pub fn make_room(&self) -> Result<(), ApiError> {
        self.sweep();
        let mut live = lock(&self.live);
        if live.len() < self.options.max_live {
            return Ok(());
        }
        let victim = live
            .values()
            .filter(|s| !s.busy())
            .max_by_key(|s| s.idle_for())
            .map(|s| s.id.clone());
        match victim {
            Some(id) => {
                if let Some(s) = live.remove(&id) {
                    tracing::info!(session = %id, "closing the least recently used idle session");
                    s.coding.close();
                }
                Ok(())
            }
            None => Err(ApiError::unavailable(
                format!(
                    "{} agent sessions are live and all of them are running (max {}); retry later",
                    live.len(),
                    self.options.max_live
                ),
                5,
            )),
        }
    }

    /// Closes idle sessions that passed the idle timeout (their files stay; they can be resumed).
    pub fn sweep(&self) {
        let timeout = self.options.idle_timeout;
        lock(&self.live).retain(|id, s| {
            let keep = s.busy() || s.idle_for() < timeout;
            if !keep {
                tracing::info!(session = %id, "closing an idle session");
                s.coding.close();
            }
            keep
        });
    }

    pub fn insert(&self, session: Arc<Session>) {
        lock(&self.live).insert(session.id.clone(), session);
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        lock(&self.live).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live session `id`, marked used.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let s = lock(&self.live).get(id).cloned();
        if let Some(s) = &s {
            s.touch();
        }
        s
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.live).remove(id)
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = lock(&self.live).values().cloned().collect();
        all.sort_by(|a, b| (a.info.created, &a.id).cmp(&(b.info.created, &b.id)));
        all
    }

    /// Aborts every running agent and cleans every session's tool resources (shutdown).
    pub fn abort_all(&self) {
        for s in lock(&self.live).values() {
            s.coding.close();
        }
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}
