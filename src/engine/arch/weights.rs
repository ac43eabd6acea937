//! The one weight loader of both forward passes: it reads a model's tensors out of the GGUF by their names, in
//! one load sequence ([`WeightReader::layer`]): fused matrices (Phi-3's `attn_qkv` and `ffn_up`, MoE expert
//! stacks) split into their parts so every forward pass sees one layout, matrices requantised to Q8_0 when the
//! [`WeightFormat`] asks, norms and biases as stored. What a forward pass keeps (candle's `QMatMul`, the CPU
//! engine's `QMatrix`) it builds from these tensors itself. A reader made with [`WeightReader::mapped`] (the CPU
//! engine's) hands out matrices used as stored as ranges of the mapped file ([`WeightMatrix::Stored`]).

use std::fs::File;
use std::io::BufReader;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::{DecoderConfig, Moe};
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::{GgufFile, SharedBytes};

/// How quantized weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// As stored in the file. On the CPU the CPU engine (`engine::cpu`) runs every type on its own kernel
    /// (types without one as f32 rows); elsewhere candle's kernels.
    #[default]
    Auto,
    /// As stored, always on candle's forward pass and kernels (on the CPU too: the reference path).
    Native,
    /// Requantise every quantized matrix to Q8_0.
    Q8_0,
}

impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "q8_0" | "q8-0" => Ok(Self::Q8_0),
            other => Err(format!(
                "unknown weight format `{other}` (auto, native, q8_0)"
            )),
        }
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Q8_0 => "q8_0",
        })
    }
}

/// Reads the fused matrix `name` and splits it by rows into matrices of `parts` rows each (in order), placed on
/// `device`. Quantized blocks run along a row, so a split moves whole rows: nothing is requantised.
fn split_rows<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    parts: &[usize],
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (rows, cols) = q.shape().dims2().map_err(|e| invalid(e.to_string()))?;
    if rows != parts.iter().sum::<usize>() {
        return Err(invalid(format!(
            "{rows} rows cannot be split into {parts:?}"
        )));
    }
    let shapes: Vec<(usize, usize)> = parts.iter().map(|&n| (n, cols)).collect();
    slice_rows(&q, rows, &shapes, device)
}

/// Reads Phi-3's fused `ffn_up` (the gate's rows, then the up projection's) as its two halves.
fn split_gate_up<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (rows, cols) = q.shape().dims2().map_err(|e| invalid(e.to_string()))?;
    if !rows.is_multiple_of(2) {
        return Err(invalid(format!(
            "{rows} rows do not split into gate and up"
        )));
    }
    slice_rows(&q, rows, &[(rows / 2, cols); 2], device)
}

/// Reads a 3-D expert tensor `name` (`[experts, rows, cols]`) as one matrix per expert, placed on `device`.
fn split_experts<R: std::io::Read + std::io::Seek>(
    gguf: &GgufFile,
    reader: &mut R,
    name: &str,
    device: &Device,
) -> Result<Vec<QTensor>> {
    let (q, invalid) = read_on_cpu(gguf, reader, name)?;
    let (experts, rows, cols) = q.shape().dims3().map_err(|e| invalid(e.to_string()))?;
    slice_rows(&q, experts * rows, &vec![(rows, cols); experts], device)
}

/// A tensor read on the CPU, and the error for it.
fn read_on_cpu<'a, R: std::io::Read + std::io::Seek>(
    gguf: &'a GgufFile,
    reader: &mut R,
    name: &'a str,
) -> Result<(QTensor, impl Fn(String) -> EngineError + 'a)> {
    let invalid = move |message: String| EngineError::InvalidGguf {
        path: gguf.path.clone(),
        message: format!("tensor `{name}`: {message}"),
    };
    let q = gguf
        .content
        .tensor(reader, name, &Device::Cpu)
        .map_err(|e| invalid(e.to_string()))?;
    Ok((q, invalid))
}

/// Consecutive row ranges of `q` (`total_rows` rows) as matrices of the given shapes, on `device`.
fn slice_rows(
    q: &QTensor,
    total_rows: usize,
    shapes: &[(usize, usize)],
    device: &Device,
) -> Result<Vec<QTensor>> {
    let data = q.data()?;
    let row_bytes = data.len() / total_rows.max(1);
    let mut at = 0;
    let mut out = Vec::with_capacity(shapes.len());
    for &(rows, cols) in shapes {
        let bytes = &data[at * row_bytes..(at + rows) * row_bytes];
        out.push(candle_core::quantized::ggml_file::qtensor_from_ggml(
            q.dtype(),
            bytes,
            vec![rows, cols],
            device,
        )?);
        at += rows;
    }
    Ok(out)
}

/// A weight matrix from the loader: a tensor read (or split, or requantised) into memory, or the file's own
/// bytes of a matrix used as stored, read in place.
pub enum WeightMatrix {
    Tensor(QTensor),
    Stored {
        bytes: SharedBytes,
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
    },
}

