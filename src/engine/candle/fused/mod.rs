//! The fused operations of candle's forward pass, each one CUDA kernel (`kernels/*.cu`, `cuda.rs` launches
//! them) with a CPU twin (`twin.rs`): RMSNorm alone and fused with the residual add before it, rotary
//! embedding in the projection's own `[t, heads, d]` layout, and writing a batch's keys and values into the
//! paged KV store (`engine::kv`) and causal grouped-query attention of its tokens over it (`paged.rs`).
//!
//! [`Kernels`] says whether a model's candle forward pass runs these (`Fused`, the default on CUDA) or
//! candle's own ops (`Candle`, elsewhere: Metal has no kernels of ours, and the CPU runs the CPU engine).
//! `AGENTD_CANDLE_OPS=fused|candle` overrides the default, for A/B runs on a GPU and for checking the
//! fused path on the CPU through the twins.

pub mod check;
mod paged;
pub(crate) mod twin;

#[cfg(feature = "cuda")]
mod cuda;

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Device, Layout, Shape, Tensor};

pub use crate::engine::candle::fused::paged::{kv_write, paged_attention, PagedBatch, PagedSeq};
pub use crate::engine::candle::fused::twin::RotaryShape;
use crate::engine::error::{EngineError, Result};

/// Which ops candle's forward pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// candle's own (`candle_nn::ops`, matmul + softmax attention).
    Candle,
    /// This module's: our CUDA kernels on CUDA, their CPU twins on the CPU.
    Fused,
}

impl Kernels {
    /// The default for `device`, unless `AGENTD_CANDLE_OPS` says otherwise.
    pub fn for_device(device: &Device) -> Result<Self> {
        match std::env::var("AGENTD_CANDLE_OPS") {
            Ok(v) => v.parse(),
            Err(_) => Ok(if device.is_cuda() {
                Self::Fused
            } else {
                Self::Candle
            }),
        }
    }

    /// Whether `device` can run this choice (Metal has no fused kernels).
    pub fn check(self, device: &Device) -> Result<()> {
        if self == Self::Fused && device.is_metal() {
            return Err(EngineError::Device(
                "the fused kernels run on CUDA and the CPU, not Metal (AGENTD_CANDLE_OPS=candle)"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl std::str::FromStr for Kernels {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "candle" => Ok(Self::Candle),
            "fused" => Ok(Self::Fused),
            other => Err(EngineError::Device(format!(
                "AGENTD_CANDLE_OPS=`{other}`: expected `fused` or `candle`"
            ))),
        }
    }
}

/// RMSNorm of each row of `x` (last dimension) times `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op2_no_bwd(w, &RmsNorm { eps })?)
}

/// `(x + r, rms_norm(x + r) · w)` in one pass.
pub fn add_rms_norm(x: &Tensor, r: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    if x.dims() != r.dims() {
        return Err(EngineError::Internal(format!(
            "add_rms_norm of {:?} and {:?}",
            x.dims(),
            r.dims()
        )));
    }
    let both = x
        .contiguous()?
        .apply_op3_no_bwd(&r.contiguous()?, w, &AddRmsNorm { eps })?;
    Ok((both.get(0)?, both.get(1)?))
}

/// Rotates `x: [b = 1, t, heads, d]` at positions `pos..pos + t` with the tables `cos`, `sin`:
/// `[positions, rot / 2]` (the first `rot` dims of each head rotate).
pub fn rotary(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    pos: usize,
    interleaved: bool,
) -> Result<Tensor> {
    let (_, t, heads, head_dim) = x.dims4()?;
    let rot = 2 * cos.dim(1)?;
    if rot > head_dim || pos + t > cos.dim(0)? {
        return Err(EngineError::Internal(format!(
            "rotary tables {:?} do not cover {t} rows of {head_dim} at {pos}",
            cos.dims()
        )));
    }
    let op = Rotary(RotaryShape {
        heads,
        head_dim,
        rot,
        pos,
        interleaved,
    });
    Ok(x.contiguous()?.apply_op3_no_bwd(cos, sin, &op)?)
}

struct RmsNorm {
    eps: f32,
}

struct AddRmsNorm {
    eps: f32,
}

struct Rotary(RotaryShape);

/// The f32 data of a contiguous CPU tensor.
fn contiguous<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        bail!("{what}: the fused ops take f32, not {:?}", s.dtype());
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{what} must be contiguous"),
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "agentd-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, w) = (contiguous(s1, l1, "x")?, contiguous(s2, l2, "w")?);
        if w.is_empty() || x.len() % w.len() != 0 {
            bail!("rms_norm: rows of {} under weights of {}", x.len(), w.len());
        }
        let mut out = vec![0f32; x.len()];
        twin::rms_norm(x, w, self.eps, &mut out);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::rms_norm((s1, l1), (s2, l2), self.eps)
    }
}

impl CustomOp3 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "agentd-add-rms-norm"
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
        let (x, r, w) = (
            contiguous(s1, l1, "x")?,
            contiguous(s2, l2, "r")?,
            contiguous(s3, l3, "w")?,
        );
        if w.is_empty() || x.len() % w.len() != 0 || r.len() != x.len() {
            bail!(
                "add_rms_norm: {} + {} under weights of {}",
                x.len(),
                r.len(),
                w.len()
            );
        }
        let mut both = vec![0f32; 2 * x.len()];
        let (sum, out) = both.split_at_mut(x.len());
        twin::add_rms_norm(x, r, w, self.eps, sum, out);
        Ok((CpuStorage::F32(both), stacked(l1.shape())))
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
        cuda::add_rms_norm((s1, l1), (s2, l2), (s3, l3), self.eps)
    }
}

/// `[2, ..shape]`: the two results of [`AddRmsNorm`] in one buffer.
fn stacked(shape: &Shape) -> Shape {
    let mut dims = vec![2];
    dims.extend_from_slice(shape.dims());
    Shape::from_dims(&dims)
}

impl CustomOp3 for Rotary {
    fn name(&self) -> &'static str {
        "agentd-rotary"
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
        let x = contiguous(s1, l1, "x")?;
        let (cos, sin) = (contiguous(s2, l2, "cos")?, contiguous(s3, l3, "sin")?);
        let mut out = vec![0f32; x.len()];
        twin::rotary(x, cos, sin, self.0, &mut out);
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
        cuda::rotary((s1, l1), (s2, l2), (s3, l3), self.0)
    }
}

#[cfg(test)]
mod tests;
