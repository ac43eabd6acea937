//! How an encoder's hidden states become one vector: the pooling (mean, first token, last token, max) and
//! whether the vector is normalised, as a sentence-transformers folder says (`modules.json`, then the pooling
//! module's `config.json`); a folder without them pools by mean and does not normalise, as
//! sentence-transformers does for a plain Hugging Face model.

use std::path::Path;

use candle_core::{DType, Tensor, D};
use serde_json::Value;

use crate::engine::error::{EngineError, Result};

/// Which tokens' hidden states make the vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean over the sequence's tokens (padding excluded).
    Mean,
    /// The first token (BERT's `[CLS]`).
    Cls,
    /// The last token of the sequence (not padding).
    Last,
    /// The element-wise maximum over the sequence's tokens.
    Max,
}

impl std::str::FromStr for Pooling {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            "max" => Ok(Pooling::Max),
            other => Err(format!(
                "unknown pooling `{other}` (mean, cls, last or max)"
            )),
        }
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Max => "max",
        })
    }
}

/// The pooling and normalisation a folder asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolingConfig {
    pub pooling: Pooling,
    pub normalize: bool,
}

impl PoolingConfig {
    /// Reads `modules.json` and the pooling module's `config.json` of `folder`.
    pub fn read(folder: &Path) -> Result<PoolingConfig> {
        let bad = |message: String| EngineError::InvalidModelFolder {
            path: folder.to_path_buf(),
            message,
        };
        let Ok(text) = std::fs::read_to_string(folder.join("modules.json")) else {
            return Ok(PoolingConfig {
                pooling: Pooling::Mean,
                normalize: false,
            });
        };
        let modules: Vec<Value> =
            serde_json::from_str(&text).map_err(|e| bad(format!("modules.json: {e}")))?;
        let kind = |m: &Value| m["type"].as_str().unwrap_or_default().to_string();
        let normalize = modules.iter().any(|m| kind(m).ends_with(".Normalize"));
        let Some(module) = modules.iter().find(|m| kind(m).ends_with(".Pooling")) else {
            return Ok(PoolingConfig {
                pooling: Pooling::Mean,
                normalize,
            });
        };
        let path = folder
            .join(module["path"].as_str().unwrap_or_default())
            .join("config.json");
        let config: Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| bad(format!("cannot read the pooling config {}", path.display())))?;
        let on = |key: &str| config[key].as_bool() == Some(true);
        let modes: Vec<Pooling> = [
            ("pooling_mode_mean_tokens", Pooling::Mean),
            ("pooling_mode_cls_token", Pooling::Cls),
            ("pooling_mode_lasttoken", Pooling::Last),
            ("pooling_mode_max_tokens", Pooling::Max),
        ]
        .into_iter()
        .filter(|(key, _)| on(key))
        .map(|(_, p)| p)
        .collect();
        if on("pooling_mode_mean_sqrt_len_tokens") || on("pooling_mode_weightedmean_tokens") {
            return Err(bad("this pooling mode is not supported".into()));
        }
        match modes.as_slice() {
            [one] => Ok(PoolingConfig {
                pooling: *one,
                normalize,
            }),
            [] => Err(bad(format!("{} names no pooling mode", path.display()))),
            _ => Err(bad("several pooling modes at once are not supported".into())),
        }
    }
}

/// Pools `hidden` (`[batch, tokens, width]`, f32) over each row's first `lengths[i]` tokens into
/// `[batch, width]`, normalised when asked.
pub fn pool(
    hidden: &Tensor,
    mask: &Tensor,
    lengths: &[usize],
    config: PoolingConfig,
) -> Result<Tensor> {
    let pooled = match config.pooling {
        Pooling::Mean => {
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sum = hidden.broadcast_mul(&mask)?.sum(1)?;
            let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            sum.broadcast_div(&count)?
        }
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        Pooling::Last => {
            let rows = lengths
                .iter()
                .enumerate()
                .map(|(i, &n)| hidden.get(i)?.get(n.saturating_sub(1)))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Tensor::stack(&rows, 0)?
        }
        Pooling::Max => {
            // Padding gets a large negative value so it never wins.
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let penalty = ((mask.ones_like()? - &mask)? * -1e9f64)?;
            hidden.broadcast_add(&penalty)?.max(1)?
        }
    };
    if !config.normalize {
        return Ok(pooled);
    }
    let norm = pooled
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    Ok(pooled.broadcast_div(&norm)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn hidden() -> (Tensor, Tensor) {
        // Two rows of three tokens of width 2; the second row has one token of padding.
        let h = Tensor::new(
            &[
                [[1f32, 2.], [3., 4.], [5., 6.]],
                [[1f32, -1.], [3., 1.], [100., 100.]],
            ],
            &Device::Cpu,
        )
        .unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1], [1, 1, 0]], &Device::Cpu).unwrap();
        (h, mask)
    }

    fn run(pooling: Pooling, normalize: bool) -> Vec<Vec<f32>> {
        let (h, mask) = hidden();
        pool(&h, &mask, &[3, 2], PoolingConfig { pooling, normalize })
            .unwrap()
            .to_vec2()
            .unwrap()
    }

    #[test]
    fn each_pooling_ignores_the_padding() {
        assert_eq!(run(Pooling::Mean, false), [[3., 4.], [2., 0.]]);
        assert_eq!(run(Pooling::Cls, false), [[1., 2.], [1., -1.]]);
        assert_eq!(run(Pooling::Last, false), [[5., 6.], [3., 1.]]);
        assert_eq!(run(Pooling::Max, false), [[5., 6.], [3., 1.]]);
        let n = run(Pooling::Mean, true);
        assert!((n[0][0] - 0.6).abs() < 1e-6 && (n[0][1] - 0.8).abs() < 1e-6);
        assert_eq!(n[1], [1., 0.]);
    }

    #[test]
    fn reads_a_sentence_transformers_folder() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(
            PoolingConfig::read(d).unwrap(),
            PoolingConfig {
                pooling: Pooling::Mean,
                normalize: false
            }
        );
        std::fs::write(
            d.join("modules.json"),
            r#"[{"idx":0,"path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"idx":2,"path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        )
        .unwrap();
        std::fs::create_dir(d.join("1_Pooling")).unwrap();
        std::fs::write(
            d.join("1_Pooling/config.json"),
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        )
        .unwrap();
        assert_eq!(
            PoolingConfig::read(d).unwrap(),
            PoolingConfig {
                pooling: Pooling::Cls,
                normalize: true
            }
        );
        std::fs::write(
            d.join("1_Pooling/config.json"),
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}"#,
        )
        .unwrap();
        let err = PoolingConfig::read(d).unwrap_err().to_string();
        assert!(err.contains("several pooling modes"), "{err}");
    }
}
