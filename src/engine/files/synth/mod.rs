//! Synthetic checkpoints (vLLM's `--load-format dummy`, as GGUF files): a model of a supported architecture's
//! (llama and Mistral, qwen2, qwen3, gemma3, phi3) real shape — tensor names, metadata keys, the Q4_K_M quant mix — filled with seeded random weights, and the
//! tokenizer (every `tokenizer.*` key, chat template included) of a real model we have. No download: tiny files
//! (a few MB) for correctness checks that compare engines on the same weights, real-size files for measuring
//! speed and memory at sizes we cannot fetch.
//!
//! Weights are written block by block as valid quantized blocks (random quants, scales chosen so weights stay
//! within about ±0.05), streamed to the file: a 7B file needs no more memory than a block. The writer is GGUF v3
//! with 32-byte alignment, as llama.cpp writes it.
//!
//! Q4_K_M's mix, as llama.cpp makes it: `output.weight` Q6_K; `attn_v` and `ffn_down` Q6_K in the first and last
//! eighth of the layers and every third layer between, Q4_K elsewhere; every other matrix Q4_K; norms and biases
//! F32. A matrix whose rows are not a multiple of 256 (K-quants' block) falls back as llama.cpp's does: Q4_K to
//! Q5_0, Q6_K to Q8_0.

use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::engine::arch::Architecture;
use crate::engine::error::{EngineError, Result};
use crate::engine::files::gguf_write::{self, TensorEntry};
use crate::engine::gguf::GgufFile;

/// How the matrices are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthQuant {
    /// llama.cpp's Q4_K_M mix (see the module docs).
    Q4KM,
    /// Every matrix Q8_0.
    Q8_0,
}

/// The shape of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthShape {
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub context: usize,
    pub rope_theta: f32,
    /// The output head is the embedding (`tie_word_embeddings`): no `output.weight`.
    pub tied: bool,
    /// The width of a head when it is not `hidden / heads` (Qwen3's 128).
    pub head_dim: Option<usize>,
    /// Llama 3.1+'s rope scaling (factor, original context), written as `rope_freqs.weight` as llama.cpp's
    /// converter does.
    pub llama3_rope: Option<(f32, usize)>,
    /// Rotated dimensions per head when not all (Phi-4-mini's 3/4).
    pub rope_dims: Option<usize>,
    /// Sliding window size and (Gemma 3) the layer period: every `n`-th layer global.
    pub sliding_window: Option<(usize, Option<u32>)>,
    /// Linear rope scaling factor of the global layers (Gemma 3 4B+: 8).
    pub rope_scale_linear: Option<f32>,
    /// Phi-3's LongRoPE: the original context (long and short factors are written).
    pub longrope: Option<usize>,
    /// Mixture of experts: (experts, experts used per token, each expert's hidden width).
    pub moe: Option<(usize, usize, usize)>,
}

impl SynthShape {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden / self.heads.max(1))
    }
}

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub arch: Architecture,
    /// The size's name (`tiny`, `0.5b`, `7b`, …), for file names and reports.
    pub size: String,
    pub shape: SynthShape,
    pub quant: SynthQuant,
    pub seed: u64,
}

