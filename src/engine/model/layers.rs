//! The building blocks every supported architecture shares: weight loading (with optional requantisation and
//! fused matrices split), RMS norm, rotary tables (partial rotation too), grouped-query attention over a
//! per-sequence KV cache, the gated MLP (SwiGLU or GeGLU), and Gemma's post-norms. Norms, rotary embedding and
//! attention run either candle's ops or the fused ones of `engine::ops` (our CUDA kernels), per [`Kernels`].

use std::io::{Read, Seek};

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::{requantise, to_q8_0, Activation, DecoderConfig, RopeStyle, WeightFormat};
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;
use crate::engine::kv::LayerKv;
use crate::engine::ops::{self, Kernels, PagedBatch};

/// Everything needed while reading tensors out of a GGUF.
pub(super) struct LoadCtx<'a, R: Read + Seek> {
    pub gguf: &'a GgufFile,
    pub reader: &'a mut R,
    pub device: &'a Device,
    pub format: WeightFormat,
    pub weight_bytes: usize,
}

impl<R: Read + Seek> LoadCtx<'_, R> {
    /// A tensor as stored; a missing one is an invalid-file error naming it.
    pub fn raw(&mut self, name: &str) -> Result<QTensor> {
        if !self.gguf.content.tensor_infos.contains_key(name) {
            return Err(EngineError::InvalidGguf {
                path: self.gguf.path.clone(),
                message: format!("tensor `{name}` is missing"),
            });
        }
        self.gguf
            .content
            .tensor(self.reader, name, self.device)
            .map_err(|e| EngineError::InvalidGguf {
                path: self.gguf.path.clone(),
                message: format!("tensor `{name}`: {e}"),
            })
    }

    /// A weight matrix for `x @ Wᵀ`, requantised per the weight format, on candle's kernels.
    pub fn matmul(&mut self, name: &str) -> Result<Linear> {
        let mut q = self.raw(name)?;
        if requantise(self.format, q.dtype(), self.device) {
            q = to_q8_0(q, self.device)?;
        }
        self.weight_bytes += q.storage_size_in_bytes();
        Ok(Linear::Candle(QMatMul::from_qtensor(q)?))
    }

    /// The fused matrix `name` split by rows into `parts` (see [`super::split_rows`]), each requantised per the
    /// weight format.
    pub fn matmul_split(&mut self, name: &str, parts: &[usize]) -> Result<Vec<Linear>> {
        let qs = super::split_rows(self.gguf, self.reader, name, parts, self.device)?;
        self.linears(qs)
    }

    /// A 3-D expert tensor as one matrix per expert, each requantised per the weight format.
    pub fn experts(&mut self, name: &str) -> Result<Vec<Linear>> {
        let qs = super::split_experts(self.gguf, self.reader, name, self.device)?;
        self.linears(qs)
    }

    /// Matrices for candle's kernels, requantised per the weight format and counted.
    pub fn linears(&mut self, qs: Vec<QTensor>) -> Result<Vec<Linear>> {
        qs.into_iter()
            .map(|mut q| {
                if requantise(self.format, q.dtype(), self.device) {
                    q = to_q8_0(q, self.device)?;
                }
                self.weight_bytes += q.storage_size_in_bytes();
                Ok(Linear::Candle(QMatMul::from_qtensor(q)?))
            })
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.gguf.content.tensor_infos.contains_key(name)
    }

    /// A small tensor (norm weight, bias) as f32.
    pub fn vector(&mut self, name: &str) -> Result<Tensor> {
        Ok(self.raw(name)?.dequantize(self.device)?)
    }

    pub fn norm(&mut self, name: &str, eps: f64) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: self.vector(name)?,
            eps: eps as f32,
        })
    }
}

/// A weight matrix applied as `x @ Wᵀ`.
pub(super) enum Linear {
    Candle(QMatMul),
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Linear::Candle(m) => Ok(m.forward(x)?),
        }
    }
}

