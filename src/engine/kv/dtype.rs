//! What the paged KV store keeps its keys and values as (vLLM's `--kv-cache-dtype`): `auto` (the backend's
//! choice: f16 on the CPU engine, as llama.cpp's default cache; f32 on candle's devices, whose kernels read f32),
//! `f32`, `f16`, or `q8_0` (ggml's 32-value blocks of int8 with an f16 scale: 34 bytes per 32 values).

use serde::{Deserialize, Serialize};

/// The element type of a paged KV store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvDtype {
    /// The backend's own choice (see [`KvDtype::resolve`]).
    #[default]
    Auto,
    F32,
    F16,
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// Values per q8_0 block.
pub const Q8_0_VALUES: usize = 32;
/// Bytes per q8_0 block: an f16 scale and 32 int8 values.
pub const Q8_0_BYTES: usize = 2 + Q8_0_VALUES;

impl KvDtype {
    /// The element type a backend stores for `self`: `auto` is f16 on the CPU engine and f32 elsewhere.
    pub fn resolve(self, cpu_engine: bool) -> Self {
        match (self, cpu_engine) {
            (Self::Auto, true) => Self::F16,
            (Self::Auto, false) => Self::F32,
            (other, _) => other,
        }
    }

    /// Bytes one row of `dim` values takes (`None` for `auto`, which has no size until resolved, and for q8_0
    /// rows that are not whole blocks).
    pub fn row_bytes(self, dim: usize) -> Option<usize> {
        match self {
            Self::Auto => None,
            Self::F32 => Some(dim * 4),
            Self::F16 => Some(dim * 2),
            Self::Q8_0 => dim
                .is_multiple_of(Q8_0_VALUES)
                .then_some(dim / Q8_0_VALUES * Q8_0_BYTES),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
        }
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "f32" | "float32" | "float" => Ok(Self::F32),
            "f16" | "float16" | "half" => Ok(Self::F16),
            "q8_0" => Ok(Self::Q8_0),
            other => Err(format!(
                "unknown KV cache dtype {other:?} (expected auto, f16, f32 or q8_0; fp8 and bf16 are not \
                 supported)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for d in [KvDtype::Auto, KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
            assert_eq!(d.name().parse::<KvDtype>(), Ok(d));
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<KvDtype>(&json).unwrap(), d);
        }
        assert_eq!("float16".parse::<KvDtype>(), Ok(KvDtype::F16));
        let err = "fp8".parse::<KvDtype>().unwrap_err();
        assert!(err.contains("fp8") && err.contains("q8_0"), "{err}");
    }

    #[test]
    fn auto_is_f16_on_the_cpu_engine_and_sizes_follow_the_type() {
        assert_eq!(KvDtype::Auto.resolve(true), KvDtype::F16);
        assert_eq!(KvDtype::Auto.resolve(false), KvDtype::F32);
        assert_eq!(KvDtype::Q8_0.resolve(false), KvDtype::Q8_0);
        assert_eq!(KvDtype::F32.row_bytes(64), Some(256));
        assert_eq!(KvDtype::F16.row_bytes(64), Some(128));
        assert_eq!(KvDtype::Q8_0.row_bytes(64), Some(68));
        assert_eq!(KvDtype::Q8_0.row_bytes(80), None);
        assert_eq!(KvDtype::Auto.row_bytes(64), None);
    }
}
