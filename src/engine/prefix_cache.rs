//! KV prefix reuse on candle's backends (CUDA, Metal, `--weights native`), whose forward pass reads one contiguous
//! KV buffer per sequence rather than the CPU engine's paged blocks (`engine::blocks`): the engine keeps the KV
//! state of recent sequences, finds the one sharing the longest token prefix with a new request, and prefills
//! only the rest.
//!
//! A request names its sequence with a cache key (an agent session id); plain API calls without one are
//! matched by content: any kept sequence whose tokens share a long enough prefix with the prompt is reused.
//! Entries are evicted least-recently-used first when their KV buffers exceed the memory budget.
//!
//! **Scopes keep tenants apart.** Every entry belongs to the scope of the request that left it (the request's
//! `cache_scope`: an API key, a session; the server decides). Both kinds of reuse happen only within one scope: a
//! key names a sequence *of that scope* (the same key in two scopes names two sequences), and content matching
//! only looks at entries of the request's own scope. A prefix hit is observable (it shows in `cached_tokens` and
//! in latency), so reuse across scopes would tell one tenant what another one sent. `None` is a scope of its own:
//! unscoped requests share with each other and with nobody else.

use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use super::blocks::PrefixCacheStats;
use super::kv::SeqKv;

/// Unkeyed requests reuse a kept sequence only when at least this many leading tokens match (below that
/// the saving is not worth evicting the entry's owner).
pub const MIN_CONTENT_MATCH: usize = 16;
/// Default memory budget for kept KV state.
pub const DEFAULT_BUDGET_BYTES: usize = 512 << 20;

struct Entry {
    scope: Option<String>,
    key: Option<String>,
    kv: SeqKv,
    last_used: u64,
}

/// Kept sequences, owned by the engine thread.
pub struct PrefixCache {
    entries: Vec<Entry>,
    budget_bytes: usize,
    clock: u64,
    stats: Arc<PrefixCacheStats>,
}

