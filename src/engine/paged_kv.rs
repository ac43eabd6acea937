//! The paged KV stores of continuous batching: fixed blocks of [`BLOCK_TOKENS`] positions that the block
//! manager (`engine::blocks`) hands to sequences. The CPU engine's store is [`KvBlocks`] (host memory, every
//! layer of a block together); candle's, for CUDA with our kernels (`engine::ops`), is [`DeviceBlocks`]: per
//! layer one `[2 (k|v), n_blocks, n_kv, BLOCK_TOKENS, head_dim]` f32 tensor on the device, allocated whole at
//! start (vLLM's way: the KV budget is taken once, not grown).

use candle_core::{DType, Device, Tensor};

use super::cpu::kv::{KvBlocks, BLOCK_TOKENS};
use super::error::{EngineError, Result};

/// A model's paged KV store.
pub enum PagedStore {
    Cpu(KvBlocks),
    Device(DeviceBlocks),
}

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

    /// Layer `i`'s buffer.
    pub fn layer(&self, i: usize) -> Result<&Tensor> {
        self.layers
            .get(i)
            .ok_or_else(|| EngineError::Internal(format!("the paged store has no layer {i}")))
    }
}
