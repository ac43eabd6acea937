//! candle's paged KV store, [`DeviceBlocks`], on any device candle runs: per layer one
//! `[2 (k|v), n_blocks, n_kv, BLOCK_TOKENS, head_dim]` f32 tensor on the device, allocated whole at start
//! (vLLM's way: the KV budget is taken once, not grown; only a standalone sequence's own store grows).

use candle_core::{DType, Device, Tensor};

use super::BLOCK_TOKENS;
use crate::engine::error::{EngineError, Result};

/// candle's paged store: one tensor per layer.
pub struct DeviceBlocks {
    layers: Vec<Tensor>,
    n_blocks: usize,
}

impl DeviceBlocks {
    pub fn new(
        n_blocks: usize,
        n_layer: usize,
        n_kv: usize,
        head_dim: usize,
        device: &Device,
    ) -> Result<Self> {
        let layers = (0..n_layer)
            .map(|_| {
                Tensor::zeros(
                    (2, n_blocks, n_kv, BLOCK_TOKENS, head_dim),
                    DType::F32,
                    device,
                )
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self { layers, n_blocks })
    }

    /// Bytes one block takes across every layer (keys and values).
    pub fn bytes_per_block(n_layer: usize, n_kv: usize, head_dim: usize) -> usize {
        2 * n_layer * n_kv * BLOCK_TOKENS * head_dim * DType::F32.size_in_bytes()
    }

    /// Blocks in the store.
    pub fn len(&self) -> usize {
        self.n_blocks
    }

    pub fn is_empty(&self) -> bool {
        self.n_blocks == 0
    }

    /// KV heads and the width of each, as the layers are shaped.
    pub fn heads(&self) -> (usize, usize) {
        self.layers
            .first()
            .and_then(|l| l.dims5().ok())
            .map_or((0, 0), |(_, _, n_kv, _, d)| (n_kv, d))
    }

    /// Grows the store to at least `n_blocks` blocks (zeros), keeping what the others hold.
    pub fn grow_to(&mut self, n_blocks: usize) -> Result<()> {
        if n_blocks <= self.n_blocks {
            return Ok(());
        }
        for layer in &mut self.layers {
            let (two, old, n_kv, block, d) = layer.dims5()?;
            let more = Tensor::zeros(
                (two, n_blocks - old, n_kv, block, d),
                layer.dtype(),
                layer.device(),
            )?;
            *layer = Tensor::cat(&[&*layer, &more], 1)?;
        }
        self.n_blocks = n_blocks;
        Ok(())
    }

    /// Layer `i`'s buffer.
    pub fn layer(&self, i: usize) -> Result<&Tensor> {
        self.layers
            .get(i)
            .ok_or_else(|| EngineError::Internal(format!("the paged store has no layer {i}")))
    }
}
