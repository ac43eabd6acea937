//! candle's forward pass: the model on any device candle runs (CUDA, Metal, and the CPU with
//! `--weights native`), built from the shared loader's tensors (`arch::weights`), stepping a batch of sequences
//! over the paged KV store (`batch.rs`) with either our fused ops (`fused/`: CUDA kernels and their CPU twins)
//! or candle's own (`paged.rs`), per [`Kernels`].

mod batch;
pub mod fused;
mod layers;
pub(crate) mod paged;

use candle_core::{Device, Tensor};

use crate::engine::arch::weights::{WeightFormat, WeightMatrix, WeightReader};
use crate::engine::arch::DecoderConfig;
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;
pub use fused::Kernels;
use layers::{Build, DecoderLayer, RmsNorm, Rotary};

pub struct CandleModel {
    embed: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    output: layers::Linear,
    rotary: Rotary,
    /// The sliding-window layers' tables (their own base), when there are such layers.
    rotary_swa: Option<Rotary>,
    embed_scale: Option<f64>,
    softcap: Option<f64>,
    window: Option<usize>,
    /// candle's ops or our fused kernels.
    pub kernels: Kernels,
    pub vocab_size: usize,
    /// Bytes of every weight matrix.
    pub weight_bytes: usize,
}

impl CandleModel {
    /// Loads `config`'s decoder from `gguf` onto `device`, matrices kept per `format`.
    pub fn load(
        gguf: &GgufFile,
        config: &DecoderConfig,
        device: &Device,
        format: WeightFormat,
    ) -> Result<Self> {
        let mut ld = WeightReader::new(gguf, device, format)?;
        let mut b = Build {
            device: device.clone(),
            weight_bytes: 0,
        };
        let embed_q = ld.raw("token_embd.weight")?;
        let (vocab_size, hidden) = embed_q.shape().dims2()?;
        config.check_embedding_width(gguf, hidden)?;
        let embed = embed_q.dequantize(device)?;
        let output = if ld.has("output.weight") {
            b.linear(ld.matrix("output.weight")?)?
        } else {
            // Tied embeddings: the output head reuses token_embd.
            b.linear(WeightMatrix::Tensor(ld.requantised(embed_q)?))?
        };
        let norm = b.norm(ld.raw("output_norm.weight")?, config.rms_eps)?;
        let layers = (0..config.n_layer)
            .map(|i| DecoderLayer::build(&mut b, ld.layer(config, i)?, config, i))
            .collect::<Result<Vec<_>>>()?;
        let kernels = Kernels::for_device(device)?;
        kernels.check(device)?;
        Ok(Self {
            embed,
            layers,
            norm,
            output,
            rotary: Rotary::new(config, device)?,
            rotary_swa: Rotary::swa(config, device)?,
            embed_scale: config.embed_scale.map(f64::from),
            softcap: config.final_logit_softcap.map(f64::from),
            window: config.sliding_window.as_ref().map(|w| w.size),
            kernels,
            vocab_size,
            weight_bytes: b.weight_bytes,
        })
    }
}