impl WeightMatrix {
    pub fn dtype(&self) -> GgmlDType {
        match self {
            Self::Tensor(q) => q.dtype(),
            Self::Stored { dtype, .. } => *dtype,
        }
    }

    /// (rows, cols).
    pub fn dims2(&self) -> Result<(usize, usize)> {
        match self {
            Self::Tensor(q) => Ok(q.shape().dims2()?),
            Self::Stored { rows, cols, .. } => Ok((*rows, *cols)),
        }
    }

    /// The matrix as a tensor on `device` (stored bytes are copied).
    pub fn into_tensor(self, device: &Device) -> Result<QTensor> {
        match self {
            Self::Tensor(q) => Ok(q),
            Self::Stored {
                bytes,
                dtype,
                rows,
                cols,
            } => Ok(candle_core::quantized::ggml_file::qtensor_from_ggml(
                dtype,
                &bytes,
                vec![rows, cols],
                device,
            )?),
        }
    }
}

/// One layer's tensors, fused ones split: matrices (requantised per the format) and vectors (as stored).
pub struct LayerWeights {
    pub attn_norm: QTensor,
    pub q: WeightMatrix,
    pub k: WeightMatrix,
    pub v: WeightMatrix,
    pub o: WeightMatrix,
    /// Qwen2's q, k, v biases.
    pub bias: Option<[QTensor; 3]>,
    /// Qwen3's and Gemma's per-head q and k norms.
    pub qk_norm: Option<[QTensor; 2]>,
    /// Gemma's norms of the attention and MLP outputs before their residual adds.
    pub post_norms: Option<[QTensor; 2]>,
    pub ffn_norm: QTensor,
    pub ffn: FfnWeights,
}

/// A layer's feed-forward weights.
// A load-time value, one per layer, moved into the model at once: boxing would only add allocations. (With CUDA's
// larger `QTensor` the dense variant is twice the size of the expert one.)
#[allow(clippy::large_enum_variant)]
pub enum FfnWeights {
    Dense {
        gate: WeightMatrix,
        up: WeightMatrix,
        down: WeightMatrix,
    },
    /// A mixture of experts: the router's `[experts × hidden]` weights and one matrix per expert.
    Moe {
        router: QTensor,
        gate: Vec<WeightMatrix>,
        up: Vec<WeightMatrix>,
        down: Vec<WeightMatrix>,
        moe: Moe,
    },
}

/// Reads tensors out of one GGUF onto one device.
pub struct WeightReader<'a> {
    pub gguf: &'a GgufFile,
    reader: BufReader<File>,
    device: Device,
    format: WeightFormat,
    /// Matrices used as stored come back as ranges of the mapped file.
    mapped: bool,
}