pub(super) struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        match kernels {
            Kernels::Fused => ops::rms_norm(x, &self.weight, self.eps),
            Kernels::Candle => Ok(candle_nn::ops::rms_norm(
                &x.contiguous()?,
                &self.weight,
                self.eps,
            )?),
        }
    }

    /// The residual add and this norm: `(x + r, norm(x + r))`, in one kernel when fused.
    fn add_forward(&self, x: &Tensor, r: &Tensor, kernels: Kernels) -> Result<(Tensor, Tensor)> {
        match kernels {
            Kernels::Fused => ops::add_rms_norm(x, r, &self.weight, self.eps),
            Kernels::Candle => {
                let sum = (x + r)?;
                let normed = self.forward(&sum, kernels)?;
                Ok((sum, normed))
            }
        }
    }
}

/// Precomputed cos/sin tables for every position of the context window.
pub(super) struct Rotary {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
}

impl Rotary {
    /// The global layers' tables.
    pub fn new(cfg: &DecoderConfig, device: &Device) -> Result<Self> {
        Self::from_tables(cfg, cfg.rope_tables(), device)
    }

    /// The sliding-window layers' tables, when the model has such layers.
    pub fn swa(cfg: &DecoderConfig, device: &Device) -> Result<Option<Self>> {
        cfg.rope_tables_swa()
            .map(|tables| Self::from_tables(cfg, tables, device))
            .transpose()
    }

    fn from_tables(
        cfg: &DecoderConfig,
        (cos, sin): (Vec<f32>, Vec<f32>),
        device: &Device,
    ) -> Result<Self> {
        let (half, n) = (cfg.rope_dims / 2, cfg.context_length);
        Ok(Self {
            cos: Tensor::from_vec(cos, (n, half), device)?,
            sin: Tensor::from_vec(sin, (n, half), device)?,
            style: cfg.rope_style,
        })
    }

    /// The tables of each position in `positions` (u32, one per row of a batch), for the fused kernel.
    pub fn gather(&self, positions: &Tensor) -> Result<RopeAt> {
        let (cos, sin) = (
            self.cos.index_select(positions, 0)?,
            self.sin.index_select(positions, 0)?,
        );
        Ok(RopeAt {
            all_cos: cos.clone(),
            all_sin: sin.clone(),
            cos,
            sin,
            pos: 0,
            style: self.style,
        })
    }

    /// The tables for positions `pos..pos + t`.
    pub fn at(&self, pos: usize, t: usize) -> Result<RopeAt> {
        Ok(RopeAt {
            cos: self.cos.narrow(0, pos, t)?,
            sin: self.sin.narrow(0, pos, t)?,
            all_cos: self.cos.clone(),
            all_sin: self.sin.clone(),
            pos,
            style: self.style,
        })
    }
}

/// Rotary tables for the positions of one forward pass.
pub(super) struct RopeAt {
    cos: Tensor,
    sin: Tensor,
    /// The whole tables and the first position, for the fused kernel (it indexes them itself).
    all_cos: Tensor,
    all_sin: Tensor,
    pos: usize,
    style: RopeStyle,
}

impl RopeAt {
    /// Rotates `x: [1, t, heads, head_dim]` (the projection's layout) with the fused kernel.
    fn apply_fused(&self, x: &Tensor) -> Result<Tensor> {
        let interleaved = self.style == RopeStyle::Interleaved;
        ops::rotary(x, &self.all_cos, &self.all_sin, self.pos, interleaved)
    }

    /// Rotates the first `2 · cos.width` dimensions of every head of `x: [b, heads, t, head_dim]`; the rest pass.
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let d = x.dim(3)?;
        let rot = 2 * self.cos.dim(1)?;
        let rotate = |x: &Tensor| -> Result<Tensor> {
            let x = x.contiguous()?;
            Ok(match self.style {
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &self.cos, &self.sin)?,
                RopeStyle::Neox => candle_nn::rotary_emb::rope(&x, &self.cos, &self.sin)?,
            })
        };
        if rot == d {
            return rotate(x);
        }
        let head = rotate(&x.narrow(3, 0, rot)?)?;
        Ok(Tensor::cat(&[&head, &x.narrow(3, rot, d - rot)?], 3)?)
    }
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    bias: Option<(Tensor, Tensor, Tensor)>,
    /// Qwen3's per-head RMSNorm of q and k.
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    scale: f64,
}

struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
    activation: Activation,
}

/// A routed mixture of SwiGLU experts (Qwen3-MoE), run token by token (the reference path).
struct MoeMlp {
    /// `[experts, hidden]`, f32.
    router: Tensor,
    gate: Vec<Linear>,
    up: Vec<Linear>,
    down: Vec<Linear>,
    moe: super::Moe,
}

/// The feed-forward part of a layer.
enum Ffn {
    Dense(Mlp),
    Moe(MoeMlp),
}

pub(super) struct DecoderLayer {
    attn_norm: RmsNorm,
    attn: Attention,
    /// Gemma's norm of the attention output before the residual add.
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    mlp: Ffn,
    /// Gemma's norm of the MLP output before the residual add.
    post_ffn_norm: Option<RmsNorm>,
    /// Whether this layer attends within the sliding window (and rotates with the SWA tables).
    pub swa: bool,
}

impl DecoderLayer {
    pub fn load<R: Read + Seek>(
        ctx: &mut LoadCtx<'_, R>,
        cfg: &DecoderConfig,
        i: usize,
    ) -> Result<Self> {
        let p = |s: &str| format!("blk.{i}.{s}");
        let bias = if cfg.qkv_bias {
            Some((
                ctx.vector(&p("attn_q.bias"))?,
                ctx.vector(&p("attn_k.bias"))?,
                ctx.vector(&p("attn_v.bias"))?,
            ))
        } else {
            None
        };
        let (qw, kvw) = (cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim);
        let [q, k, v] = if ctx.has(&p("attn_qkv.weight")) {
            fused::<3>(ctx.matmul_split(&p("attn_qkv.weight"), &[qw, kvw, kvw])?)?
        } else {
            [
                ctx.matmul(&p("attn_q.weight"))?,
                ctx.matmul(&p("attn_k.weight"))?,
                ctx.matmul(&p("attn_v.weight"))?,
            ]
        };
        let mlp = match cfg.moe {
            Some(moe) => Ffn::Moe(MoeMlp {
                router: ctx.vector(&p("ffn_gate_inp.weight"))?,
                gate: ctx.experts(&p("ffn_gate_exps.weight"))?,
                up: ctx.experts(&p("ffn_up_exps.weight"))?,
                down: ctx.experts(&p("ffn_down_exps.weight"))?,
                moe,
            }),
            None => Ffn::Dense(Self::dense_mlp(ctx, cfg, i)?),
        };
        Ok(Self {
            attn_norm: ctx.norm(&p("attn_norm.weight"), cfg.rms_eps)?,
            post_attn_norm: match cfg.post_norms {
                true => Some(ctx.norm(&p("post_attention_norm.weight"), cfg.rms_eps)?),
                false => None,
            },
            post_ffn_norm: match cfg.post_norms {
                true => Some(ctx.norm(&p("post_ffw_norm.weight"), cfg.rms_eps)?),
                false => None,
            },
            swa: cfg.is_swa(i),
            attn: Attention {
                q,
                k,
                v,
                o: ctx.matmul(&p("attn_output.weight"))?,
                bias,
                qk_norm: if cfg.qk_norm {
                    Some((
                        ctx.norm(&p("attn_q_norm.weight"), cfg.rms_eps)?,
                        ctx.norm(&p("attn_k_norm.weight"), cfg.rms_eps)?,
                    ))
                } else {
                    None
                },
                n_head: cfg.n_head,
                n_kv_head: cfg.n_kv_head,
                head_dim: cfg.head_dim,
                scale: cfg.attn_scale as f64,
            },
            ffn_norm: ctx.norm(&p("ffn_norm.weight"), cfg.rms_eps)?,
            mlp,
        })
    }

