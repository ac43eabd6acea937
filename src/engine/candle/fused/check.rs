//! Each kernel against its CPU twin on a device (`agentd bench parity` runs this on CUDA): fresh random
//! inputs at a real model's sizes (Qwen2-7B's hidden width and heads, Gemma's 256-wide heads with a window),
//! the kernel's output copied back and compared with the twin's by max |Δ| / max |twin|.

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use super::twin::BLOCK;
use super::{add_rms_norm, kv_write, paged_attention, rms_norm, rotary, PagedBatch, PagedSeq};
use crate::engine::error::Result;

/// f32 kernels against f32 twins, summing in other orders (and `__expf`): far under this.
pub const TOLERANCE: f32 = 1e-4;

#[derive(Debug, Clone, Serialize)]
pub struct KernelCheck {
    pub name: String,
    pub max_rel_err: f32,
    pub passed: bool,
}

/// Uniform values in [−1, 1) on the CPU, the same for the same seed.
pub(super) fn random(shape: &[usize], seed: u64) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
}

/// max |a − b| / max |b|, both copied to the CPU; a NaN makes it infinite.
pub(super) fn rel_err(a: &Tensor, b: &Tensor) -> Result<f32> {
    let a: Vec<f32> = a.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?;
    let b: Vec<f32> = b.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?;
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
    let worst = a.iter().zip(&b).fold(0f32, |m, (x, y)| {
        let d = (x - y).abs();
        if d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d)
        }
    });
    Ok(worst / scale)
}

fn check(name: &str, device: &Tensor, twin: &Tensor) -> Result<KernelCheck> {
    let max_rel_err = rel_err(device, twin)?;
    Ok(KernelCheck {
        name: name.into(),
        max_rel_err,
        passed: max_rel_err <= TOLERANCE,
    })
}

/// Runs every kernel on `device` and its twin on the CPU over the same inputs.
pub fn against_twins(device: &Device) -> Result<Vec<KernelCheck>> {
    let on = |t: &Tensor| t.to_device(device);
    let mut out = Vec::new();

    let (x, r, w) = (
        random(&[64, 3584], 1)?,
        random(&[64, 3584], 2)?,
        random(&[3584], 3)?,
    );
    let twin = rms_norm(&x, &w, 1e-6)?;
    out.push(check(
        "rms_norm 64×3584",
        &rms_norm(&on(&x)?, &on(&w)?, 1e-6)?,
        &twin,
    )?);
    let (ts, tn) = add_rms_norm(&x, &r, &w, 1e-6)?;
    let (ds, dn) = add_rms_norm(&on(&x)?, &on(&r)?, &on(&w)?, 1e-6)?;
    out.push(check("add_rms_norm 64×3584 (sum)", &ds, &ts)?);
    out.push(check("add_rms_norm 64×3584 (norm)", &dn, &tn)?);
    let (qk, qw) = (random(&[1, 64, 28, 128], 4)?, random(&[128], 5)?);
    let twin = rms_norm(&qk, &qw, 1e-6)?;
    out.push(check(
        "rms_norm per head 64×28×128",
        &rms_norm(&on(&qk)?, &on(&qw)?, 1e-6)?,
        &twin,
    )?);

    let positions = 1024;
    for (rot, interleaved) in [(128, false), (64, true)] {
        let half = rot / 2;
        let angles: Vec<f32> = (0..positions * half)
            .map(|i| (i / half) as f32 * 10_000f32.powf(-2.0 * (i % half) as f32 / rot as f32))
            .collect();
        let cos = Tensor::from_vec(
            angles.iter().map(|a| a.cos()).collect::<Vec<_>>(),
            (positions, half),
            &Device::Cpu,
        )?;
        let sin = Tensor::from_vec(
            angles.iter().map(|a| a.sin()).collect::<Vec<_>>(),
            (positions, half),
            &Device::Cpu,
        )?;
        let twin = rotary(&qk, &cos, &sin, 700, interleaved)?;
        let dev = rotary(&on(&qk)?, &on(&cos)?, &on(&sin)?, 700, interleaved)?;
        let style = if interleaved { "interleaved" } else { "neox" };
        out.push(check(
            &format!("rotary {style}, {rot} of 128 dims at 700"),
            &dev,
            &twin,
        )?);
    }

    // Qwen2-7B's heads: a 64-token prefill at 0 then a decode step at 700; Gemma's 256-wide heads in a window.
    // One sequence over scattered blocks of a paged store, written and read by the kernels and by the twins.
    for (n_head, n_kv, d, window, steps) in [
        (28, 4, 128, None, [(0, 64), (64, 636), (700, 1)]),
        (8, 4, 256, Some(512), [(0, 300), (300, 400), (700, 1)]),
    ] {
        let n_blocks = 701usize.div_ceil(BLOCK) + 3;
        // Block i of the sequence is store block (i · 5) mod n_blocks: scattered, never repeated (gcd 1).
        let table: Vec<u32> = (0..n_blocks - 3)
            .map(|i| ((i * 5) % n_blocks) as u32)
            .collect();
        let twin_cache = Tensor::zeros((2, n_blocks, n_kv, BLOCK, d), DType::F32, &Device::Cpu)?;
        let dev_cache = Tensor::zeros((2, n_blocks, n_kv, BLOCK, d), DType::F32, device)?;
        for (s, &(pos, t)) in steps.iter().enumerate() {
            let seed = 10 * s as u64 + d as u64;
            let q = random(&[1, t, n_head, d], seed)?;
            let k = random(&[1, t, n_kv, d], seed + 1)?;
            let v = random(&[1, t, n_kv, d], seed + 2)?;
            let scale = 1.0 / (d as f32).sqrt();
            let seqs = [PagedSeq {
                blocks: &table,
                pos,
                len: t,
            }];
            let twin_batch = PagedBatch::new(&seqs, n_blocks, &Device::Cpu)?;
            let dev_batch = PagedBatch::new(&seqs, n_blocks, device)?;
            kv_write(&twin_cache, &k, &v, &twin_batch)?;
            kv_write(&dev_cache, &on(&k)?, &on(&v)?, &dev_batch)?;
            let twin = paged_attention(&q, &twin_cache, &twin_batch, window, scale)?;
            let dev = paged_attention(&on(&q)?, &dev_cache, &dev_batch, window, scale)?;
            let label = format!(
                "paged attention {n_head}/{n_kv} heads of {d}, {t} queries at {pos}{}",
                window.map_or(String::new(), |w| format!(", window {w}"))
            );
            out.push(check(&label, &dev, &twin)?);
        }
    }
    Ok(out)
}
