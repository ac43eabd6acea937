//! The fused ops over the paged KV store of continuous batching (`engine::paged_kv`): writing a step's keys
//! and values into their blocks, and attention of every query token of a batch over its own sequence's blocks.
//! A step's layout ([`PagedBatch`]) is built and checked once on the host and read by every layer.

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp3, DType, Device, InplaceOp3, Layout, Shape, Tensor};

use crate::engine::candle::fused::twin::{self, PagedShape, BLOCK};
use crate::engine::error::{EngineError, Result};

/// One sequence of a step: its block table, the position of its first new token, how many new tokens.
#[derive(Debug, Clone, Copy)]
pub struct PagedSeq<'a> {
    pub blocks: &'a [u32],
    pub pos: usize,
    pub len: usize,
}

/// A step's layout on the device: `meta` = `[sequence of each token, position of each token, every block
/// table padded to max_blocks]` (u32), as `kernels/attention.cu` reads it.
pub struct PagedBatch {
    meta: Tensor,
    t: usize,
    max_blocks: usize,
    n_blocks: usize,
}

impl PagedBatch {
    /// Checks that every token's position lies in a block of its table and every block in the store.
    pub fn new(seqs: &[PagedSeq<'_>], n_blocks: usize, device: &Device) -> Result<Self> {
        let t: usize = seqs.iter().map(|s| s.len).sum();
        let max_blocks = seqs
            .iter()
            .map(|s| s.blocks.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut meta = Vec::with_capacity(2 * t + seqs.len() * max_blocks);
        for (i, s) in seqs.iter().enumerate() {
            let end = s.pos + s.len;
            if end.div_ceil(BLOCK) > s.blocks.len()
                || s.blocks.iter().any(|&b| b as usize >= n_blocks)
            {
                return Err(EngineError::Internal(format!(
                    "sequence {i}'s block table does not cover {end} positions of the KV store"
                )));
            }
            meta.extend(std::iter::repeat_n(i as u32, s.len));
        }
        for s in seqs {
            meta.extend((s.pos..s.pos + s.len).map(|p| p as u32));
        }
        for s in seqs {
            meta.extend_from_slice(s.blocks);
            meta.extend(std::iter::repeat_n(0, max_blocks - s.blocks.len()));
        }
        Ok(Self {
            meta: Tensor::from_vec(meta, 2 * t + seqs.len() * max_blocks, device)?,
            t,
            max_blocks,
            n_blocks,
        })
    }

    /// Query tokens in the step.
    #[cfg(test)]
    pub fn tokens(&self) -> usize {
        self.t
    }

    fn shape(
        &self,
        cache: &Tensor,
        n_head: usize,
        window: Option<usize>,
        scale: f32,
    ) -> Result<PagedShape> {
        let (two, n_blocks, n_kv, block, head_dim) = cache.dims5()?;
        if two != 2 || block != BLOCK || n_blocks != self.n_blocks || cache.dtype() != DType::F32 {
            return Err(EngineError::Internal(format!(
                "a paged KV layer of {:?} {:?} for a batch over {} blocks",
                cache.dims(),
                cache.dtype(),
                self.n_blocks
            )));
        }
        if n_kv == 0 || !n_head.is_multiple_of(n_kv) {
            return Err(EngineError::Internal(format!(
                "{n_head} query heads over {n_kv} KV heads"
            )));
        }
        Ok(PagedShape {
            t: self.t,
            n_head,
            n_kv,
            head_dim,
            n_blocks,
            max_blocks: self.max_blocks,
            window,
            scale,
        })
    }
}

/// Writes `k`, `v` (`[1, t, n_kv, d]`, the step's tokens end to end) into their slots of `cache`
/// (`[2, n_blocks, n_kv, BLOCK, d]`), in place.
pub fn kv_write(cache: &Tensor, k: &Tensor, v: &Tensor, batch: &PagedBatch) -> Result<()> {
    let shape = batch.shape(cache, cache.dim(2)?, None, 1.0)?;
    let want = [1, batch.t, shape.n_kv, shape.head_dim];
    if k.dims() != want || v.dims() != want {
        return Err(EngineError::Internal(format!(
            "kv_write of k {:?}, v {:?} into {:?}",
            k.dims(),
            v.dims(),
            cache.dims()
        )));
    }
    let rows = Tensor::stack(&[k, v], 0)?.contiguous()?;
    cache.inplace_op3(&rows, &batch.meta, &KvWrite(shape))?;
    Ok(())
}

/// Attention of `q: [1, t, n_head, d]` (the step's tokens end to end) over `cache`, each token over its own
/// sequence's keys up to its position (within `window`). Returns `[1, t, n_head, d]`.
pub fn paged_attention(
    q: &Tensor,
    cache: &Tensor,
    batch: &PagedBatch,
    window: Option<usize>,
    scale: f32,
) -> Result<Tensor> {
    let (_, t, n_head, d) = q.dims4()?;
    let shape = batch.shape(cache, n_head, window, scale)?;
    if t != batch.t || d != shape.head_dim {
        return Err(EngineError::Internal(format!(
            "paged attention of q {:?} over {:?} for {} tokens",
            q.dims(),
            cache.dims(),
            batch.t
        )));
    }
    Ok(q.contiguous()?
        .apply_op3_no_bwd(cache, &batch.meta, &PagedAttention(shape))?)
}

struct KvWrite(PagedShape);

struct PagedAttention(PagedShape);

fn f32s<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => bail!("{what}: contiguous f32 expected, not {:?}", s.dtype()),
    }
}

fn u32s<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [u32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::U32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => bail!(
            "paged batch metadata: contiguous u32 expected, not {:?}",
            s.dtype()
        ),
    }
}

impl InplaceOp3 for KvWrite {
    fn name(&self) -> &'static str {
        "agentd-kv-write"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<()> {
        let (rows, meta) = (f32s(s2, l2, "rows")?, u32s(s3, l3)?);
        let (CpuStorage::F32(cache), Some((a, b))) = (s1, l1.contiguous_offsets()) else {
            bail!("the paged KV layer must be contiguous f32");
        };
        twin::kv_write(&mut cache[a..b], rows, meta, self.0);
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &mut candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<()> {
        crate::engine::candle::fused::cuda::kv_write((s1, l1), (s2, l2), (s3, l3), self.0)
    }
}

impl CustomOp3 for PagedAttention {
    fn name(&self) -> &'static str {
        "agentd-paged-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (q, cache, meta) = (f32s(s1, l1, "q")?, f32s(s2, l2, "cache")?, u32s(s3, l3)?);
        let mut out = vec![0f32; q.len()];
        twin::paged_attention(q, cache, meta, self.0, &mut out);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::engine::candle::fused::cuda::paged_attention((s1, l1), (s2, l2), (s3, l3), self.0)
    }
}
