//! KV memory, no math: the paged stores of continuous batching (fixed blocks of [`BLOCK_TOKENS`] positions:
//! host memory for the CPU engine, one tensor per layer on candle's devices; their element type, [`KvDtype`]), the block manager that hands
//! blocks to sequences and shares full prefix blocks within a scope (`blocks.rs`), the layout of one batched
//! step ([`BatchSeq`]), and a standalone sequence's own store ([`StandaloneSeq`]). Every forward pass reads and writes
//! keys and values only through these stores.

pub(crate) mod blocks;
pub(crate) mod device;
pub(crate) mod dtype;
pub(crate) mod host;
pub(crate) mod standalone;

pub use device::DeviceBlocks;
pub use dtype::KvDtype;
pub use host::KvBlocks;
pub use standalone::StandaloneSeq;

use crate::engine::error::Result;

/// Positions per block (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;

/// One sequence's part of a batched step: `tokens` go after the `pos` positions it already holds.
pub struct BatchSeq<'a> {
    pub tokens: &'a [u32],
    /// The sequence's blocks in position order; they must cover `pos + tokens.len()` positions.
    pub blocks: &'a [u32],
    /// Positions already in the cache (the first token's position).
    pub pos: usize,
    /// How many of the last tokens to compute logits for: 0 (a prompt chunk), 1 (decode), `1 + k` (a pending
    /// token and `k` speculative drafts to verify).
    pub logits: usize,
}

/// What a batched step returns for the rows a sequence asks for ([`BatchSeq::logits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutput {
    /// The output head's logits (`vocab` values per row).
    Logits,
    /// The final norm's hidden states (`hidden` values per row): what embeddings pool.
    Hidden,
}

/// A model's paged KV store.
pub enum PagedStore {
    /// The CPU engine's.
    Cpu(KvBlocks),
    /// candle's, on its device.
    Device(DeviceBlocks),
}

impl PagedStore {
    /// Blocks in the store.
    pub fn len(&self) -> usize {
        match self {
            Self::Cpu(s) => s.len(),
            Self::Device(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Grows the store to at least `n_blocks` blocks, keeping what the others hold.
    pub fn grow_to(&mut self, n_blocks: usize) -> Result<()> {
        match self {
            Self::Cpu(s) => {
                s.grow_to(n_blocks);
                Ok(())
            }
            Self::Device(s) => s.grow_to(n_blocks),
        }
    }
}