impl PrefixCache {
    pub fn new(budget_bytes: usize, stats: Arc<PrefixCacheStats>) -> Self {
        Self {
            entries: Vec::new(),
            budget_bytes,
            clock: 0,
            stats,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes the best sequence of `scope` for `prompt` out of the cache: the one of that scope with `key` if
    /// given and present, else the one of that scope sharing the longest prefix (at least [`MIN_CONTENT_MATCH`]
    /// tokens). Entries of other scopes are never considered. `None`: start a fresh sequence. The caller reuses
    /// the common prefix and puts the sequence back with [`put`](Self::put).
    pub fn take(
        &mut self,
        scope: Option<&str>,
        key: Option<&str>,
        prompt: &[u32],
    ) -> Option<SeqKv> {
        let in_scope = |e: &Entry| e.scope.as_deref() == scope;
        let by_key = key.and_then(|k| {
            self.entries
                .iter()
                .position(|e| in_scope(e) && e.key.as_deref() == Some(k))
        });
        let index = by_key.or_else(|| {
            self.entries
                .iter()
                .enumerate()
                .filter(|(_, e)| in_scope(e))
                .map(|(i, e)| (i, common_prefix(e.kv.tokens(), prompt)))
                .filter(|&(_, n)| n >= MIN_CONTENT_MATCH)
                .max_by_key(|&(_, n)| n)
                .map(|(i, _)| i)
        })?;
        Some(self.entries.swap_remove(index).kv)
    }

    /// Keeps `kv` in `scope` under `key` (replacing the entry of that scope with the same key), then evicts
    /// least-recently-used entries until the budget holds. A sequence larger than the whole budget is not kept.
    pub fn put(&mut self, scope: Option<String>, key: Option<String>, kv: SeqKv) {
        if kv.is_empty() {
            return;
        }
        if let Some(k) = &key {
            self.entries
                .retain(|e| e.scope != scope || e.key.as_ref() != Some(k));
        }
        self.clock += 1;
        self.entries.push(Entry {
            scope,
            key,
            kv,
            last_used: self.clock,
        });
        while self.memory_bytes() > self.budget_bytes && !self.entries.is_empty() {
            if let Some((i, _)) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
            {
                self.entries.swap_remove(i);
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.entries.iter().map(|e| e.kv.memory_bytes()).sum()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Number of leading tokens two sequences share.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};

    fn seq(tokens: &[u32]) -> SeqKv {
        let mut kv = SeqKv::new(1);
        let t = Tensor::zeros((1, 1, tokens.len(), 4), DType::F32, &Device::Cpu).unwrap();
        kv.layer_mut(0).unwrap().append(&t, &t, 0).unwrap();
        kv.extend(tokens);
        kv
    }

    fn stats() -> Arc<PrefixCacheStats> {
        Arc::new(PrefixCacheStats::default())
    }

    #[test]
    fn key_wins_then_longest_content_match() {
        let mut c = PrefixCache::new(usize::MAX, stats());
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b[30] = 999;
        c.put(None, Some("a".into()), seq(&a));
        c.put(None, None, seq(&b));
        // By key, even though the content matches less.
        let got = c.take(None, Some("a"), &b).unwrap();
        assert_eq!(got.tokens(), &a[..]);
        c.put(None, Some("a".into()), got);
        // By content: `b` shares all 40 tokens with itself, `a` only 30.
        let got = c.take(None, None, &b).unwrap();
        assert_eq!(got.tokens(), &b[..]);
        // Too short a match is no match.
        assert!(c.take(None, None, &[0, 1, 2]).is_none());
        assert!(c.take(None, Some("missing"), &[7; 20]).is_none());
    }

    #[test]
    fn lru_eviction_keeps_the_budget() {
        let one = seq(&(0..300).collect::<Vec<_>>()).memory_bytes();
        let s = stats();
        let mut c = PrefixCache::new(one * 2, s.clone());
        c.put(None, Some("x".into()), seq(&(0..300).collect::<Vec<_>>()));
        c.put(
            None,
            Some("y".into()),
            seq(&(1000..1300).collect::<Vec<_>>()),
        );
        // Touch x so y becomes the oldest.
        let x = c.take(None, Some("x"), &[]).unwrap();
        c.put(None, Some("x".into()), x);
        c.put(
            None,
            Some("z".into()),
            seq(&(2000..2300).collect::<Vec<_>>()),
        );
        assert_eq!(c.len(), 2);
        assert!(c.memory_bytes() <= one * 2);
        assert!(
            c.take(None, Some("y"), &[]).is_none(),
            "y was least recently used"
        );
        assert!(c.take(None, Some("x"), &[]).is_some());
        assert_eq!(s.snapshot().2, 1);
    }

    #[test]
    fn same_key_replaces() {
        let mut c = PrefixCache::new(usize::MAX, stats());
        c.put(None, Some("k".into()), seq(&[1; 20]));
        c.put(None, Some("k".into()), seq(&[2; 20]));
        assert_eq!(c.len(), 1);
        assert_eq!(c.take(None, Some("k"), &[]).unwrap().tokens(), &[2; 20]);
    }

    #[test]
    fn scopes_never_share_by_key_or_by_content() {
        let mut c = PrefixCache::new(usize::MAX, stats());
        let prompt: Vec<u32> = (0..64).collect();
        c.put(Some("tenant-a".into()), Some("k".into()), seq(&prompt));
        c.put(Some("tenant-a".into()), None, seq(&prompt));
        // Another scope (and the unscoped one) sees nothing: not by content, not under the same key.
        assert!(c.take(Some("tenant-b"), None, &prompt).is_none());
        assert!(c.take(Some("tenant-b"), Some("k"), &prompt).is_none());
        assert!(c.take(None, None, &prompt).is_none());
        assert!(c.take(None, Some("k"), &prompt).is_none());
        // The same key in another scope is another sequence: putting it replaces nothing of tenant-a's.
        c.put(Some("tenant-b".into()), Some("k".into()), seq(&[9; 20]));
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.take(Some("tenant-b"), Some("k"), &prompt)
                .unwrap()
                .tokens(),
            &[9; 20]
        );
        // The owner finds its sequences by key and by content.
        assert!(c.take(Some("tenant-a"), Some("k"), &prompt).is_some());
        assert!(c.take(Some("tenant-a"), None, &prompt).is_some());
        assert!(c.is_empty());
        // `None` is a scope of its own, shared by unscoped requests.
        c.put(None, None, seq(&prompt));
        assert!(c.take(Some("tenant-a"), None, &prompt).is_none());
        assert!(c.take(None, None, &prompt).is_some());
    }
}
