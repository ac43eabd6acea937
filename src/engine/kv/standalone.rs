//! One sequence outside the scheduler (`Model::forward`: parity checks, tests, reference decodes): a paged
//! store of its own, grown as the sequence grows, and the table of its blocks in position order. It runs the
//! same paged forward passes as the scheduler's sequences; there is no second KV layout (its store keeps f32: it
//! is the reference path parity checks compare).

use super::PagedStore;

/// The KV state of one standalone sequence.
#[derive(Default)]
pub struct StandaloneSeq {
    /// Created on the first forward pass (the model knows its shape).
    pub store: Option<PagedStore>,
    /// Block ids in position order: `0, 1, 2, …` of the own store.
    pub table: Vec<u32>,
    /// The token at each cached position.
    tokens: Vec<u32>,
}

impl StandaloneSeq {
    pub fn new() -> Self {
        Self::default()
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens whose keys and values are held, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Records `tokens` as written after the ones held.
    pub fn extend(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }

    /// Keeps the first `len` positions (the blocks stay; later writes overwrite them).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Blocks the table must hold for `positions` positions.
    pub fn blocks_for(positions: usize) -> usize {
        positions.div_ceil(super::BLOCK_TOKENS)
    }
}