impl<'a> WeightReader<'a> {
    pub fn new(gguf: &'a GgufFile, device: &Device, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            gguf,
            reader: gguf.reader()?,
            device: device.clone(),
            format,
            mapped: false,
        })
    }

    /// A reader on the CPU whose matrices used as stored are read in place from the mapped file.
    pub fn mapped(gguf: &'a GgufFile, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            mapped: true,
            ..Self::new(gguf, &Device::Cpu, format)?
        })
    }

    pub fn has(&self, name: &str) -> bool {
        self.gguf.content.tensor_infos.contains_key(name)
    }

    /// A tensor as stored; a missing one is an invalid-file error naming it.
    pub fn raw(&mut self, name: &str) -> Result<QTensor> {
        if !self.has(name) {
            return Err(EngineError::InvalidGguf {
                path: self.gguf.path.clone(),
                message: format!("tensor `{name}` is missing"),
            });
        }
        self.gguf
            .content
            .tensor(&mut self.reader, name, &self.device)
            .map_err(|e| EngineError::InvalidGguf {
                path: self.gguf.path.clone(),
                message: format!("tensor `{name}`: {e}"),
            })
    }

    /// A weight matrix, requantised per the format.
    pub fn matrix(&mut self, name: &str) -> Result<WeightMatrix> {
        if self.mapped {
            let (dtype, shape, _) = self.gguf.tensor_range(name)?;
            if let (&[rows, cols], false) = (shape.as_slice(), self.requantises(dtype)) {
                return Ok(WeightMatrix::Stored {
                    bytes: self.gguf.mapped(name)?,
                    dtype,
                    rows,
                    cols,
                });
            }
        }
        let q = self.raw(name)?;
        Ok(WeightMatrix::Tensor(self.requantised(q)?))
    }

    /// Whether the format turns matrices of `dtype` into Q8_0 (quantized types other than Q8_0, when asked).
    pub fn requantises(&self, dtype: GgmlDType) -> bool {
        let quantized = !matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        self.format == WeightFormat::Q8_0 && quantized && dtype != GgmlDType::Q8_0
    }

    /// `q` as the format keeps matrices: Q8_0 when asked (quantized types other than Q8_0), else as is.
    pub fn requantised(&self, q: QTensor) -> Result<QTensor> {
        if self.requantises(q.dtype()) {
            let f = q.dequantize(&self.device)?;
            return Ok(QTensor::quantize(&f, GgmlDType::Q8_0)?);
        }
        Ok(q)
    }

    fn matrices<const N: usize>(&mut self, qs: Vec<QTensor>) -> Result<[WeightMatrix; N]> {
        let qs = qs
            .into_iter()
            .map(|q| Ok(WeightMatrix::Tensor(self.requantised(q)?)))
            .collect::<Result<Vec<_>>>()?;
        qs.try_into().map_err(|_| {
            EngineError::Internal("a fused matrix split into the wrong number of parts".into())
        })
    }

    /// A 3-D expert tensor as one matrix per expert.
    fn experts(&mut self, name: &str) -> Result<Vec<WeightMatrix>> {
        let qs = split_experts(self.gguf, &mut self.reader, name, &self.device)?;
        qs.into_iter()
            .map(|q| Ok(WeightMatrix::Tensor(self.requantised(q)?)))
            .collect()
    }

    /// Layer `i`'s tensors, in the one load sequence both forward passes share.
    pub fn layer(&mut self, cfg: &DecoderConfig, i: usize) -> Result<LayerWeights> {
        let p = |s: &str| format!("blk.{i}.{s}");
        let (qw, kvw) = (cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim);
        let bias = match cfg.qkv_bias {
            true => Some([
                self.raw(&p("attn_q.bias"))?,
                self.raw(&p("attn_k.bias"))?,
                self.raw(&p("attn_v.bias"))?,
            ]),
            false => None,
        };
        // q, k, v: three matrices, or Phi-3's fused `attn_qkv` (rows q | k | v).
        let [q, k, v] = if self.has(&p("attn_qkv.weight")) {
            let qs = split_rows(
                self.gguf,
                &mut self.reader,
                &p("attn_qkv.weight"),
                &[qw, kvw, kvw],
                &self.device,
            )?;
            self.matrices(qs)?
        } else {
            [
                self.matrix(&p("attn_q.weight"))?,
                self.matrix(&p("attn_k.weight"))?,
                self.matrix(&p("attn_v.weight"))?,
            ]
        };
        let qk_norm = match cfg.qk_norm {
            true => Some([
                self.raw(&p("attn_q_norm.weight"))?,
                self.raw(&p("attn_k_norm.weight"))?,
            ]),
            false => None,
        };
        let post_norms = match cfg.post_norms {
            true => Some([
                self.raw(&p("post_attention_norm.weight"))?,
                self.raw(&p("post_ffw_norm.weight"))?,
            ]),
            false => None,
        };
        Ok(LayerWeights {
            attn_norm: self.raw(&p("attn_norm.weight"))?,
            q,
            k,
            v,
            o: self.matrix(&p("attn_output.weight"))?,
            bias,
            qk_norm,
            post_norms,
            ffn_norm: self.raw(&p("ffn_norm.weight"))?,
            ffn: self.ffn(cfg, i)?,
        })
    }

    /// The layer's feed-forward weights: dense (gate and up, or Phi-3's fused gate | up), or experts.
    fn ffn(&mut self, cfg: &DecoderConfig, i: usize) -> Result<FfnWeights> {
        let p = |s: &str| format!("blk.{i}.{s}");
        let Some(moe) = cfg.moe else {
            let [gate, up] = if self.has(&p("ffn_gate.weight")) {
                [
                    self.matrix(&p("ffn_gate.weight"))?,
                    self.matrix(&p("ffn_up.weight"))?,
                ]
            } else {
                // Phi-3: `ffn_up` holds the gate's rows, then the up projection's.
                let qs = split_gate_up(
                    self.gguf,
                    &mut self.reader,
                    &p("ffn_up.weight"),
                    &self.device,
                )?;
                self.matrices(qs)?
            };
            let down = self.matrix(&p("ffn_down.weight"))?;
            return Ok(FfnWeights::Dense { gate, up, down });
        };
        let router = self.raw(&p("ffn_gate_inp.weight"))?;
        let gate = self.experts(&p("ffn_gate_exps.weight"))?;
        let up = self.experts(&p("ffn_up_exps.weight"))?;
        let down = self.experts(&p("ffn_down_exps.weight"))?;
        let counts = [gate.len(), up.len(), down.len()];
        let router_values = router.shape().elem_count();
        if !router_values.is_multiple_of(moe.experts) || counts.iter().any(|&n| n != moe.experts) {
            return Err(EngineError::InvalidGguf {
                path: self.gguf.path.clone(),
                message: format!(
                    "layer {i}: expert tensors hold {counts:?} experts, the router {router_values} values; expected {}",
                    moe.experts
                ),
            });
        }
        Ok(FfnWeights::Moe {
            router,
            gate,
            up,
            down,
            moe,
        })
    }
}
