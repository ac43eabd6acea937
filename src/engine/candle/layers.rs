//! The building blocks of candle's forward pass that every supported architecture shares: the layers built from
//! the shared loader's tensors (`arch::weights`), RMS norm, rotary tables (partial rotation too), grouped-query
//! attention over the paged KV store, the gated MLP (SwiGLU or GeGLU), and Gemma's post-norms. Norms, rotary
//! embedding and attention run either candle's ops (`paged.rs`) or our fused ones (`fused/`, CUDA kernels with
//! CPU twins), per [`Kernels`].

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::fused::{self, Kernels, PagedBatch};
use super::paged::PagedLayout;
use crate::engine::arch::weights::{FfnWeights, LayerWeights, WeightMatrix};
use crate::engine::arch::{Activation, DecoderConfig, RopeStyle};
use crate::engine::error::{EngineError, Result};

/// Turns the shared loader's tensors (`arch::weights`) into candle's matrices and vectors on the device.
pub(super) struct Build {
    pub device: Device,
    /// Bytes of every matrix built so far.
    pub weight_bytes: usize,
}

impl Build {
    /// A weight matrix for `x @ Wᵀ`, on candle's kernels.
    pub fn linear(&mut self, w: WeightMatrix) -> Result<Linear> {
        let q = w.into_tensor(&self.device)?;
        self.weight_bytes += q.storage_size_in_bytes();
        Ok(Linear::Candle(QMatMul::from_qtensor(q)?))
    }

    fn linears(&mut self, qs: Vec<WeightMatrix>) -> Result<Vec<Linear>> {
        qs.into_iter().map(|q| self.linear(q)).collect()
    }

    /// A small tensor (norm weight, bias, router) as f32.
    pub fn vector(&self, q: QTensor) -> Result<Tensor> {
        Ok(q.dequantize(&self.device)?)
    }

    pub fn norm(&self, q: QTensor, eps: f64) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: self.vector(q)?,
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
            Kernels::Fused => fused::rms_norm(x, &self.weight, self.eps),
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
            Kernels::Fused => fused::add_rms_norm(x, r, &self.weight, self.eps),
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

    /// The tables of each position in `positions` (u32, one per row of a batch).
    pub fn gather(&self, positions: &Tensor) -> Result<RopeAt> {
        let (cos, sin) = (
            self.cos.index_select(positions, 0)?,
            self.sin.index_select(positions, 0)?,
        );
        Ok(RopeAt {
            cos,
            sin,
            style: self.style,
        })
    }
}

/// Rotary tables for the positions of one forward pass.
pub(super) struct RopeAt {
    /// One row per input row.
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
}

impl RopeAt {
    /// Rotates `x: [1, t, heads, head_dim]` (the projection's layout) with the fused kernel.
    fn apply_fused(&self, x: &Tensor) -> Result<Tensor> {
        let interleaved = self.style == RopeStyle::Interleaved;
        fused::rotary(x, &self.cos, &self.sin, 0, interleaved)
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
    moe: crate::engine::arch::Moe,
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
    /// Layer `i` from its tensors.
    pub fn build(b: &mut Build, w: LayerWeights, cfg: &DecoderConfig, i: usize) -> Result<Self> {
        let eps = cfg.rms_eps;
        let mlp = match w.ffn {
            FfnWeights::Dense { gate, up, down } => Ffn::Dense(Mlp {
                gate: b.linear(gate)?,
                up: b.linear(up)?,
                down: b.linear(down)?,
                activation: cfg.activation,
            }),
            FfnWeights::Moe {
                router,
                gate,
                up,
                down,
                moe,
            } => Ffn::Moe(MoeMlp {
                router: b.vector(router)?,
                gate: b.linears(gate)?,
                up: b.linears(up)?,
                down: b.linears(down)?,
                moe,
            }),
        };
        let (post_attn_norm, post_ffn_norm) = match w.post_norms {
            Some([a, f]) => (Some(b.norm(a, eps)?), Some(b.norm(f, eps)?)),
            None => (None, None),
        };
        Ok(Self {
            attn_norm: b.norm(w.attn_norm, eps)?,
            post_attn_norm,
            post_ffn_norm,
            swa: cfg.is_swa(i),
            attn: Attention {
                q: b.linear(w.q)?,
                k: b.linear(w.k)?,
                v: b.linear(w.v)?,
                o: b.linear(w.o)?,
                bias: w
                    .bias
                    .map(|[q, k, v]| {
                        Ok::<_, EngineError>((b.vector(q)?, b.vector(k)?, b.vector(v)?))
                    })
                    .transpose()?,
                qk_norm: w
                    .qk_norm
                    .map(|[q, k]| Ok::<_, EngineError>((b.norm(q, eps)?, b.norm(k, eps)?)))
                    .transpose()?,
                n_head: cfg.n_head,
                n_kv_head: cfg.n_kv_head,
                head_dim: cfg.head_dim,
                scale: cfg.attn_scale as f64,
            },
            ffn_norm: b.norm(w.ffn_norm, eps)?,
            mlp,
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

/// Where a layer's keys and values are: a layer of the paged store and the step's layout over it, for the
/// fused kernels or for candle's ops.
pub(super) enum LayerCache<'a> {
    Fused {
        cache: &'a Tensor,
        batch: &'a PagedBatch,
    },
    Candle {
        cache: &'a Tensor,
        layout: &'a PagedLayout,
    },
}

/// What one layer's forward pass needs besides its input and KV store.
pub(super) struct Step<'a> {
    /// Rotary tables of every row's position, for this layer's kind (global or sliding-window).
    pub rope: &'a RopeAt,
    /// The sliding window on this layer.
    pub window: Option<usize>,
    pub kernels: Kernels,
}

impl Attention {
    fn forward(&self, x: &Tensor, step: &Step<'_>, kv: LayerCache<'_>) -> Result<Tensor> {
        let rope = step.rope;
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
        let v = v.reshape((b, t, self.n_kv_head, d))?.contiguous()?;
        let y = match kv {
            LayerCache::Fused { cache, batch } => {
                // No transposes: rotary and attention read [t, heads, d].
                let q = rope.apply_fused(&q)?;
                let k = rope.apply_fused(&k)?;
                fused::kv_write(cache, &k, &v, batch)?;
                fused::paged_attention(&q, cache, batch, step.window, self.scale as f32)?
                    .reshape((b, t, self.n_head * d))?
            }
            LayerCache::Candle { cache, layout } => {
                let q = rope.apply(&q.transpose(1, 2)?)?;
                let k = rope
                    .apply(&k.transpose(1, 2)?)?
                    .transpose(1, 2)?
                    .contiguous()?;
                layout.write(cache, &k, &v)?;
                layout.attention(&q, cache, step.window.is_some(), self.scale)?
            }
        };
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
