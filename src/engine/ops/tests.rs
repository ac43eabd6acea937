//! The ops on the CPU (their twins) against candle's own ops, which the `Candle` path runs: same function,
//! fresh random inputs, odd sizes, partial rotation, positions past 0, grouped heads, a window, and KV views
//! with a capacity larger than what is live.

use candle_core::{Device, Tensor};

use super::*;
use crate::engine::kv::LayerKv;

fn random(shape: &[usize], seed: u64) -> Tensor {
    check::random(shape, seed).unwrap()
}

/// max |a − b| over max |b| (infinite on a NaN).
fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    check::rel_err(a, b).unwrap()
}

#[test]
fn rms_norm_matches_candle() {
    let (x, w) = (random(&[5, 37], 1), random(&[37], 2));
    let ours = rms_norm(&x, &w, 1e-5).unwrap();
    let theirs = candle_nn::ops::rms_norm(&x, &w, 1e-5).unwrap();
    assert!(rel_err(&ours, &theirs) < 1e-6);
}

#[test]
fn add_rms_norm_returns_the_sum_and_its_norm() {
    let (x, r, w) = (
        random(&[1, 3, 70], 3),
        random(&[1, 3, 70], 4),
        random(&[70], 5),
    );
    let (sum, normed) = add_rms_norm(&x, &r, &w, 1e-6).unwrap();
    let want = (&x + &r).unwrap();
    assert_eq!(rel_err(&sum, &want), 0.0);
    let theirs = candle_nn::ops::rms_norm(&want, &w, 1e-6).unwrap();
    assert!(rel_err(&normed, &theirs) < 1e-6);
    assert!(add_rms_norm(&x, &random(&[1, 2, 70], 6), &w, 1e-6).is_err());
}

/// candle's rope (as the `Candle` path applies it: `[b, heads, t, d]`, the unrotated tail passed through).
fn candle_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Tensor {
    let x = x.transpose(1, 2).unwrap().contiguous().unwrap();
    let d = x.dim(3).unwrap();
    let rot = 2 * cos.dim(1).unwrap();
    let head = x.narrow(3, 0, rot).unwrap().contiguous().unwrap();
    let head = match interleaved {
        true => candle_nn::rotary_emb::rope_i(&head, cos, sin).unwrap(),
        false => candle_nn::rotary_emb::rope(&head, cos, sin).unwrap(),
    };
    let y = Tensor::cat(&[&head, &x.narrow(3, rot, d - rot).unwrap()], 3).unwrap();
    y.transpose(1, 2).unwrap().contiguous().unwrap()
}

#[test]
fn rotary_matches_candle_in_both_styles_and_partial() {
    let (t, heads, d, positions) = (3, 4, 16, 20);
    for (rot, interleaved) in [(16, false), (16, true), (12, false), (8, true)] {
        let half = rot / 2;
        // Real tables: cos² + sin² = 1 at each position.
        let angles: Vec<f32> = (0..positions * half)
            .map(|i| (i / half) as f32 * 0.3f32.powi((i % half) as i32 + 1))
            .collect();
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let cos = Tensor::from_vec(cos, (positions, half), &Device::Cpu).unwrap();
        let sin = Tensor::from_vec(sin, (positions, half), &Device::Cpu).unwrap();
        let x = random(&[1, t, heads, d], rot as u64);
        let pos = 5;
        let ours = rotary(&x, &cos, &sin, pos, interleaved).unwrap();
        let theirs = candle_rotary(
            &x,
            &cos.narrow(0, pos, t).unwrap(),
            &sin.narrow(0, pos, t).unwrap(),
            interleaved,
        );
        assert!(
            rel_err(&ours, &theirs) < 1e-6,
            "rot {rot}, interleaved {interleaved}"
        );
        assert!(rotary(&x, &cos, &sin, positions - 1, interleaved).is_err());
    }
}

/// Reference attention: matmul, additive mask, softmax, matmul, on `[b, heads, t, d]` with K/V repeated.
fn candle_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: usize,
    window: Option<usize>,
    scale: f64,
) -> Tensor {
    let (_, t, n_head, _) = q.dims4().unwrap();
    let n_kv = k.dim(1).unwrap();
    let rep = n_head / n_kv;
    let repeat = |x: &Tensor| {
        let (b, h, l, d) = x.dims4().unwrap();
        x.unsqueeze(2)
            .unwrap()
            .broadcast_as((b, h, rep, l, d))
            .unwrap()
            .reshape((b, h * rep, l, d))
            .unwrap()
    };
    let (k, v) = (
        repeat(&k.contiguous().unwrap()),
        repeat(&v.contiguous().unwrap()),
    );
    let q = q.transpose(1, 2).unwrap().contiguous().unwrap();
    // The mask candle's path adds (engine::model::causal_mask).
    let mask = crate::engine::model::causal_mask(t, pos, window, &Device::Cpu).unwrap();
    let att = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
    let att = att.broadcast_add(&mask).unwrap();
    let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
    let y = att.matmul(&v).unwrap();
    y.transpose(1, 2).unwrap().contiguous().unwrap()
}

