//! The paged KV cache's block manager (vLLM's automatic prefix caching, in our words): a fixed number of blocks
//! (the memory budget divided by one block's bytes), reference-counted, with every *full* block of a sequence
//! registered under a hash of its tokens chained to the hashes of all blocks before it, so a later sequence
//! whose prompt starts with the same tokens takes those blocks instead of computing them again.
//!
//! A block is in one of three states: **in use** (referenced by one or more sequences), **cached** (no
//! reference, but holding a registered prefix: it can be taken by a matching prompt or evicted, least recently
//! released first) and **free** (nothing worth keeping). Allocation takes a free block, else evicts the oldest
//! cached one.
//!
//! **Scopes keep tenants apart**: the scope of a request (an API key, a session; the server decides) is hashed
//! into the first block of every chain, so a prefix is only ever shared within one scope. A hit is observable
//! (in `cached_tokens` and in latency), so sharing across scopes would tell one tenant what another one sent.
//! `None` is a scope of its own. The tokens of a cached block are kept and compared on every hit, so a hash
//! collision can never hand out another prompt's state.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use super::BLOCK_TOKENS;

/// Counters exported as `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` (in tokens, like vLLM) and the
/// state of the block pool (`vllm:kv_cache_usage_perc`, `vllm:num_preemptions`).
#[derive(Debug, Default)]
pub struct PrefixCacheStats {
    /// Prompt tokens looked up.
    pub queries: AtomicU64,
    /// Prompt tokens whose KV state was reused.
    pub hits: AtomicU64,
    /// Cached blocks (or, on candle's backends, kept sequences) evicted for the memory budget.
    pub evictions: AtomicU64,
    /// Blocks in use by a sequence.
    pub blocks_used: AtomicU64,
    /// Blocks in the pool (0 when the backend keeps no block pool).
    pub blocks_total: AtomicU64,
    /// Sequences preempted (their blocks freed, to be recomputed later) because the pool ran out.
    pub preemptions: AtomicU64,
}

impl PrefixCacheStats {
    /// (queries, hits, evictions).
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.queries.load(Ordering::Relaxed),
            self.hits.load(Ordering::Relaxed),
            self.evictions.load(Ordering::Relaxed),
        )
    }

    /// The fraction of the block pool in use (0 with no pool).
    pub fn usage(&self) -> f64 {
        let total = self.blocks_total.load(Ordering::Relaxed);
        if total == 0 {
            return 0.0;
        }
        self.blocks_used.load(Ordering::Relaxed) as f64 / total as f64
    }

    /// Records a lookup: `reused` of `prompt_tokens` came from the cache.
    pub fn record(&self, prompt_tokens: usize, reused: usize) {
        self.queries
            .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
        self.hits.fetch_add(reused as u64, Ordering::Relaxed);
    }
}

/// The hash of the first block of a chain in `scope`.
pub fn root_hash(scope: Option<&str>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "agentd-kv-root".hash(&mut h);
    scope.hash(&mut h);
    h.finish()
}

/// The hash of a block holding `tokens` after the block hashed `parent`.
pub fn block_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// The chained hashes of every full block of `tokens` in `scope`.
pub fn chain(scope: Option<&str>, tokens: &[u32]) -> Vec<u64> {
    let mut parent = root_hash(scope);
    tokens
        .chunks_exact(BLOCK_TOKENS)
        .map(|t| {
            parent = block_hash(parent, t);
            parent
        })
        .collect()
}

struct Cached {
    hash: u64,
    tokens: Vec<u32>,
}

/// The block pool's bookkeeping (the blocks' memory lives in the model's KV store).
pub struct BlockManager {
    refs: Vec<u32>,
    cached: Vec<Option<Cached>>,
    by_hash: HashMap<u64, u32>,
    free: Vec<u32>,
    /// Cached blocks with no reference, by release time (oldest first).
    evictable: BTreeMap<u64, u32>,
    /// When each block was last released (its key in `evictable`).
    released_at: Vec<u64>,
    clock: u64,
    used: usize,
    /// Whether full blocks are registered for reuse (vLLM's `--enable-prefix-caching`).
    caching: bool,
    stats: Arc<PrefixCacheStats>,
}

