//! The ops on the CPU (their twins) against candle's own ops, which the `Candle` path runs: same function,
//! fresh random inputs, odd sizes, partial rotation, positions past 0, grouped heads, a window, and a paged
//! store with scattered blocks.

use candle_core::{Device, Tensor};

use super::*;
use crate::engine::candle::paged::{PagedLayout, SeqSlice};

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

#[test]
fn kernels_choice_parses_and_refuses_unknown_names() {
    assert_eq!("fused".parse::<Kernels>().unwrap(), Kernels::Fused);
    assert_eq!("candle".parse::<Kernels>().unwrap(), Kernels::Candle);
    let err = "fast".parse::<Kernels>().unwrap_err().to_string();
    assert!(err.contains("fused") && err.contains("candle"), "{err}");
}

/// Two sequences in one paged store (scattered blocks, a block boundary crossed mid-chunk), fed over two steps
/// as one batch each: the fused ops' twins write the same store and attend to the same values as candle's ops
/// over the paged store (`candle::paged`, the path of Metal and `--weights native`).
#[test]
fn fused_paged_attention_matches_candle_ops_over_the_store() {
    let (n_head, n_kv, d, n_blocks) = (4, 2, 16, 12);
    let tables: [&[u32]; 2] = [&[7, 2, 9], &[0, 11]];
    // (position, new tokens) of each sequence at each step.
    let steps = [[(0, 20), (0, 5)], [(20, 1), (5, 13)]];
    for window in [None, Some(6)] {
        let zeros = || {
            Tensor::zeros(
                (2, n_blocks, n_kv, 16, d),
                candle_core::DType::F32,
                &Device::Cpu,
            )
            .unwrap()
        };
        let (fused_cache, candle_cache) = (zeros(), zeros());
        for (s, step) in steps.iter().enumerate() {
            let seqs: Vec<PagedSeq<'_>> = step
                .iter()
                .zip(tables)
                .map(|(&(pos, len), blocks)| PagedSeq { blocks, pos, len })
                .collect();
            let slices: Vec<SeqSlice<'_>> = seqs
                .iter()
                .map(|s| SeqSlice {
                    blocks: s.blocks,
                    pos: s.pos,
                    len: s.len,
                })
                .collect();
            let batch = PagedBatch::new(&seqs, n_blocks, &Device::Cpu).unwrap();
            let layout =
                PagedLayout::new(&slices, n_blocks, n_kv, d, window, &Device::Cpu).unwrap();
            let t = batch.tokens();
            let seed = 1000 * s as u64 + window.unwrap_or(0) as u64;
            let q = random(&[1, t, n_head, d], seed);
            let k = random(&[1, t, n_kv, d], seed + 1);
            let v = random(&[1, t, n_kv, d], seed + 2);
            kv_write(&fused_cache, &k, &v, &batch).unwrap();
            layout.write(&candle_cache, &k, &v).unwrap();
            assert_eq!(rel_err(&fused_cache, &candle_cache), 0.0, "step {s}");
            let fused = paged_attention(&q, &fused_cache, &batch, window, 0.25).unwrap();
            let q_heads = q.transpose(1, 2).unwrap().contiguous().unwrap();
            // Every layer of a windowed model is windowed here.
            let ours = layout
                .attention(&q_heads, &candle_cache, window.is_some(), 0.25)
                .unwrap()
                .reshape((1, t, n_head, d))
                .unwrap();
            let err = rel_err(&fused, &ours);
            assert!(err < 1e-5, "window {window:?}, step {s}: {err}");
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
