//! Loading a decoder for the CPU engine: the shared weight loader's tensors become our matrices (rows in their
//! file types, or tiles) and vectors, the embedding table is read in place, and the shapes are checked once.

use std::sync::Mutex;

use candle_core::quantized::QTensor;
use candle_core::Device;

use super::{shapes, CpuModel, Ffn, Layer, MoeFfn, Scratch, MAX_HEAD_DIM};
use crate::engine::arch::weights::{
    FfnWeights, LayerWeights, WeightFormat, WeightMatrix, WeightReader,
};
use crate::engine::arch::DecoderConfig;
use crate::engine::cpu::embedding::Embedding;
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::pool::ThreadPool;
use crate::engine::cpu::qmatrix::QMatrix;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::{GgufFile, SharedBytes};

/// Turns the shared loader's tensors ([`WeightReader`]) into the CPU engine's matrices and vectors.
struct Build {
    isa: Isa,
    weight_bytes: usize,
}

impl Build {
    fn vector(&self, q: QTensor) -> Result<Vec<f32>> {
        Ok(q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?)
    }

    /// A matrix over the loader's matrix: the file's bytes in place when used as stored, else the tensor's.
    fn matrix(&mut self, w: WeightMatrix) -> Result<QMatrix> {
        let (rows, cols) = w.dims2()?;
        let dtype = w.dtype();
        let data = match w {
            WeightMatrix::Stored { bytes, .. } => bytes,
            WeightMatrix::Tensor(q) => SharedBytes::from(q.data()?.into_owned()),
        };
        let m = QMatrix::from_raw(data, dtype, rows, cols, self.isa)?;
        self.weight_bytes += m.storage_bytes();
        Ok(m)
    }

    fn matrices(&mut self, ws: Vec<WeightMatrix>) -> Result<Vec<QMatrix>> {
        ws.into_iter().map(|w| self.matrix(w)).collect()
    }

    fn layer(&mut self, w: LayerWeights, swa: bool) -> Result<Layer> {
        let ffn = match w.ffn {
            FfnWeights::Dense { gate, up, down } => Ffn::Dense {
                gate: self.matrix(gate)?,
                up: self.matrix(up)?,
                down: self.matrix(down)?,
            },
            FfnWeights::Moe {
                router,
                gate,
                up,
                down,
                moe,
            } => Ffn::Moe(MoeFfn {
                router: self.vector(router)?,
                gate: self.matrices(gate)?,
                up: self.matrices(up)?,
                down: self.matrices(down)?,
                moe,
            }),
        };
        let pair = |b: &Self, p: Option<[QTensor; 2]>| -> Result<Option<[Vec<f32>; 2]>> {
            p.map(|[a, c]| Ok([b.vector(a)?, b.vector(c)?])).transpose()
        };
        Ok(Layer {
            attn_norm: self.vector(w.attn_norm)?,
            q: self.matrix(w.q)?,
            k: self.matrix(w.k)?,
            v: self.matrix(w.v)?,
            o: self.matrix(w.o)?,
            bias: w
                .bias
                .map(|[q, k, v]| {
                    Ok::<_, EngineError>([self.vector(q)?, self.vector(k)?, self.vector(v)?])
                })
                .transpose()?,
            qk_norm: pair(self, w.qk_norm)?,
            ffn_norm: self.vector(w.ffn_norm)?,
            ffn,
            post_norms: pair(self, w.post_norms)?,
            swa,
        })
    }
}

impl CpuModel {
    /// Loads `config`'s decoder from `gguf` for the CPU engine with `threads` threads.
    pub fn load(
        gguf: &GgufFile,
        config: DecoderConfig,
        to_q8_0: bool,
        threads: usize,
    ) -> Result<Self> {
        let isa = Isa::detect();
        let format = match to_q8_0 {
            true => WeightFormat::Q8_0,
            false => WeightFormat::Auto,
        };
        let mut ld = WeightReader::mapped(gguf, format)?;
        let mut build = Build {
            isa,
            weight_bytes: 0,
        };
        // The embedding table is read in place (rows are dequantized when looked up).
        let (embed_dtype, embed_shape, _) = gguf.tensor_range("token_embd.weight")?;
        let (&[vocab_size, hidden], true) = (
            embed_shape.as_slice(),
            embed_shape.first().is_some_and(|&v| v > 0),
        ) else {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "token_embd.weight has shape {embed_shape:?}, not [vocab, hidden]"
                ),
            });
        };
        config.check_embedding_width(gguf, hidden)?;
        let embed_data = gguf.mapped("token_embd.weight")?;
        let embed = Embedding {
            row_bytes: embed_data.len() / vocab_size,
            data: embed_data.clone(),
            dtype: embed_dtype,
            cols: hidden,
            tied: !ld.has("output.weight") && !ld.requantises(embed_dtype),
        };
        let output = if ld.has("output.weight") {
            let w = ld.matrix("output.weight")?;
            build.matrix(w)?
        } else if ld.requantises(embed_dtype) {
            // Tied embeddings, requantised: the output head gets its own Q8_0 copy.
            let raw = ld.raw("token_embd.weight")?;
            let q = ld.requantised(raw)?;
            build.matrix(WeightMatrix::Tensor(q))?
        } else {
            // Tied embeddings: the output head reads the embedding table's bytes.
            build.matrix(WeightMatrix::Stored {
                bytes: embed_data,
                dtype: embed_dtype,
                rows: vocab_size,
                cols: hidden,
            })?
        };
        let norm = build.vector(ld.raw("output_norm.weight")?)?;
        if config.qk_norm && config.head_dim > MAX_HEAD_DIM {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "head width {} is over the {MAX_HEAD_DIM} the CPU engine normalises",
                    config.head_dim
                ),
            });
        }
        let mut layers = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            layers.push(build.layer(ld.layer(&config, i)?, config.is_swa(i))?);
        }
        shapes::check(gguf, &config, &layers, &output, &norm, vocab_size, hidden)?;
        let (cos, sin) = config.rope_tables();
        let swa_tables = config.rope_tables_swa();
        let weight_bytes = build.weight_bytes;
        Ok(Self {
            swa_tables,
            config,
            vocab_size,
            weight_bytes,
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            isa,
            pool: ThreadPool::new(threads),
            scratch: Mutex::new(Scratch::default()),
        })
    }
}