    /// The dense gated MLP (gate and up, or Phi-3's fused gate|up).
    fn dense_mlp<R: Read + Seek>(
        ctx: &mut LoadCtx<'_, R>,
        cfg: &DecoderConfig,
        i: usize,
    ) -> Result<Mlp> {
        let p = |s: &str| format!("blk.{i}.{s}");
        let [gate, up] = if ctx.has(&p("ffn_gate.weight")) {
            [
                ctx.matmul(&p("ffn_gate.weight"))?,
                ctx.matmul(&p("ffn_up.weight"))?,
            ]
        } else {
            // Phi-3: `ffn_up` holds the gate's rows, then the up projection's.
            let qs = super::split_gate_up(ctx.gguf, ctx.reader, &p("ffn_up.weight"), ctx.device)?;
            fused::<2>(ctx.linears(qs)?)?
        };
        Ok(Mlp {
            gate,
            up,
            down: ctx.matmul(&p("ffn_down.weight"))?,
            activation: cfg.activation,
        })
    }

    /// One pre-norm transformer block over `x: [1, t, hidden]`.
    pub fn forward(&self, x: &Tensor, step: &Step<'_>, kv: LayerCache<'_>) -> Result<Tensor> {
        let k = step.kernels;
        let h = self.attn_norm.forward(x, k)?;
        let mut h = self.attn.forward(&h, step, kv)?;
        if let Some(n) = &self.post_attn_norm {
            h = n.forward(&h, k)?;
        }
        let (x, h) = self.ffn_norm.add_forward(x, &h, k)?;
        let mut h = match &self.mlp {
            Ffn::Dense(m) => m.forward(&h)?,
            Ffn::Moe(m) => m.forward(&h)?,
        };
        if let Some(n) = &self.post_ffn_norm {
            h = n.forward(&h, k)?;
        }
        Ok((x + h)?)
    }
}

/// Where a layer's keys and values are.
pub(super) enum LayerCache<'a> {
    /// One sequence's own buffers (one sequence per pass).
    Own(&'a mut LayerKv),
    /// A layer of the paged store, for a batch of sequences laid out by `batch` (fused ops only).
    Paged {
        cache: &'a Tensor,
        batch: &'a PagedBatch,
    },
}

/// What one layer's forward pass needs besides its input and KV buffers.
pub(super) struct Step<'a> {
    /// Rotary tables for this layer's kind (global or sliding-window).
    pub rope: &'a RopeAt,
    /// Additive causal mask (with the window on sliding-window layers), `None` for one query with nothing
    /// to hide; candle's attention only.
    pub mask: Option<&'a Tensor>,
    /// The sliding window on this layer; the fused attention applies it itself.
    pub window: Option<usize>,
    /// The absolute position of the first input row.
    pub pos: usize,
    pub kernels: Kernels,
}

