//! The tensors of a synthetic checkpoint: their names, shapes and types (llama.cpp's Q4_K_M mix or Q8_0), what
//! values each holds, and the random but valid quantized blocks written for them.

use std::io::Write;

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, RngCore};

use super::{SynthQuant, SynthSpec};
use crate::engine::arch::Architecture;

/// GGUF type ids of the tensor types written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TType {
    F32,
    Q5_0,
    Q8_0,
    Q4K,
    Q6K,
}

impl TType {
    pub(super) fn id(self) -> u32 {
        match self {
            TType::F32 => 0,
            TType::Q5_0 => 6,
            TType::Q8_0 => 8,
            TType::Q4K => 12,
            TType::Q6K => 14,
        }
    }

    /// (elements per block, bytes per block)
    fn block(self) -> (u64, u64) {
        match self {
            TType::F32 => (1, 4),
            TType::Q5_0 => (32, 22),
            TType::Q8_0 => (32, 34),
            TType::Q4K => (256, 144),
            TType::Q6K => (256, 210),
        }
    }

    pub(super) fn bytes(self, elements: u64) -> u64 {
        let (n, b) = self.block();
        elements / n * b
    }
}

/// One tensor to write: name, dims (`ne0` first: a matrix's row length, then its rows), type, and what kind of
/// values it holds.
pub(super) struct TensorPlan {
    pub(super) name: String,
    pub(super) dims: Vec<u64>,
    pub(super) ttype: TType,
    pub(super) fill: Fill,
}

#[derive(Clone)]
pub(super) enum Fill {
    /// These exact values (F32).
    Values(Vec<f32>),
    /// Random quantized weights within about ±0.05 (the hidden layers).
    Weights,
    /// Random quantized weights within about ±0.5: the embedding and the output head, so that hidden states
    /// follow the input and logits spread out (with ±0.05 the top two logits of a random model are often within
    /// 0.001 of each other, and any two engines disagree on near-ties).
    Wide,
    /// Norm weights: 1 ± 0.1.
    Norm,
    /// Small biases: ±0.02.
    Bias,
}

