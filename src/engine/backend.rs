//! The model facade the engine thread runs: a loaded model whose forward pass is either the CPU engine's
//! (`engine::cpu`, our kernels) or candle's (`engine::candle`: CUDA, Metal, `--weights native`), stepping a
//! batch of sequences over one paged KV store (`engine::kv`). The model holds no sequence state.

use candle_core::{Device, Tensor};

use crate::engine::arch::weights::WeightFormat;
use crate::engine::arch::DecoderConfig;
use crate::engine::candle::{CandleModel, Kernels};
use crate::engine::cpu::forward::CpuModel;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;
use crate::engine::kv::{BatchSeq, DeviceBlocks, KvDtype, PagedStore, StandaloneSeq, StepOutput};

/// A loaded model: weights on one device, no sequence state.
pub struct Model {
    pub config: DecoderConfig,
    pub vocab_size: usize,
    device: Device,
    backend: Backend,
    /// Weight bytes streamed per decoded token (for benchmarks and notes).
    pub weight_bytes: usize,
}

/// Which forward pass runs the model.
enum Backend {
    /// candle's ops on any device (CUDA, Metal; on the CPU with `--weights native`).
    Candle(Box<CandleModel>),
    /// The CPU engine's own kernels (`engine::cpu`).
    Cpu(Box<CpuModel>),
}

/// Longest chunk of prompt tokens a standalone sequence feeds in one forward pass; bounds the attention
/// matrix's memory.
const PREFILL_CHUNK: usize = 512;

impl Model {
    /// Loads the weights of a supported architecture from an opened GGUF: on the CPU (unless `format` is
    /// `Native`) for the CPU engine with the configured threads, elsewhere for candle.
    pub fn load(gguf: &GgufFile, device: &Device, format: WeightFormat) -> Result<Self> {
        Self::load_with_threads(gguf, device, format, crate::engine::device::cpu_threads())
    }