impl Attention {
    fn forward(&self, x: &Tensor, step: &Step<'_>, kv: LayerCache<'_>) -> Result<Tensor> {
        let (rope, mask, pos) = (step.rope, step.mask, step.pos);
        let (b, t, _) = x.dims3()?;
        let mut q = self.q.forward(x)?;
        let mut k = self.k.forward(x)?;
        let mut v = self.v.forward(x)?;
        if let Some((bq, bk, bv)) = &self.bias {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let d = self.head_dim;
        let mut q = q.reshape((b, t, self.n_head, d))?;
        let mut k = k.reshape((b, t, self.n_kv_head, d))?;
        if let Some((qn, kn)) = &self.qk_norm {
            q = qn.forward(&q, step.kernels)?;
            k = kn.forward(&k, step.kernels)?;
        }
        if step.kernels == Kernels::Fused {
            // No transposes: rotary and attention read [t, heads, d]; only the KV write reorders.
            let q = rope.apply_fused(&q)?;
            let k = rope.apply_fused(&k)?;
            let v = v.reshape((b, t, self.n_kv_head, d))?;
            let scale = self.scale as f32;
            let y = match kv {
                LayerCache::Own(kv) => {
                    let (k, v) = kv.append(&k.transpose(1, 2)?, &v.transpose(1, 2)?, pos)?;
                    ops::attention(&q, &k, &v, pos, step.window, scale)?
                }
                LayerCache::Paged { cache, batch } => {
                    ops::kv_write(cache, &k, &v.contiguous()?, batch)?;
                    ops::paged_attention(&q, cache, batch, step.window, scale)?
                }
            };
            return self.o.forward(&y.reshape((b, t, self.n_head * d))?);
        }
        let LayerCache::Own(kv) = kv else {
            return Err(EngineError::Internal(
                "the paged KV store runs with the fused ops only".into(),
            ));
        };
        let q = q.transpose(1, 2)?;
        let k = k.transpose(1, 2)?;
        let v = v
            .reshape((b, t, self.n_kv_head, d))?
            .transpose(1, 2)?
            .contiguous()?;
        let q = rope.apply(&q)?;
        let k = rope.apply(&k)?;
        let (k, v) = kv.append(&k, &v, pos)?;
        let kv_len = pos + t;
        // Grouped-query attention without copying K/V: query heads that share a KV head are consecutive, so
        // fold them into the row dimension: [1, n_kv, n_rep * t, d].
        let n_rep = self.n_head / self.n_kv_head;
        let q = q.reshape((b, self.n_kv_head, n_rep * t, d))?;
        let att = (q.matmul(&k.t()?)? * self.scale)?;
        let att = match mask {
            Some(mask) => att
                .reshape((b, self.n_kv_head, n_rep, t, kv_len))?
                .broadcast_add(mask)?
                .reshape((b, self.n_kv_head, n_rep * t, kv_len))?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v)?; // [1, n_kv, n_rep * t, d]
        let y = y
            .reshape((b, self.n_head, t, d))?
            .transpose(1, 2)?
            .reshape((b, t, self.n_head * d))?;
        self.o.forward(&y)
    }
}

impl MoeMlp {
    /// Each token through its experts, weighted (see [`super::Moe::route`]).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let rows = x.reshape((b * t, h))?;
        let logits = rows
            .matmul(&self.router.t()?)?
            .to_dtype(candle_core::DType::F32)?;
        let logits: Vec<Vec<f32>> = logits.to_vec2()?;
        let mut out = Vec::with_capacity(b * t);
        for (i, l) in logits.iter().enumerate() {
            let xr = rows.narrow(0, i, 1)?;
            let mut acc: Option<Tensor> = None;
            for (e, w) in self.moe.route(l) {
                let g = candle_nn::ops::silu(&self.gate[e].forward(&xr)?)?;
                let u = self.up[e].forward(&xr)?;
                let y = (self.down[e].forward(&(g * u)?)? * w as f64)?;
                acc = Some(match acc {
                    Some(a) => (a + y)?,
                    None => y,
                });
            }
            out.push(acc.ok_or_else(|| EngineError::Internal("a token went to no expert".into()))?);
        }
        Ok(Tensor::cat(&out, 0)?.reshape((b, t, h))?)
    }
}

impl Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate.forward(x)?;
        let gate = match self.activation {
            Activation::Silu => candle_nn::ops::silu(&gate)?,
            // candle's `gelu` is the tanh approximation.
            Activation::GeluTanh => gate.gelu()?,
        };
        let up = self.up.forward(x)?;
        self.down.forward(&(gate * up)?)
    }
}

/// The parts of a split fused matrix as an array.
fn fused<const N: usize>(parts: Vec<Linear>) -> Result<[Linear; N]> {
    parts.try_into().map_err(|_| {
        EngineError::Internal("a fused matrix split into the wrong number of parts".into())
    })
}
