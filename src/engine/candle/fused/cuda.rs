//! Launches the kernels of `kernels/*.cu` (PTX embedded by `kernels/build.rs`) on candle's CUDA storage, for
//! the ops in `mod.rs`. Each function checks what its kernel assumes before launching it.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{bail, CudaStorage, Layout, Result, Shape};

use super::twin::{PagedShape, RotaryShape};

/// A tensor as candle hands it to an op: its storage and layout.
pub type Input<'a> = (&'a CudaStorage, &'a Layout);

mod ptx {
    include!(concat!(env!("OUT_DIR"), "/agentd_kernels.rs"));
}

/// The f32 data of a contiguous tensor.
fn contiguous<'a>(s: &'a CudaStorage, l: &Layout, what: &str) -> Result<CudaView<'a, f32>> {
    let data = s.as_cuda_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(data.slice(a..b)),
        None => bail!("{what} must be contiguous"),
    }
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| candle_core::Error::Msg(format!("{what} = {v} is too large")))
}

/// Threads for one row of `n`: a multiple of 32, at most 1024.
fn row_threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 1024) as u32
}

pub fn rms_norm(
    (s1, l1): Input<'_>,
    (s2, l2): Input<'_>,
    eps: f32,
) -> Result<(CudaStorage, Shape)> {
    let dev = s1.device().clone();
    let (x, w) = (contiguous(s1, l1, "x")?, contiguous(s2, l2, "w")?);
    let n = w.len();
    if n == 0 || x.len() % n != 0 {
        bail!("rms_norm: rows of {} under weights of {n}", x.len());
    }
    let rows = int(x.len() / n, "rows")?;
    let out = unsafe { dev.alloc::<f32>(x.len()) }?;
    let func = dev.get_or_load_custom_func("rms_norm_f32", "agentd_rmsnorm", ptx::RMSNORM)?;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (row_threads(n), 1, 1),
        shared_mem_bytes: 0,
    };
    let n = int(n, "n")?;
    let mut b = func.builder();
    b.arg(&x).arg(&w).arg(&out).arg(&n).arg(&eps);
    // SAFETY: the kernel reads rows·n floats of x, n of w and writes rows·n of out, all allocated so.
    unsafe { b.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), l1.shape().clone()))
}

pub fn add_rms_norm(
    (s1, l1): Input<'_>,
    (s2, l2): Input<'_>,
    (s3, l3): Input<'_>,
    eps: f32,
) -> Result<(CudaStorage, Shape)> {
    let dev = s1.device().clone();
    let (x, r, w) = (
        contiguous(s1, l1, "x")?,
        contiguous(s2, l2, "r")?,
        contiguous(s3, l3, "w")?,
    );
    let n = w.len();
    if n == 0 || x.len() % n != 0 || r.len() != x.len() {
        bail!(
            "add_rms_norm: {} + {} under weights of {n}",
            x.len(),
            r.len()
        );
    }
    let rows = int(x.len() / n, "rows")?;
    let both = unsafe { dev.alloc::<f32>(2 * x.len()) }?;
    let func = dev.get_or_load_custom_func("add_rms_norm_f32", "agentd_rmsnorm", ptx::RMSNORM)?;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (row_threads(n), 1, 1),
        shared_mem_bytes: 0,
    };
    let n = int(n, "n")?;
    let mut b = func.builder();
    b.arg(&x)
        .arg(&r)
        .arg(&w)
        .arg(&both)
        .arg(&rows)
        .arg(&n)
        .arg(&eps);
    // SAFETY: reads rows·n floats of x and r, n of w; writes 2·rows·n of both, all allocated so.
    unsafe { b.launch(cfg) }.w()?;
    let mut dims = vec![2];
    dims.extend_from_slice(l1.shape().dims());
    Ok((
        CudaStorage::wrap_cuda_slice(both, dev),
        Shape::from_dims(&dims),
    ))
}

pub fn rotary(
    (s1, l1): Input<'_>,
    (s2, l2): Input<'_>,
    (s3, l3): Input<'_>,
    s: RotaryShape,
) -> Result<(CudaStorage, Shape)> {
    let dev = s1.device().clone();
    let x = contiguous(s1, l1, "x")?;
    let (cos, sin) = (contiguous(s2, l2, "cos")?, contiguous(s3, l3, "sin")?);
    let row = s.heads * s.head_dim;
    if row == 0 || x.len() % row != 0 || s.rot > s.head_dim || !s.rot.is_multiple_of(2) {
        bail!(
            "rotary: {} values in rows of {} heads × {}",
            x.len(),
            s.heads,
            s.head_dim
        );
    }
    let t = x.len() / row;
    if (s.pos + t) * (s.rot / 2) > cos.len() || cos.len() != sin.len() {
        bail!("rotary: the tables do not reach position {}", s.pos + t);
    }
    let pairs = x.len() / 2;
    let out = unsafe { dev.alloc::<f32>(x.len()) }?;
    let func = dev.get_or_load_custom_func("rotary_f32", "agentd_rotary", ptx::ROTARY)?;
    let cfg = LaunchConfig {
        grid_dim: (int(pairs.div_ceil(256), "blocks")? as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (t, heads, d, rot, pos) = (
        int(t, "t")?,
        int(s.heads, "heads")?,
        int(s.head_dim, "head_dim")?,
        int(s.rot, "rot")?,
        int(s.pos, "pos")?,
    );
    let interleaved = i32::from(s.interleaved);
    let mut b = func.builder();
    b.arg(&x).arg(&cos).arg(&sin).arg(&out);
    b.arg(&t)
        .arg(&heads)
        .arg(&d)
        .arg(&rot)
        .arg(&pos)
        .arg(&interleaved);
    // SAFETY: one thread per pair of x (t·heads·d/2), table rows up to pos + t checked above.
    unsafe { b.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), l1.shape().clone()))
}