/// The sizes [`SynthSpec::parse`] knows, per architecture: `(name, shape)`. Real shapes from the models' configs
/// (the vocabulary comes from the tokenizer given).
fn presets(arch: Architecture) -> Vec<(&'static str, SynthShape)> {
    let s = |layers, hidden, ffn, heads, kv_heads, context, rope_theta, tied| SynthShape {
        layers,
        hidden,
        ffn,
        heads,
        kv_heads,
        context,
        rope_theta,
        tied,
        head_dim: None,
        llama3_rope: None,
        rope_dims: None,
        sliding_window: None,
        rope_scale_linear: None,
        longrope: None,
        moe: None,
    };
    let llama3 = |shape: SynthShape, factor: f32| SynthShape {
        llama3_rope: Some((factor, 8192)),
        ..shape
    };
    let with_heads = |shape: SynthShape, d: usize| SynthShape {
        head_dim: Some(d),
        ..shape
    };
    let tiny = s(2, 256, 512, 4, 2, 2048, 10_000.0, false);
    match arch {
        Architecture::Qwen2 => vec![
            ("tiny", tiny),
            // Qwen2.5's GGUFs carry `output.weight` even where the config ties it.
            ("0.5b", s(24, 896, 4864, 14, 2, 32768, 1_000_000.0, false)),
            ("1.5b", s(28, 1536, 8960, 12, 2, 32768, 1_000_000.0, false)),
            ("7b", s(28, 3584, 18944, 28, 4, 32768, 1_000_000.0, false)),
        ],
        Architecture::Qwen3 => vec![
            // 4 heads of 128 over a 256-wide model: q is wider than the hidden state, as in Qwen3.
            ("tiny", with_heads(tiny, 128)),
            (
                "0.6b",
                with_heads(s(28, 1024, 3072, 16, 8, 40960, 1_000_000.0, true), 128),
            ),
            (
                "8b",
                with_heads(s(36, 4096, 12288, 32, 8, 40960, 1_000_000.0, false), 128),
            ),
        ],
        Architecture::Gemma3 => {
            let gemma =
                |shape: SynthShape, d: usize, window: usize, scale: Option<f32>| SynthShape {
                    head_dim: Some(d),
                    sliding_window: Some((window, Some(6))),
                    rope_scale_linear: scale,
                    ..shape
                };
            vec![
                // Two layers with period 2 (one windowed, one global), a window of 8 so a short sequence
                // crosses it, and 4B's linear scaling on the global layer.
                (
                    "tiny",
                    SynthShape {
                        sliding_window: Some((8, Some(2))),
                        ..gemma(
                            SynthShape {
                                tied: true,
                                rope_theta: 1_000_000.0,
                                ..tiny
                            },
                            128,
                            8,
                            Some(8.0),
                        )
                    },
                ),
                (
                    "1b",
                    gemma(
                        s(26, 1152, 6912, 4, 1, 32768, 1_000_000.0, true),
                        256,
                        512,
                        None,
                    ),
                ),
                (
                    "4b",
                    gemma(
                        s(34, 2560, 10240, 8, 4, 131072, 1_000_000.0, true),
                        256,
                        1024,
                        Some(8.0),
                    ),
                ),
            ]
        }
        Architecture::Qwen3Moe => vec![
            // 8 experts, 2 per token, 256 wide.
            (
                "tiny",
                SynthShape {
                    moe: Some((8, 2, 256)),
                    ..with_heads(tiny, 128)
                },
            ),
            // Qwen3-30B-A3B.
            (
                "30b-a3b",
                SynthShape {
                    moe: Some((128, 8, 768)),
                    ..with_heads(s(48, 2048, 6144, 32, 4, 40960, 1_000_000.0, false), 128)
                },
            ),
        ],
        Architecture::Phi3 => vec![
            // 64-wide heads with 48 rotated, LongRoPE whose original context (128) is below the file's.
            (
                "tiny",
                SynthShape {
                    rope_dims: Some(48),
                    longrope: Some(128),
                    ..tiny
                },
            ),
            ("mini", s(32, 3072, 8192, 32, 32, 4096, 10_000.0, false)),
            (
                "4-mini",
                SynthShape {
                    head_dim: Some(128),
                    rope_dims: Some(96),
                    longrope: Some(4096),
                    ..s(32, 3072, 8192, 24, 8, 131072, 10_000.0, true)
                },
            ),
        ],
        Architecture::Llama => vec![
            ("tiny", tiny),
            // Mistral's layout is llama's; v0.1 set a 4096 sliding window.
            (
                "mistral-tiny",
                SynthShape {
                    rope_theta: 1_000_000.0,
                    context: 32768,
                    sliding_window: Some((4096, None)),
                    ..tiny
                },
            ),
            (
                "mistral-7b",
                s(32, 4096, 14336, 32, 8, 32768, 1_000_000.0, false),
            ),
            // Llama 3's rope (base 500k, scaled frequencies) on the tiny shape.
            (
                "tiny3",
                llama3(
                    SynthShape {
                        rope_theta: 500_000.0,
                        ..tiny
                    },
                    8.0,
                ),
            ),
            ("135m", s(30, 576, 1536, 9, 3, 8192, 100_000.0, true)),
            (
                "1b",
                llama3(s(16, 2048, 8192, 32, 8, 131072, 500_000.0, true), 32.0),
            ),
            (
                "8b",
                llama3(s(32, 4096, 14336, 32, 8, 131072, 500_000.0, false), 8.0),
            ),
        ],
    }
}

