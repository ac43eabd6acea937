//! The response cache (seed 001; a provider decorator, not the engine's KV cache): completions at temperature 0 are stored in SQLite and replayed for the same
//! request. The key is the model, the exact prompt (its token ids on the local engine; the canonical request JSON
//! on a remote), the tools' schema hash and every sampling setting; see [`CachingProvider`], the provider wrapper
//! that uses it. Hits, misses and stores are counted ([`CacheStats`]) and logged (`cache.hit` / `cache.miss` /
//! `cache.store`).

mod caching;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

pub use caching::{cache_key, CachingProvider, PromptKey};

use crate::provider::ProviderEvent;

/// `[cache]` in the configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Replay stored completions of temperature-0 requests. Off by default.
    pub enabled: bool,
    /// The SQLite file; default `$AGENTD_HOME/cache/responses.sqlite`.
    pub path: Option<PathBuf>,
}

impl CacheConfig {
    /// The database file to use.
    pub fn resolved_path(&self) -> PathBuf {
        self.path.clone().unwrap_or_else(|| {
            crate::env::agentd_home()
                .join("cache")
                .join("responses.sqlite")
        })
    }
}

/// Why the cache failed. A failing cache never fails a request: the provider answers instead.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The database could not be opened or created (bad path, permissions, not a SQLite file). Fix `cache.path`.
    #[error("cannot open the response cache {}: {message}", path.display())]
    Open { path: PathBuf, message: String },
    /// A query failed (disk full, corrupt file). Delete the cache file to start afresh.
    #[error("response cache: {0}")]
    Query(String),
}

/// Counters for metrics (`snapshot` for a consistent read).
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Requests not cacheable (temperature ≠ 0).
    pub bypassed: AtomicU64,
    pub stores: AtomicU64,
    pub errors: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub bypassed: u64,
    pub stores: u64,
    pub errors: u64,
}

impl CacheStats {
    pub fn snapshot(&self) -> CacheCounts {
        CacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            stores: self.stores.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// The SQLite table of stored completions: key → the provider events of the completion.
pub struct ResponseCache {
    conn: Mutex<rusqlite::Connection>,
    path: PathBuf,
}

impl ResponseCache {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, CacheError> {
        let open_err = |message: String| CacheError::Open {
            path: path.to_path_buf(),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        }
        let conn = rusqlite::Connection::open(path).map_err(|e| open_err(e.to_string()))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS responses (
                 key TEXT PRIMARY KEY,
                 model TEXT NOT NULL,
                 created_ms INTEGER NOT NULL,
                 hits INTEGER NOT NULL DEFAULT 0,
                 events TEXT NOT NULL
             );",
        )
        .map_err(|e| open_err(e.to_string()))?;
        Ok(Self {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, rusqlite::Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored events of `key`, counting the hit.
    pub fn get(&self, key: &str) -> Result<Option<Vec<ProviderEvent>>, CacheError> {
        let conn = self.conn();
        let text: Option<String> = conn
            .query_row("SELECT events FROM responses WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(CacheError::Query(e.to_string())),
            })?;
        let Some(text) = text else { return Ok(None) };
        conn.execute("UPDATE responses SET hits = hits + 1 WHERE key = ?1", [key])
            .map_err(|e| CacheError::Query(e.to_string()))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| CacheError::Query(format!("a stored entry does not parse: {e}")))
    }

    /// Stores (or replaces) the events of `key`.
    pub fn put(&self, key: &str, model: &str, events: &[ProviderEvent]) -> Result<(), CacheError> {
        let text = serde_json::to_string(events).map_err(|e| CacheError::Query(e.to_string()))?;
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO responses (key, model, created_ms, hits, events) VALUES (?1, ?2, ?3, 0, ?4)",
                rusqlite::params![key, model, crate::env::now_ms() as i64, text],
            )
            .map(|_| ())
            .map_err(|e| CacheError::Query(e.to_string()))
    }

    /// How many completions are stored.
    pub fn len(&self) -> Result<u64, CacheError> {
        self.conn()
            .query_row("SELECT COUNT(*) FROM responses", [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| CacheError::Query(e.to_string()))
    }

    pub fn is_empty(&self) -> Result<bool, CacheError> {
        self.len().map(|n| n == 0)
    }

    /// Removes everything.
    pub fn clear(&self) -> Result<(), CacheError> {
        self.conn()
            .execute("DELETE FROM responses", [])
            .map(|_| ())
            .map_err(|e| CacheError::Query(e.to_string()))
    }
}
