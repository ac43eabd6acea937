//! Per-sequence KV cache: one growable key/value buffer per layer, owned by the sequence, not the model. On the
//! CPU engine the buffers are [`CpuKv`]'s; on candle's devices (CUDA, Metal, `--weights native`) the tensors below.
//!
//! Buffers are `[1, n_kv_heads, capacity, head_dim]` and grow by doubling; a forward pass writes its new keys
//! and values in place and attends over a view of the first `len` positions (no copy). Truncating to a
//! shorter prefix is O(1), which is what prefix reuse across agent turns needs.

use candle_core::Tensor;

use super::cpu::kv::CpuKv;
use super::error::Result;

const MIN_CAPACITY: usize = 256;

/// The KV state of one sequence across all layers.
pub struct SeqKv {
    store: Store,
    /// The token at each cached position.
    tokens: Vec<u32>,
}

enum Store {
    Candle(Vec<LayerKv>),
    Cpu(CpuKv),
}

impl SeqKv {
    /// A cache for candle's forward pass.
    pub fn new(n_layer: usize) -> Self {
        Self {
            store: Store::Candle((0..n_layer).map(|_| LayerKv::default()).collect()),
            tokens: Vec::new(),
        }
    }

    /// A cache for the CPU engine's forward pass.
    pub fn cpu(kv: CpuKv) -> Self {
        Self {
            store: Store::Cpu(kv),
            tokens: Vec::new(),
        }
    }

    /// Number of positions held.
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

    /// Forgets every position from `len` on (keeps the buffers for reuse).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Bytes held by the buffers (capacity, not just the used part).
    pub fn memory_bytes(&self) -> usize {
        match &self.store {
            Store::Candle(layers) => layers
                .iter()
                .map(|l| {
                    l.k.as_ref()
                        .map_or(0, |t| t.elem_count() * t.dtype().size_in_bytes())
                        * 2
                })
                .sum(),
            Store::Cpu(kv) => kv.memory_bytes(),
        }
    }

    /// Layer `i`'s tensors, when this is a candle cache.
    pub(crate) fn layer_mut(&mut self, i: usize) -> Option<&mut LayerKv> {
        match &mut self.store {
            Store::Candle(layers) => layers.get_mut(i),
            Store::Cpu(_) => None,
        }
    }

    /// The CPU engine's buffers, when this is a CPU cache.
    pub(crate) fn cpu_mut(&mut self) -> Option<&mut CpuKv> {
        match &mut self.store {
            Store::Cpu(kv) => Some(kv),
            Store::Candle(_) => None,
        }
    }

    /// Records that `tokens` were written at the end (called by the model after every layer wrote them).
    pub(crate) fn extend(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }
}

/// One layer's key and value buffers.
#[derive(Default)]
pub struct LayerKv {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

impl LayerKv {
    /// Writes `k`, `v` (`[1, n_kv, t, d]`) at position `pos` and returns views over positions `0..pos + t`.
    pub fn append(&mut self, k: &Tensor, v: &Tensor, pos: usize) -> Result<(Tensor, Tensor)> {
        let (b, h, t, d) = k.dims4()?;
        let needed = pos + t;
        let (kb, vb) = match (&self.k, &self.v) {
            (Some(kb), Some(vb)) if needed <= kb.dims()[2] => (kb.clone(), vb.clone()),
            (old_k, old_v) => {
                let capacity = old_k.as_ref().map_or(0, |k| k.dims()[2]);
                let new_cap = needed.max(capacity * 2).max(MIN_CAPACITY);
                let grow = |old: &Option<Tensor>| -> Result<Tensor> {
                    let buf = Tensor::zeros((b, h, new_cap, d), k.dtype(), k.device())?;
                    if let Some(old) = old {
                        if pos > 0 {
                            buf.slice_set(&old.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                        }
                    }
                    Ok(buf)
                };
                let (kb, vb) = (grow(old_k)?, grow(old_v)?);
                self.k = Some(kb.clone());
                self.v = Some(vb.clone());
                (kb, vb)
            }
        };
        kb.slice_set(&k.contiguous()?, 2, pos)?;
        vb.slice_set(&v.contiguous()?, 2, pos)?;
        Ok((kb.narrow(2, 0, needed)?, vb.narrow(2, 0, needed)?))
    }
}
