//! The provider's types in the engine's terms and back: sampling settings become [`SamplingParams`], engine
//! errors become [`ProviderError`] kinds. The only place the provider layer names them.

use super::super::{ProviderError, Sampling, DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P};
use crate::engine::{EngineError, SamplingParams};

/// The engine's parameters: set fields override the defaults. A request that leaves the truncation unset gets
/// llama.cpp server's (`top_k` 40, `top_p` 0.95, `min_p` 0.05) rather than the whole distribution: a small model
/// sampling its long tail at the default temperature derails tool calls.
pub fn sampling_params(s: &Sampling) -> SamplingParams {
    let d = SamplingParams::default();
    SamplingParams {
        temperature: s.temperature.unwrap_or(d.temperature),
        top_k: s.top_k.map_or(DEFAULT_TOP_K, |k| k as usize),
        top_p: s.top_p.unwrap_or(DEFAULT_TOP_P),
        min_p: s.min_p.unwrap_or(DEFAULT_MIN_P),
        repetition_penalty: s.repetition_penalty.unwrap_or(d.repetition_penalty),
        repeat_last_n: d.repeat_last_n,
        presence_penalty: s.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: s.frequency_penalty.unwrap_or(d.frequency_penalty),
        seed: s.seed.or(d.seed),
        logit_bias: s
            .logit_bias
            .as_ref()
            .map(|m| m.iter().map(|(&id, &b)| (id, b)).collect())
            .unwrap_or_default(),
    }
}

/// The engine's errors: a too-long prompt is a context overflow, a bad request (sampling, tools, schemas,
/// `tool_choice`, `response_format`) an invalid request, a name no manifest knows an unknown model, anything else
/// an engine error.
pub fn engine_error(e: EngineError) -> ProviderError {
    match e {
        EngineError::PromptTooLong { .. } | EngineError::KvCacheTooSmall { .. } => {
            ProviderError::ContextOverflow {
                message: e.to_string(),
            }
        }
        EngineError::InvalidSampling(_) | EngineError::EmptyPrompt | EngineError::Schema(_) => {
            ProviderError::InvalidRequest {
                status: 400,
                message: e.to_string(),
            }
        }
        EngineError::Files(e) => e.into(),
        other => ProviderError::Engine(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_files::FilesError;
    use std::collections::BTreeMap;

    /// The provider refuses exactly what the engine would: one value at a time, inside, on and past each bound.
    #[test]
    fn the_provider_and_the_engine_accept_the_same_settings() {
        let values = [
            f32::NEG_INFINITY,
            -101.0,
            -100.0,
            -2.5,
            -2.0,
            -0.5,
            0.0,
            0.005,
            0.01,
            0.5,
            1.0,
            1.5,
            2.0,
            2.5,
            100.0,
            100.5,
            f32::INFINITY,
            f32::NAN,
        ];
        let mut checked = 0;
        for v in values {
            let settings = [
                Sampling {
                    temperature: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    top_p: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    min_p: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    repetition_penalty: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    presence_penalty: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    frequency_penalty: Some(v),
                    ..Sampling::default()
                },
                Sampling {
                    logit_bias: Some(BTreeMap::from([(7, v)])),
                    ..Sampling::default()
                },
            ];
            for s in settings {
                let provider = s.validate();
                let engine = sampling_params(&s).validate();
                assert_eq!(
                    provider.is_ok(),
                    engine.is_ok(),
                    "{s:?}: {provider:?} vs {engine:?}"
                );
                if let (Err(p), Err(e)) = (&provider, &engine) {
                    assert!(e.to_string().ends_with(p.as_str()), "{p} vs {e}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, values.len() * 7);
        assert!(Sampling::default().validate().is_ok());
    }

    #[test]
    fn engine_errors_keep_their_kind() {
        let e = engine_error(EngineError::EmptyPrompt);
        assert!(
            matches!(e, ProviderError::InvalidRequest { status: 400, .. }),
            "{e:?}"
        );
        let e = engine_error(EngineError::Files(FilesError::UnknownModel {
            name: "x".into(),
            known: vec!["a".into()],
        }));
        assert!(
            matches!(&e, ProviderError::UnknownModel { model, .. } if model == "x"),
            "{e:?}"
        );
        let e = engine_error(EngineError::Internal("broke".into()));
        assert!(
            matches!(&e, ProviderError::Engine(m) if m.contains("broke")),
            "{e:?}"
        );
    }
}