#[test]
fn attention_over_the_kv_buffers_matches_candle() {
    let (n_head, n_kv, d) = (6, 2, 32);
    for (window, chunks) in [
        (None, [7, 1, 3]),
        (Some(4), [5, 1, 4]),
        (Some(1), [2, 1, 1]),
    ] {
        let mut kv = LayerKv::default();
        let mut pos = 0;
        for (c, t) in chunks.into_iter().enumerate() {
            let seed = 100 * c as u64;
            let q = random(&[1, t, n_head, d], seed);
            let k = random(&[1, n_kv, t, d], seed + 1);
            let v = random(&[1, n_kv, t, d], seed + 2);
            // The views have the buffers' capacity as stride, larger than what is live.
            let (kc, vc) = kv.append(&k, &v, pos).unwrap();
            assert!(!kc.is_contiguous());
            let scale = 1.0 / (d as f64).sqrt();
            let ours = attention(&q, &kc, &vc, pos, window, scale as f32).unwrap();
            let theirs = candle_attention(&q, &kc, &vc, pos, window, scale);
            let err = rel_err(&ours, &theirs);
            assert!(err < 1e-5, "window {window:?}, chunk {c}: {err}");
            pos += t;
        }
    }
}

#[test]
fn attention_rejects_mismatched_shapes() {
    let q = random(&[1, 2, 4, 8], 1);
    let k = random(&[1, 2, 5, 8], 2);
    // Five keys for two queries at position 2 would need four.
    assert!(attention(&q, &k, &k, 2, None, 0.3).is_err());
    // Four query heads over three KV heads do not group.
    let k3 = random(&[1, 3, 4, 8], 3);
    assert!(attention(&q, &k3, &k3, 2, None, 0.3).is_err());
}

#[test]
fn kernels_choice_parses_and_refuses_unknown_names() {
    assert_eq!("fused".parse::<Kernels>().unwrap(), Kernels::Fused);
    assert_eq!("candle".parse::<Kernels>().unwrap(), Kernels::Candle);
    let err = "fast".parse::<Kernels>().unwrap_err().to_string();
    assert!(err.contains("fused") && err.contains("candle"), "{err}");
}

/// Two sequences in one paged store (scattered blocks, a block boundary crossed mid-chunk), fed over two steps
/// as one batch each: the paged attention equals the per-sequence attention over their own buffers.
#[test]
fn paged_attention_matches_attention_over_own_buffers() {
    let (n_head, n_kv, d, n_blocks) = (4, 2, 16, 12);
    let tables: [&[u32]; 2] = [&[7, 2, 9], &[0, 11]];
    // (position, new tokens) of each sequence at each step.
    let steps = [[(0, 20), (0, 5)], [(20, 1), (5, 13)]];
    for window in [None, Some(6)] {
        let cache = Tensor::zeros(
            (2, n_blocks, n_kv, 16, d),
            candle_core::DType::F32,
            &Device::Cpu,
        )
        .unwrap();
        let mut own = [LayerKv::default(), LayerKv::default()];
        for (s, step) in steps.iter().enumerate() {
            let seqs: Vec<PagedSeq<'_>> = step
                .iter()
                .zip(tables)
                .map(|(&(pos, len), blocks)| PagedSeq { blocks, pos, len })
                .collect();
            let batch = PagedBatch::new(&seqs, n_blocks, &Device::Cpu).unwrap();
            let t = batch.tokens();
            let seed = 1000 * s as u64 + window.unwrap_or(0) as u64;
            let q = random(&[1, t, n_head, d], seed);
            let k = random(&[1, t, n_kv, d], seed + 1);
            let v = random(&[1, t, n_kv, d], seed + 2);
            kv_write(&cache, &k, &v, &batch).unwrap();
            let paged = paged_attention(&q, &cache, &batch, window, 0.25).unwrap();
            let mut start = 0;
            for (i, &(pos, len)) in step.iter().enumerate() {
                let part = |x: &Tensor| x.narrow(1, start, len).unwrap();
                let (kc, vc) = own[i]
                    .append(
                        &part(&k).transpose(1, 2).unwrap(),
                        &part(&v).transpose(1, 2).unwrap(),
                        pos,
                    )
                    .unwrap();
                let want = attention(&part(&q), &kc, &vc, pos, window, 0.25).unwrap();
                let err = rel_err(&part(&paged), &want);
                assert!(
                    err < 1e-6,
                    "window {window:?}, step {s}, sequence {i}: {err}"
                );
                start += len;
            }
        }
    }
}

#[test]
fn paged_batch_refuses_positions_outside_its_blocks() {
    let two = [3u32, 4];
    // 33 positions need three blocks of 16.
    let seqs = [PagedSeq {
        blocks: &two,
        pos: 30,
        len: 3,
    }];
    assert!(PagedBatch::new(&seqs, 8, &Device::Cpu).is_err());
    // Block 9 is not in a store of 8.
    let far = [3u32, 9];
    let seqs = [PagedSeq {
        blocks: &far,
        pos: 0,
        len: 20,
    }];
    assert!(PagedBatch::new(&seqs, 8, &Device::Cpu).is_err());
    let seqs = [PagedSeq {
        blocks: &two,
        pos: 0,
        len: 32,
    }];
    assert!(PagedBatch::new(&seqs, 8, &Device::Cpu).is_ok());
}