impl SynthSpec {
    /// `ARCH:SIZE` (`qwen2:0.5b`, `llama:8b`, `qwen2:tiny`, …) with the Q4_K_M mix and seed 0.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |message: String| EngineError::Synth(message);
        let (arch, size) = spec
            .trim()
            .split_once(':')
            .ok_or_else(|| bad(format!("`{spec}` is not ARCH:SIZE (e.g. qwen2:0.5b)")))?;
        let arch = match arch.to_ascii_lowercase().as_str() {
            "qwen2.5" => Architecture::Qwen2,
            name => Architecture::from_name(name).map_err(|_| {
                bad(format!(
                    "no synthetic `{name}` architecture (known: {})",
                    Architecture::SUPPORTED.join(", ")
                ))
            })?,
        };
        let size = size.to_ascii_lowercase();
        let known = presets(arch);
        let shape = known
            .iter()
            .find(|(name, _)| *name == size)
            .map(|(_, shape)| *shape)
            .ok_or_else(|| {
                let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
                bad(format!(
                    "no size `{size}` for {} (known: {})",
                    arch.name(),
                    names.join(", ")
                ))
            })?;
        Ok(Self {
            arch,
            size,
            shape,
            quant: SynthQuant::Q4KM,
            seed: 0,
        })
    }

    /// A file name naming everything that makes the file (`qwen2-0.5b-q4_k_m-s0-v151936.gguf`).
    pub fn file_name(&self, vocab: usize) -> String {
        let quant = match self.quant {
            SynthQuant::Q4KM => "q4_k_m",
            SynthQuant::Q8_0 => "q8_0",
        };
        format!(
            "{}-{}-{quant}-s{}-v{vocab}.gguf",
            self.arch.name(),
            self.size,
            self.seed
        )
    }
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synthesized {
    pub path: PathBuf,
    pub bytes: u64,
    pub parameters: u64,
    pub tensors: usize,
    pub vocab: usize,
}

/// GGUF type ids of the tensor types written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TType {
    F32,
    Q5_0,
    Q8_0,
    Q4K,
    Q6K,
}

