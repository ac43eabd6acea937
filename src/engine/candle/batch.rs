//! candle's forward pass over a batch of sequences in the paged KV store: continuous batching on every device.
//! Every sequence's new tokens go end to end through one pass — one matrix product per weight for the whole
//! batch — and attention reads each token's own sequence's blocks (`fused::paged_attention` on CUDA and, with
//! `AGENTD_CANDLE_OPS=fused`, on the CPU through the kernels' twins; `paged::PagedLayout` with candle's ops).

use candle_core::{DType, Device, Tensor};

use super::fused::{Kernels, PagedBatch, PagedSeq};
use super::layers::{LayerCache, Step};
use super::paged::{PagedLayout, SeqSlice};
use super::CandleModel;
use crate::engine::error::{EngineError, Result};
use crate::engine::kv::{BatchSeq, DeviceBlocks, StepOutput};

impl CandleModel {
    /// One step over `batch`: writes every new token's keys and values into its sequence's blocks and returns,
    /// per sequence, the logits (or, as `output` says, the final norm's hidden states) of its last `logits` tokens,
    /// row after row (empty when it asks for none).
    pub fn forward_batch(
        &self,
        store: &DeviceBlocks,
        batch: &[BatchSeq<'_>],
        context_length: usize,
        device: &Device,
        output: StepOutput,
    ) -> Result<Vec<Vec<f32>>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        for b in batch {
            let end = b.pos + b.tokens.len();
            if b.tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if end > context_length {
                return Err(EngineError::PromptTooLong {
                    tokens: end,
                    limit: context_length,
                });
            }
            ids.extend_from_slice(b.tokens);
            positions.extend((b.pos..end).map(|p| p as u32));
        }
        enum Layout {
            Fused(PagedBatch),
            Candle(PagedLayout),
        }
        let layout = match self.kernels {
            Kernels::Fused => {
                let seqs: Vec<PagedSeq<'_>> = batch
                    .iter()
                    .map(|b| PagedSeq {
                        blocks: b.blocks,
                        pos: b.pos,
                        len: b.tokens.len(),
                    })
                    .collect();
                Layout::Fused(PagedBatch::new(&seqs, store.len(), device)?)
            }
            Kernels::Candle => {
                let seqs: Vec<SeqSlice<'_>> = batch
                    .iter()
                    .map(|b| SeqSlice {
                        blocks: b.blocks,
                        pos: b.pos,
                        len: b.tokens.len(),
                    })
                    .collect();
                let (n_kv, head_dim) = store.heads();
                Layout::Candle(PagedLayout::new(
                    &seqs,
                    store.len(),
                    n_kv,
                    head_dim,
                    self.window,
                    device,
                )?)
            }
        };
        let ids = Tensor::new(ids, device)?;
        let positions = Tensor::new(positions, device)?;
        let mut x = self.embed.index_select(&ids, 0)?.unsqueeze(0)?;
        if let Some(scale) = self.embed_scale {
            x = (x * scale)?;
        }
        let rope = self.rotary.gather(&positions)?;
        let rope_swa = match &self.rotary_swa {
            Some(r) => Some(r.gather(&positions)?),
            None => None,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let step = Step {
                rope: match (layer.swa, &rope_swa) {
                    (true, Some(r)) => r,
                    _ => &rope,
                },
                window: if layer.swa { self.window } else { None },
                kernels: self.kernels,
            };
            let cache = match &layout {
                Layout::Fused(batch) => LayerCache::Fused {
                    cache: store.layer(i)?,
                    batch,
                },
                Layout::Candle(layout) => LayerCache::Candle {
                    cache: store.layer(i)?,
                    layout,
                },
            };
            x = layer.forward(&x, &step, cache)?;
        }
        // The last rows of each sequence that wants logits.
        let mut rows = Vec::new();
        let mut end = 0;
        for b in batch {
            end += b.tokens.len();
            let n = b.logits.min(b.tokens.len());
            rows.extend((end - n..end).map(|r| r as u32));
        }
        let mut out = vec![Vec::new(); batch.len()];
        if rows.is_empty() {
            return Ok(out);
        }
        let n = rows.len();
        let x = x
            .squeeze(0)?
            .index_select(&Tensor::new(rows, device)?, 0)?
            .unsqueeze(0)?;
        let x = self.norm.forward(&x, self.kernels)?;
        let mut logits = match output {
            StepOutput::Logits => self.output.forward(&x)?,
            StepOutput::Hidden => x,
        };
        if let (Some(cap), StepOutput::Logits) = (self.softcap, output) {
            logits = ((logits / cap)?.tanh()? * cap)?;
        }
        let mut logits = logits
            .squeeze(0)?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?
            .into_iter();
        for (slot, b) in out.iter_mut().zip(batch) {
            for _ in 0..b.logits.min(b.tokens.len()) {
                let row = logits.next().ok_or_else(|| {
                    EngineError::Internal(format!("{n} logit rows for the batch"))
                })?;
                slot.extend_from_slice(&row);
            }
        }
        Ok(out)
    }
}