    pub fn load_with_threads(
        gguf: &GgufFile,
        device: &Device,
        format: WeightFormat,
        threads: usize,
    ) -> Result<Self> {
        let config = DecoderConfig::read(gguf)?;
        let (vocab_size, weight_bytes, backend) = if device.is_cpu()
            && format != WeightFormat::Native
        {
            let m = CpuModel::load(gguf, config.clone(), format == WeightFormat::Q8_0, threads)?;
            (m.vocab_size, m.weight_bytes, Backend::Cpu(Box::new(m)))
        } else {
            let m = CandleModel::load(gguf, &config, device, format)?;
            (m.vocab_size, m.weight_bytes, Backend::Candle(Box::new(m)))
        };
        Ok(Self {
            config,
            vocab_size,
            device: device.clone(),
            backend,
            weight_bytes,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The element type this model's paged KV store keeps for the setting `dtype` (`auto` resolved: f16 on the
    /// CPU engine, f32 on candle's devices); a type the backend cannot keep is a configuration error.
    pub fn kv_dtype(&self, dtype: KvDtype) -> Result<KvDtype> {
        let resolved = dtype.resolve(self.cpu_engine().is_some());
        match (&self.backend, resolved) {
            (Backend::Candle(_), KvDtype::F16 | KvDtype::Q8_0) => Err(EngineError::Config(format!(
                "--kv-cache-dtype {resolved} is not supported on candle's backend ({:?}; its paged attention reads \
                 f32): use auto or f32",
                self.device.location()
            ))),
            _ => Ok(resolved),
        }
    }

    /// Bytes one block of this model's paged KV store takes as `dtype`.
    pub fn paged_block_bytes(&self, dtype: KvDtype) -> Result<usize> {
        let dtype = self.kv_dtype(dtype)?;
        match &self.backend {
            Backend::Cpu(m) => m.kv_block_bytes(dtype),
            Backend::Candle(_) => Ok(DeviceBlocks::bytes_per_block(
                self.config.n_layer,
                self.config.n_kv_head,
                self.config.head_dim,
            )),
        }
    }

    /// A paged KV store of `n_blocks` blocks for [`forward_batch`](Self::forward_batch), kept as `dtype`.
    pub fn new_paged_store(&self, n_blocks: usize, dtype: KvDtype) -> Result<PagedStore> {
        let dtype = self.kv_dtype(dtype)?;
        match &self.backend {
            Backend::Cpu(m) => Ok(PagedStore::Cpu(m.new_blocks(n_blocks, dtype)?)),
            Backend::Candle(_) => Ok(PagedStore::Device(DeviceBlocks::new(
                n_blocks,
                self.config.n_layer,
                self.config.n_kv_head,
                self.config.head_dim,
                &self.device,
            )?)),
        }
    }

    /// One continuous-batching step over the paged store: each sequence's new tokens at its position, the
    /// logits of the last tokens of those that ask (empty vectors for the others).
    pub fn forward_batch(
        &self,
        store: &mut PagedStore,
        batch: &[BatchSeq<'_>],
    ) -> Result<Vec<Vec<f32>>> {
        self.forward_batch_as(store, batch, StepOutput::Logits)
    }

    /// [`forward_batch`](Self::forward_batch) returning logits or the final norm's hidden states.
    pub fn forward_batch_as(
        &self,
        store: &mut PagedStore,
        batch: &[BatchSeq<'_>],
        output: StepOutput,
    ) -> Result<Vec<Vec<f32>>> {
        match (&self.backend, store) {
            (Backend::Cpu(m), PagedStore::Cpu(store)) => m.forward_batch_as(store, batch, output),
            (Backend::Candle(m), PagedStore::Device(store)) => m.forward_batch(
                store,
                batch,
                self.config.context_length,
                &self.device,
                output,
            ),
            _ => Err(EngineError::Internal(
                "a paged store of the other forward pass".into(),
            )),
        }
    }

    /// The ops candle's forward pass runs; `None` on the CPU engine.
    pub fn kernels(&self) -> Option<Kernels> {
        match &self.backend {
            Backend::Candle(m) => Some(m.kernels),
            Backend::Cpu(_) => None,
        }
    }

    /// Switches candle's forward pass between candle's ops and our fused kernels (an error on the CPU engine,
    /// which has its own, and for fused kernels on Metal).
    pub fn set_kernels(&mut self, kernels: Kernels) -> Result<()> {
        kernels.check(&self.device)?;
        match &mut self.backend {
            Backend::Candle(m) => {
                m.kernels = kernels;
                Ok(())
            }
            Backend::Cpu(_) => Err(EngineError::Device(
                "the CPU engine runs its own kernels; load with --weights native for candle's path"
                    .into(),
            )),
        }
    }

    /// The CPU engine running this model, if it is the one.
    pub fn cpu_engine(&self) -> Option<&CpuModel> {
        match &self.backend {
            Backend::Cpu(m) => Some(m),
            Backend::Candle(_) => None,
        }
    }

    /// Runs `f(i)` for every `i < n` in parallel: on the CPU engine's own thread pool (so no second set of
    /// threads competes with its workers for the cores), on rayon's elsewhere.
    pub fn parallel_for(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        match &self.backend {
            Backend::Cpu(m) => m.parallel_for(n, f),
            Backend::Candle(_) => {
                use rayon::prelude::*;
                (0..n).into_par_iter().for_each(f)
            }
        }
    }

    /// A fresh, empty standalone sequence for [`forward`](Self::forward).
    pub fn new_sequence(&self) -> StandaloneSeq {
        StandaloneSeq::new()
    }

    /// Feeds `tokens` after what `kv` already holds, through the same paged forward pass the scheduler steps
    /// (over an f32 store: standalone sequences are the reference path of parity checks, which compare against
    /// candle's f32 caches); returns the logits (f32, `[vocab]`) of the last position. Long inputs go in chunks
    /// so the attention matrix stays small.
    pub fn forward(&self, tokens: &[u32], kv: &mut StandaloneSeq) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let total = kv.len() + tokens.len();
        if total > self.config.context_length {
            return Err(EngineError::PromptTooLong {
                tokens: total,
                limit: self.config.context_length,
            });
        }
        let need = StandaloneSeq::blocks_for(total);
        let store = match &mut kv.store {
            Some(store) => store,
            None => kv.store.insert(self.new_paged_store(need, KvDtype::F32)?),
        };
        if store.len() < need {
            // Doubling keeps a token-by-token decode from copying the store at every block.
            store.grow_to(need.max(2 * store.len()))?;
        }
        while kv.table.len() < store.len() {
            kv.table.push(kv.table.len() as u32);
        }
        let mut last = Vec::new();
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            let batch = [BatchSeq {
                tokens: chunk,
                blocks: &kv.table,
                pos: kv.len(),
                logits: 1,
            }];
            let store = kv
                .store
                .as_mut()
                .ok_or_else(|| EngineError::Internal("a sequence without its store".into()))?;
            last = self.forward_batch(store, &batch)?.pop().unwrap_or_default();
            kv.extend(chunk);
        }
        let n = last.len();
        Ok(Tensor::from_vec(last, n, &Device::Cpu)?)
    }
}
