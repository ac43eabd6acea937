//! The sizes a synthetic checkpoint comes in, per architecture: real models' shapes, from their configs.

use super::SynthShape;
use crate::engine::arch::Architecture;

/// The sizes [`SynthSpec::parse`] knows, per architecture: `(name, shape)`. Real shapes from the models' configs
/// (the vocabulary comes from the tokenizer given).
pub(super) fn presets(arch: Architecture) -> Vec<(&'static str, SynthShape)> {
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