impl BlockManager {
    pub fn new(n_blocks: usize, caching: bool, stats: Arc<PrefixCacheStats>) -> Self {
        stats.blocks_total.store(n_blocks as u64, Ordering::Relaxed);
        stats.blocks_used.store(0, Ordering::Relaxed);
        Self {
            refs: vec![0; n_blocks],
            cached: (0..n_blocks).map(|_| None).collect(),
            by_hash: HashMap::new(),
            // Popped from the end: low ids first.
            free: (0..n_blocks as u32).rev().collect(),
            evictable: BTreeMap::new(),
            released_at: vec![0; n_blocks],
            clock: 0,
            used: 0,
            caching,
            stats,
        }
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Blocks referenced by a sequence.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used
    }

    /// Blocks an allocation can get now (free or evictable).
    pub fn available(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Cached blocks nobody references (kept for later prompts).
    #[cfg(test)]
    pub fn cached_idle(&self) -> usize {
        self.evictable.len()
    }

    fn publish(&self) {
        self.stats
            .blocks_used
            .store(self.used as u64, Ordering::Relaxed);
    }

    fn take_ref(&mut self, block: u32) {
        let b = block as usize;
        if self.refs[b] == 0 {
            self.used += 1;
            if self.cached[b].is_some() {
                self.evictable.remove(&self.released_at[b]);
            }
        }
        self.refs[b] += 1;
    }

    /// Takes the longest run of cached blocks that starts `tokens` (hashes from [`chain`]), at most
    /// `max_blocks`, each gaining a reference. Their ids, in order.
    pub fn lookup(&mut self, hashes: &[u64], tokens: &[u32], max_blocks: usize) -> Vec<u32> {
        let mut got = Vec::new();
        if !self.caching {
            return got;
        }
        for (i, h) in hashes.iter().take(max_blocks).enumerate() {
            let Some(&block) = self.by_hash.get(h) else {
                break;
            };
            let want = &tokens[i * BLOCK_TOKENS..(i + 1) * BLOCK_TOKENS];
            match &self.cached[block as usize] {
                Some(c) if c.tokens == want => {}
                _ => break,
            }
            self.take_ref(block);
            got.push(block);
        }
        self.publish();
        got
    }

    /// A block for a sequence to write into (one reference), or `None` when every block is in use.
    pub fn allocate(&mut self) -> Option<u32> {
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                let (&at, &b) = self.evictable.iter().next()?;
                self.evictable.remove(&at);
                if let Some(c) = self.cached[b as usize].take() {
                    self.by_hash.remove(&c.hash);
                }
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                b
            }
        };
        self.refs[block as usize] = 1;
        self.used += 1;
        self.publish();
        Some(block)
    }

    /// Registers `block`, now full with `tokens`, under `hash` so later prompts can take it. A hash already
    /// registered (another sequence computed the same prefix at the same time) keeps its first block.
    pub fn register(&mut self, block: u32, hash: u64, tokens: &[u32]) {
        if !self.caching || self.by_hash.contains_key(&hash) {
            return;
        }
        let b = block as usize;
        if self.cached[b].is_some() {
            return;
        }
        self.by_hash.insert(hash, block);
        self.cached[b] = Some(Cached {
            hash,
            tokens: tokens.to_vec(),
        });
    }

    /// Drops one reference to each of `blocks`; a block nobody references becomes cached (if it holds a
    /// registered prefix) or free. Later blocks are released first so a prefix's head outlives its tail.
    pub fn release(&mut self, blocks: &[u32]) {
        for &block in blocks.iter().rev() {
            let b = block as usize;
            if self.refs[b] == 0 {
                continue;
            }
            self.refs[b] -= 1;
            if self.refs[b] > 0 {
                continue;
            }
            self.used -= 1;
            if self.cached[b].is_some() {
                self.clock += 1;
                self.released_at[b] = self.clock;
                self.evictable.insert(self.clock, block);
            } else {
                self.free.push(block);
            }
        }
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(start: u32, n: usize) -> Vec<u32> {
        (start..start + n as u32).collect()
    }

    #[test]
    fn a_released_prefix_is_found_again_and_shared_while_in_use() {
        let stats = Arc::new(PrefixCacheStats::default());
        let mut m = BlockManager::new(8, true, stats.clone());
        let prompt = toks(0, 40);
        let hashes = chain(None, &prompt);
        assert_eq!(hashes.len(), 2);
        let a: Vec<u32> = (0..3).map(|_| m.allocate().unwrap()).collect();
        m.register(a[0], hashes[0], &prompt[..16]);
        m.register(a[1], hashes[1], &prompt[16..32]);
        // While `a` holds them, another sequence shares both full blocks.
        let b = m.lookup(&hashes, &prompt, usize::MAX);
        assert_eq!(b, a[..2]);
        assert_eq!(m.used(), 3);
        m.release(&b);
        m.release(&a);
        assert_eq!(m.used(), 0);
        assert_eq!(m.cached_idle(), 2);
        // Found again after release; a cap limits the match.
        assert_eq!(m.lookup(&hashes, &prompt, 1), vec![a[0]]);
        assert_eq!(stats.blocks_used.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn scopes_and_content_decide_what_matches() {
        let mut m = BlockManager::new(4, true, Arc::default());
        let prompt = toks(100, 16);
        let h = chain(Some("tenant-a"), &prompt);
        let blk = m.allocate().unwrap();
        m.register(blk, h[0], &prompt);
        m.release(&[blk]);
        assert!(m
            .lookup(&chain(Some("tenant-b"), &prompt), &prompt, 9)
            .is_empty());
        assert!(m.lookup(&chain(None, &prompt), &prompt, 9).is_empty());
        // A forged hash with other tokens is refused by the token comparison.
        assert!(m.lookup(&h, &toks(500, 16), 9).is_empty());
        assert_eq!(m.lookup(&h, &prompt, 9), vec![blk]);
    }

    #[test]
    fn allocation_evicts_the_oldest_cached_block_only_when_nothing_is_free() {
        let stats = Arc::new(PrefixCacheStats::default());
        let mut m = BlockManager::new(3, true, stats.clone());
        let (p, q) = (toks(0, 16), toks(50, 16));
        let (hp, hq) = (chain(None, &p), chain(None, &q));
        let a = m.allocate().unwrap();
        m.register(a, hp[0], &p);
        let b = m.allocate().unwrap();
        m.register(b, hq[0], &q);
        m.release(&[a]);
        m.release(&[b]);
        assert_eq!(m.available(), 3);
        // The free block first, then the oldest cached (p's), keeping q's.
        let _c = m.allocate().unwrap();
        assert_eq!(stats.snapshot().2, 0);
        let d = m.allocate().unwrap();
        assert_eq!(d, a);
        assert_eq!(stats.snapshot().2, 1);
        assert!(m.lookup(&hp, &p, 9).is_empty());
        assert_eq!(m.lookup(&hq, &q, 9), vec![b]);
        assert!(m.allocate().is_none(), "every block is in use");
    }

    #[test]
    fn without_caching_nothing_is_registered() {
        let mut m = BlockManager::new(2, false, Arc::default());
        let p = toks(0, 16);
        let h = chain(None, &p);
        let a = m.allocate().unwrap();
        m.register(a, h[0], &p);
        m.release(&[a]);
        assert!(m.lookup(&h, &p, 9).is_empty());
        assert_eq!(m.available(), 2);
    }
}