impl TensorPlan {
    pub(super) fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// llama.cpp's "use more bits" layers of Q4_K_M.
fn more_bits(layer: usize, layers: usize) -> bool {
    // The first clause guards the subtraction.
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

pub(super) fn plan(spec: &SynthSpec, vocab: usize) -> Vec<TensorPlan> {
    let sh = spec.shape;
    let head_dim = sh.head_dim();
    let (q_out, kv_out) = (
        (sh.heads * head_dim) as u64,
        (sh.kv_heads * head_dim) as u64,
    );
    let (hidden, ffn, vocab) = (sh.hidden as u64, sh.ffn as u64, vocab as u64);
    let matrix = |name: String, row: u64, rows: u64, preferred: TType| {
        let ttype = match spec.quant {
            SynthQuant::Q8_0 => TType::Q8_0,
            SynthQuant::Q4KM if row.is_multiple_of(256) => preferred,
            // llama.cpp's fallbacks for rows K-quants cannot block.
            SynthQuant::Q4KM if preferred == TType::Q6K => TType::Q8_0,
            SynthQuant::Q4KM => TType::Q5_0,
        };
        TensorPlan {
            name,
            dims: vec![row, rows],
            ttype,
            fill: Fill::Weights,
        }
    };
    let vector = |name: String, len: u64, fill: Fill| TensorPlan {
        name,
        dims: vec![len],
        ttype: TType::F32,
        fill,
    };
    let wide = |mut t: TensorPlan| {
        t.fill = Fill::Wide;
        t
    };
    let mut out = Vec::new();
    if let Some((factor, original)) = sh.llama3_rope {
        out.push(TensorPlan {
            name: "rope_freqs.weight".into(),
            dims: vec![(head_dim / 2) as u64],
            ttype: TType::F32,
            fill: Fill::Values(llama3_rope_factors(
                sh.rope_theta,
                head_dim,
                factor,
                original,
            )),
        });
    }
    if let Some(original) = sh.longrope {
        let half = sh.rope_dims.unwrap_or(head_dim) / 2;
        let ramp = |top: f32| -> Vec<f32> {
            (0..half)
                .map(|i| 1.0 + (top - 1.0) * i as f32 / (half.max(2) - 1) as f32)
                .collect()
        };
        let long = (sh.context as f32 / original as f32).max(1.0);
        for (name, values) in [
            ("rope_factors_long.weight", ramp(long)),
            ("rope_factors_short.weight", ramp(1.2)),
        ] {
            out.push(vector(name.into(), half as u64, Fill::Values(values)));
        }
    }
    out.push(wide(matrix(
        "token_embd.weight".into(),
        hidden,
        vocab,
        TType::Q4K,
    )));
    for l in 0..sh.layers {
        let p = |t: &str| format!("blk.{l}.{t}");
        let v_type = if more_bits(l, sh.layers) {
            TType::Q6K
        } else {
            TType::Q4K
        };
        out.push(vector(p("attn_norm.weight"), hidden, Fill::Norm));
        if spec.arch == Architecture::Phi3 {
            let qkv = q_out + 2 * kv_out;
            out.push(matrix(p("attn_qkv.weight"), hidden, qkv, v_type));
        } else {
            out.push(matrix(p("attn_q.weight"), hidden, q_out, TType::Q4K));
            out.push(matrix(p("attn_k.weight"), hidden, kv_out, TType::Q4K));
            out.push(matrix(p("attn_v.weight"), hidden, kv_out, v_type));
        }
        if spec.arch == Architecture::Qwen2 {
            out.push(vector(p("attn_q.bias"), q_out, Fill::Bias));
            out.push(vector(p("attn_k.bias"), kv_out, Fill::Bias));
            out.push(vector(p("attn_v.bias"), kv_out, Fill::Bias));
        }
        if matches!(
            spec.arch,
            Architecture::Qwen3 | Architecture::Gemma3 | Architecture::Qwen3Moe
        ) {
            out.push(vector(p("attn_q_norm.weight"), head_dim as u64, Fill::Norm));
            out.push(vector(p("attn_k_norm.weight"), head_dim as u64, Fill::Norm));
        }
        out.push(matrix(p("attn_output.weight"), q_out, hidden, TType::Q4K));
        if spec.arch == Architecture::Gemma3 {
            out.push(vector(p("post_attention_norm.weight"), hidden, Fill::Norm));
        }
        out.push(vector(p("ffn_norm.weight"), hidden, Fill::Norm));
        if let Some((experts, _, ff)) = sh.moe {
            // The router stays f32 (as llama.cpp keeps it); the experts are one 3-D tensor per projection.
            let mut router = matrix(p("ffn_gate_inp.weight"), hidden, experts as u64, TType::Q4K);
            router.ttype = TType::F32;
            router.fill = Fill::Wide;
            out.push(router);
            let ff = ff as u64;
            for (name, row, rows, ty) in [
                ("ffn_gate_exps.weight", hidden, ff, TType::Q4K),
                ("ffn_up_exps.weight", hidden, ff, TType::Q4K),
                ("ffn_down_exps.weight", ff, hidden, v_type),
            ] {
                let mut t = matrix(p(name), row, rows, ty);
                t.dims.push(experts as u64);
                out.push(t);
            }
            // No dense MLP on this layer.
            continue;
        }
        if spec.arch == Architecture::Phi3 {
            out.push(matrix(p("ffn_up.weight"), hidden, 2 * ffn, TType::Q4K));
        } else {
            out.push(matrix(p("ffn_gate.weight"), hidden, ffn, TType::Q4K));
            out.push(matrix(p("ffn_up.weight"), hidden, ffn, TType::Q4K));
        }
        out.push(matrix(p("ffn_down.weight"), ffn, hidden, v_type));
        if spec.arch == Architecture::Gemma3 {
            out.push(vector(p("post_ffw_norm.weight"), hidden, Fill::Norm));
        }
    }
    out.push(vector("output_norm.weight".into(), hidden, Fill::Norm));
    if !sh.tied {
        out.push(wide(matrix(
            "output.weight".into(),
            hidden,
            vocab,
            TType::Q6K,
        )));
    }
    out
}

/// Llama 3.1's frequency divisors (its `rope_scaling`: low 1, high 4), as llama.cpp's converter computes them:
/// high frequencies kept, low ones divided by `factor`, a smooth blend between.
fn llama3_rope_factors(base: f32, head_dim: usize, factor: f32, original: usize) -> Vec<f32> {
    llama3_rope_factors_with(base, head_dim, factor, original, 1.0, 4.0)
}

/// [`llama3_rope_factors`] with the config's `low_freq_factor` and `high_freq_factor`.
pub(crate) fn llama3_rope_factors_with(
    base: f32,
    head_dim: usize,
    factor: f32,
    original: usize,
    low: f32,
    high: f32,
) -> Vec<f32> {
    let original = original as f32;
    let (low_wavelen, high_wavelen) = (original / low, original / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf((2 * i) as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (original / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// Writes `elements` values of `ttype` as random but valid data.
pub(super) fn write_data<W: Write + ?Sized>(
    w: &mut W,
    ttype: TType,
    fill: &Fill,
    elements: u64,
    rng: &mut StdRng,
) -> std::io::Result<()> {
    if let Fill::Values(values) = fill {
        return values
            .iter()
            .try_for_each(|v| w.write_all(&v.to_le_bytes()));
    }
    let (per_block, block_bytes) = ttype.block();
    let blocks = elements / per_block;
    let mut buf = vec![0u8; block_bytes as usize];
    let f16_bytes = |x: f32| f16::from_f32(x).to_le_bytes();
    let scale = match fill {
        Fill::Wide => 0.5,
        _ => 0.05,
    };
    for _ in 0..blocks {
        match ttype {
            TType::F32 => {
                let x: f32 = match fill {
                    Fill::Norm => 1.0 + rng.gen_range(-0.1f32..0.1),
                    Fill::Bias => rng.gen_range(-0.02f32..0.02),
                    Fill::Weights | Fill::Wide | Fill::Values(_) => rng.gen_range(-scale..scale),
                };
                buf.copy_from_slice(&x.to_le_bytes());
            }
            TType::Q8_0 => {
                // d · q, q in -127..=127: |w| ≤ scale.
                buf[..2].copy_from_slice(&f16_bytes(scale / 127.0 * rng.gen_range(0.5..1.0)));
                rng.fill_bytes(&mut buf[2..]);
                for b in &mut buf[2..] {
                    if *b == 0x80 {
                        *b = 0x81; // -128 is outside q8_0's symmetric range
                    }
                }
            }
            TType::Q5_0 => {
                // d · (q − 16), 5-bit q (4 low bits in qs, the high bit in qh).
                buf[..2].copy_from_slice(&f16_bytes(scale / 16.0 * rng.gen_range(0.5..1.0)));
                rng.fill_bytes(&mut buf[2..]);
            }
            TType::Q4K => {
                // d · scale · q − dmin · min, 6-bit scales and mins, 4-bit q.
                let d = scale / (63.0 * 15.0) * rng.gen_range(0.5..1.0);
                buf[..2].copy_from_slice(&f16_bytes(d));
                buf[2..4].copy_from_slice(&f16_bytes(d * 7.5 * rng.gen_range(0.8..1.2)));
                rng.fill_bytes(&mut buf[4..]);
            }
            TType::Q6K => {
                // ql[128], qh[64], scales[16] (i8), d: d · scale · (q − 32).
                rng.fill_bytes(&mut buf[..192]);
                for s in &mut buf[192..208] {
                    *s = rng.gen_range(-32i8..=32) as u8;
                }
                buf[208..]
                    .copy_from_slice(&f16_bytes(scale / (32.0 * 32.0) * rng.gen_range(0.5..1.0)));
            }
        }
        w.write_all(&buf)?;
    }
    Ok(())
}