impl TType {
    fn id(self) -> u32 {
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

    fn bytes(self, elements: u64) -> u64 {
        let (n, b) = self.block();
        elements / n * b
    }
}

/// One tensor to write: name, dims (`ne0` first: a matrix's row length, then its rows), type, and what kind of
/// values it holds.
struct TensorPlan {
    name: String,
    dims: Vec<u64>,
    ttype: TType,
    fill: Fill,
}

#[derive(Clone)]
enum Fill {
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
    fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// llama.cpp's "use more bits" layers of Q4_K_M.
fn more_bits(layer: usize, layers: usize) -> bool {
    // The first clause guards the subtraction.
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

fn plan(spec: &SynthSpec, vocab: usize) -> Vec<TensorPlan> {
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
fn write_data<W: Write + ?Sized>(
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

/// Writes the synthetic checkpoint `spec` to `out` with the tokenizer of `tokenizer_from`.
/// Every `tokenizer.*` key of `source` (vocabulary, merges, special tokens, chat template), sorted by name.
fn tokenizer_keys(source: &GgufFile) -> Vec<(String, Value)> {
    let mut keys: Vec<(String, Value)> = source
        .content
        .metadata
        .iter()
        .filter(|(key, _)| key.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys
}

/// Writes a GGUF holding only `source`'s tokenizer and chat template (no tensors): a few MB that can stand in
/// for the model as `--tokenizer-from` where the model itself cannot travel. Returns the file's size.
pub fn write_vocabulary(source: &GgufFile, out: &Path) -> Result<u64> {
    let keys = tokenizer_keys(source);
    if !keys.iter().any(|(k, _)| k == "tokenizer.ggml.tokens") {
        return Err(EngineError::MissingMetadata {
            key: "tokenizer.ggml.tokens".into(),
        });
    }
    let mut metadata = vec![(
        "general.name".to_string(),
        Value::String("tokenizer only".into()),
    )];
    metadata.extend(keys);
    gguf_write::write(out, &metadata, &[], |_, _| Ok(()))
}

pub fn write(spec: &SynthSpec, tokenizer_from: &GgufFile, out: &Path) -> Result<Synthesized> {
    let tokens = tokenizer_from.get_array("tokenizer.ggml.tokens")?.len();
    if tokens == 0 {
        return Err(EngineError::Synth(format!(
            "{} has an empty tokenizer",
            tokenizer_from.path.display()
        )));
    }
    let sh = spec.shape;
    if sh.heads == 0
        || sh.kv_heads == 0
        || (sh.head_dim.is_none() && !sh.hidden.is_multiple_of(sh.heads))
        || !sh.heads.is_multiple_of(sh.kv_heads)
    {
        return Err(EngineError::Synth(format!(
            "inconsistent shape: {} heads, {} KV heads, width {}",
            sh.heads, sh.kv_heads, sh.hidden
        )));
    }
    let arch = spec.arch.name();
    let k = |key: &str| format!("{arch}.{key}");
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (
            "general.name".into(),
            // Not the architecture's name: llama.cpp keys per-model token attributes on names like "phi3".
            Value::String(format!("synthetic {} (random weights)", spec.size)),
        ),
        (
            "general.file_type".into(),
            Value::U32(match spec.quant {
                SynthQuant::Q4KM => 15,
                SynthQuant::Q8_0 => 7,
            }),
        ),
        (
            "general.alignment".into(),
            Value::U32(gguf_write::ALIGNMENT as u32),
        ),
        (k("context_length"), Value::U32(sh.context as u32)),
        (k("embedding_length"), Value::U32(sh.hidden as u32)),
        (k("block_count"), Value::U32(sh.layers as u32)),
        (k("feed_forward_length"), Value::U32(sh.ffn as u32)),
        (k("attention.head_count"), Value::U32(sh.heads as u32)),
        (k("attention.head_count_kv"), Value::U32(sh.kv_heads as u32)),
        (k("rope.freq_base"), Value::F32(sh.rope_theta)),
        (
            k("rope.dimension_count"),
            Value::U32(sh.rope_dims.unwrap_or(sh.head_dim()) as u32),
        ),
        (k("attention.key_length"), Value::U32(sh.head_dim() as u32)),
        (
            k("attention.value_length"),
            Value::U32(sh.head_dim() as u32),
        ),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("vocab_size"), Value::U32(tokens as u32)),
    ];
    if let Some((experts, used, ff)) = sh.moe {
        metadata.push((k("expert_count"), Value::U32(experts as u32)));
        metadata.push((k("expert_used_count"), Value::U32(used as u32)));
        metadata.push((k("expert_feed_forward_length"), Value::U32(ff as u32)));
    }
    if let Some((window, pattern)) = sh.sliding_window {
        metadata.push((k("attention.sliding_window"), Value::U32(window as u32)));
        if let Some(n) = pattern {
            metadata.push((k("attention.sliding_window_pattern"), Value::U32(n)));
            metadata.push((k("rope.freq_base_swa"), Value::F32(10_000.0)));
        }
    }
    if let Some(factor) = sh.rope_scale_linear {
        metadata.push((k("rope.scaling.type"), Value::String("linear".into())));
        metadata.push((k("rope.scaling.factor"), Value::F32(factor)));
    }
    if let Some(original) = sh.longrope {
        // llama.cpp's converter: attn_factor = sqrt(1 + ln(scale) / ln(original)).
        let scale = sh.context as f32 / original as f32;
        let attn = (1.0 + scale.ln() / (original as f32).ln()).sqrt();
        metadata.push((
            k("rope.scaling.original_context_length"),
            Value::U32(original as u32),
        ));
        metadata.push((k("rope.scaling.attn_factor"), Value::F32(attn)));
    }
    metadata.extend(tokenizer_keys(tokenizer_from));

    let tensors = plan(spec, tokens);
    let entries: Vec<TensorEntry> = tensors
        .iter()
        .map(|t| TensorEntry {
            name: t.name.clone(),
            dims: t.dims.clone(),
            type_id: t.ttype.id(),
            bytes: t.ttype.bytes(t.elements()),
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let bytes = gguf_write::write(out, &metadata, &entries, |i, w| {
        let t = &tensors[i];
        write_data(w, t.ttype, &t.fill, t.elements(), &mut rng)
    })?;
    Ok(Synthesized {
        path: out.to_path_buf(),
        bytes,
        parameters: tensors.iter().map(TensorPlan::elements).sum(),
        tensors: tensors.len(),
        vocab: tokens,
    })
}

#[cfg(test)]
mod tests;