/// The kernel's limits (kernels/attention.cu).
const MAX_HEAD_DIM: usize = 256;
const ATTENTION_THREADS: u32 = 256;

// The kernels hard-code the paged store's block size.
const _: () = assert!(
    crate::engine::candle::fused::twin::BLOCK == 16,
    "kernels/attention.cu's BLOCK must match"
);

/// The u32 metadata of a paged batch.
fn meta<'a>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, u32>> {
    let data = s.as_cuda_slice::<u32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(data.slice(a..b)),
        None => bail!("the paged batch metadata must be contiguous"),
    }
}

/// The ints of a paged shape, in kernel order.
fn paged_ints(s: &PagedShape) -> Result<[i32; 6]> {
    Ok([
        int(s.t, "t")?,
        int(s.n_head, "n_head")?,
        int(s.n_kv, "n_kv")?,
        int(s.head_dim, "head_dim")?,
        int(s.n_blocks, "n_blocks")?,
        int(s.max_blocks, "max_blocks")?,
    ])
}

pub fn kv_write(
    (s1, l1): (&mut CudaStorage, &Layout),
    (s2, l2): Input<'_>,
    (s3, l3): Input<'_>,
    s: PagedShape,
) -> Result<()> {
    let dev = s1.device().clone();
    let (rows, meta) = (contiguous(s2, l2, "rows")?, meta(s3, l3)?);
    if rows.len() != 2 * s.t * s.n_kv * s.head_dim || meta.len() < 2 * s.t {
        bail!(
            "kv_write: {} values and {} metadata for {} tokens",
            rows.len(),
            meta.len(),
            s.t
        );
    }
    if l1.start_offset() != 0
        || l1.shape().elem_count() != 2 * s.n_blocks * s.n_kv * 16 * s.head_dim
    {
        bail!("kv_write: the paged KV layer is not a whole [2, n_blocks, n_kv, 16, d] buffer");
    }
    let cache = s1.as_cuda_slice_mut::<f32>()?;
    let func = dev.get_or_load_custom_func("kv_write_f32", "agentd_attention", ptx::ATTENTION)?;
    let cfg = LaunchConfig {
        grid_dim: (int(rows.len().div_ceil(256), "blocks")? as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let [t, _, n_kv, d, n_blocks, max_blocks] = paged_ints(&s)?;
    let mut b = func.builder();
    b.arg(cache).arg(&rows).arg(&meta);
    b.arg(&t).arg(&n_kv).arg(&d).arg(&n_blocks).arg(&max_blocks);
    // SAFETY: positions and block ids in meta were checked on the host (PagedBatch::new); the cache holds
    // 2·n_blocks blocks (checked above).
    unsafe { b.launch(cfg) }.w()?;
    Ok(())
}

pub fn paged_attention(
    (s1, l1): Input<'_>,
    (s2, l2): Input<'_>,
    (s3, l3): Input<'_>,
    s: PagedShape,
) -> Result<(CudaStorage, Shape)> {
    let dev = s1.device().clone();
    let (q, cache, meta) = (
        contiguous(s1, l1, "q")?,
        contiguous(s2, l2, "cache")?,
        meta(s3, l3)?,
    );
    if s.head_dim > MAX_HEAD_DIM {
        bail!(
            "paged attention: heads of {} (the kernel takes up to {MAX_HEAD_DIM})",
            s.head_dim
        );
    }
    if q.len() != s.t * s.n_head * s.head_dim
        || cache.len() != 2 * s.n_blocks * s.n_kv * 16 * s.head_dim
        || meta.len() < 2 * s.t
    {
        bail!(
            "paged attention: q of {}, a cache of {}, metadata of {}",
            q.len(),
            cache.len(),
            meta.len()
        );
    }
    let out = unsafe { dev.alloc::<f32>(q.len()) }?;
    let func =
        dev.get_or_load_custom_func("paged_attention_f32", "agentd_attention", ptx::ATTENTION)?;
    let cfg = LaunchConfig {
        grid_dim: (int(s.n_head, "n_head")? as u32, int(s.t, "t")? as u32, 1),
        block_dim: (ATTENTION_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let [t, n_head, n_kv, d, n_blocks, max_blocks] = paged_ints(&s)?;
    let window = int(s.window.unwrap_or(0), "window")?;
    let mut b = func.builder();
    b.arg(&q).arg(&cache).arg(&meta).arg(&out);
    b.arg(&t)
        .arg(&n_head)
        .arg(&n_kv)
        .arg(&d)
        .arg(&n_blocks)
        .arg(&max_blocks);
    b.arg(&window).arg(&s.scale);
    // SAFETY: q and out hold t·n_head·d floats; meta's positions and blocks were checked on the host.
    unsafe { b.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), l1.shape().clone()))
}
