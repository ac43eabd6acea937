//! [`RemoteConfig`]: where an OpenAI-compatible server is and how to talk to it (`[remote]` in
//! `configs/remote-vllm.toml`), checked by [`RemoteConfig::validate`] before anything is sent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::{ModelDescriptor, ProviderError};

/// How to reach and speak to one OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteConfig {
    /// The API root, ending in `/v1` (`http://127.0.0.1:8000/v1` for `vllm serve`).
    pub base_url: String,
    /// The API key itself. Prefer `api_key_env`, which keeps it out of files.
    pub api_key: Option<String>,
    /// The name of an environment variable holding the API key (must be set when given).
    pub api_key_env: Option<String>,
    /// The served model id (vLLM's `--served-model-name`, else the model path it was started with).
    pub model: String,
    /// The model's context window in tokens. When absent, [`RemoteProvider::discover`](super::RemoteProvider::discover)
    /// reads vLLM's `max_model_len`; 0 until then means unknown.
    pub context_window: Option<u64>,
    /// Most tokens one completion may generate (default: the context window).
    pub max_output_tokens: Option<u64>,
    /// A local model (a known name or a GGUF path) whose tokenizer and chat template count tokens exactly when
    /// the server has no `/tokenize` endpoint. It must be the same model family the server runs.
    pub tokenizer: Option<String>,
    /// Extra HTTP headers sent with every request.
    pub headers: BTreeMap<String, String>,
    pub compat: Compat,
    pub timeouts: Timeouts,
    pub retry: Retry,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:8000/v1".into(),
            api_key: None,
            api_key_env: None,
            model: String::new(),
            context_window: None,
            max_output_tokens: None,
            tokenizer: None,
            headers: BTreeMap::new(),
            compat: Compat::default(),
            timeouts: Timeouts::default(),
            retry: Retry::default(),
        }
    }
}

/// Differences between OpenAI-compatible servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Compat {
    /// The name of the output limit: `max_tokens` (vLLM, most servers) or `max_completion_tokens` (OpenAI's
    /// newer models, which reject `max_tokens`).
    pub max_tokens_field: MaxTokensField,
    /// Ask the server's `/tokenize` (vLLM's, at the server root) for exact prompt counts.
    pub tokenize_endpoint: bool,
}

impl Default for Compat {
    fn default() -> Self {
        Self {
            max_tokens_field: MaxTokensField::MaxTokens,
            tokenize_endpoint: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    MaxTokens,
    MaxCompletionTokens,
}

/// Timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Establishing the TCP (and TLS) connection.
    pub connect_secs: f64,
    /// From sending the request to the response headers.
    pub request_secs: f64,
    /// Between two pieces of a streaming response (covers the prefill of a long prompt, too).
    pub idle_secs: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect_secs: 10.0,
            request_secs: 60.0,
            idle_secs: 120.0,
        }
    }
}

/// Retries of connection errors, HTTP 429 and 5xx (never after the response started streaming).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retry {
    /// Retries after the first attempt (at most 10).
    pub max_retries: u32,
    /// The first backoff; each retry doubles it (with up to 20% jitter), up to `max_backoff_ms`.
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// A `Retry-After` longer than this is not waited for: the request fails at once.
    pub max_retry_after_secs: f64,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff_ms: 500,
            max_backoff_ms: 8_000,
            max_retry_after_secs: 60.0,
        }
    }
}

/// A config after validation: parsed URL, resolved key, durations.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub base_url: reqwest::Url,
    pub api_key: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub connect: Duration,
    pub request: Duration,
    pub idle: Duration,
}

impl RemoteConfig {
    /// A config for `base_url` and `model` with every other setting at its default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            ..Self::default()
        }
    }

    /// Takes the context window [`discover`](super::RemoteProvider::discover) read for this config's model where
    /// the config left it out, so a provider built from it afterwards knows the window without asking again.
    pub fn learn(&mut self, discovered: &[ModelDescriptor]) {
        if self.context_window.is_none() {
            self.context_window = discovered
                .iter()
                .find(|m| m.id == self.model && m.context_window > 0)
                .map(|m| m.context_window);
        }
    }

    /// Checks every setting; the error names the setting and what is wrong with it.
    pub fn validate(&self) -> Result<(), ProviderError> {
        self.resolve().map(|_| ())
    }

    pub(crate) fn resolve(&self) -> Result<Resolved, ProviderError> {
        let bad = |m: String| Err(ProviderError::Config(m));
        let base = self.base_url.trim().trim_end_matches('/');
        let base_url = match reqwest::Url::parse(base) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => u,
            Ok(u) => {
                return bad(format!(
                    "remote.base_url `{}` must be an http:// or https:// URL with a host (got scheme `{}`)",
                    self.base_url,
                    u.scheme()
                ))
            }
            Err(e) => return bad(format!("remote.base_url `{}` is not a URL: {e}", self.base_url)),
        };
        if self.model.trim().is_empty() {
            return bad("remote.model is empty: name the model the server serves".into());
        }
        let api_key = match (&self.api_key, &self.api_key_env) {
            (Some(k), _) if !k.is_empty() => Some(k.clone()),
            (_, Some(var)) if !var.is_empty() => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return bad(format!(
                        "remote.api_key_env names `{var}`, but that environment variable is not set"
                    ))
                }
            },
            _ => None,
        };
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &self.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                ProviderError::Config(format!("remote.headers: `{k}` is not a header name: {e}"))
            })?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
                ProviderError::Config(format!("remote.headers.{k}: not a valid header value: {e}"))
            })?;
            headers.insert(name, value);
        }
        let secs = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 86_400.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ProviderError::Config(format!(
                    "remote.timeouts.{name} must be in (0, 86400] seconds, got {v}"
                )))
            }
        };
        let connect = secs("connect_secs", self.timeouts.connect_secs)?;
        let request = secs("request_secs", self.timeouts.request_secs)?;
        let idle = secs("idle_secs", self.timeouts.idle_secs)?;
        let r = &self.retry;
        if r.max_retries > 10 {
            return bad(format!(
                "remote.retry.max_retries must be at most 10, got {}",
                r.max_retries
            ));
        }
        if r.initial_backoff_ms > r.max_backoff_ms {
            return bad(format!(
                "remote.retry.initial_backoff_ms ({}) is larger than max_backoff_ms ({})",
                r.initial_backoff_ms, r.max_backoff_ms
            ));
        }
        if !(r.max_retry_after_secs.is_finite() && r.max_retry_after_secs >= 0.0) {
            return bad(format!(
                "remote.retry.max_retry_after_secs must be >= 0, got {}",
                r.max_retry_after_secs
            ));
        }
        if let (Some(w), Some(o)) = (self.context_window, self.max_output_tokens) {
            if o > w {
                return bad(format!(
                    "remote.max_output_tokens ({o}) is larger than remote.context_window ({w})"
                ));
            }
        }
        Ok(Resolved {
            base_url,
            api_key,
            headers,
            connect,
            request,
            idle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_once_a_model_is_named() {
        let err = RemoteConfig::default().validate().unwrap_err().to_string();
        assert!(err.contains("remote.model"), "{err}");
        RemoteConfig::new("http://127.0.0.1:8000/v1/", "m")
            .validate()
            .unwrap();
    }

    #[test]
    fn bad_settings_are_named() {
        let cases = [
            (RemoteConfig::new("ftp://x/v1", "m"), "http:// or https://"),
            (RemoteConfig::new("not a url", "m"), "is not a URL"),
            (
                RemoteConfig {
                    api_key_env: Some("AGENTD_TEST_SURELY_UNSET_VAR".into()),
                    ..RemoteConfig::new("http://h/v1", "m")
                },
                "AGENTD_TEST_SURELY_UNSET_VAR",
            ),
            (
                RemoteConfig {
                    timeouts: Timeouts {
                        idle_secs: 0.0,
                        ..Timeouts::default()
                    },
                    ..RemoteConfig::new("http://h/v1", "m")
                },
                "idle_secs",
            ),
            (
                RemoteConfig {
                    headers: [("bad header".to_string(), "v".to_string())].into(),
                    ..RemoteConfig::new("http://h/v1", "m")
                },
                "bad header",
            ),
        ];
        for (cfg, needle) in cases {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn a_discovered_window_fills_only_what_the_config_left_out() {
        let served = |id: &str, window: u64| ModelDescriptor {
            id: id.into(),
            context_window: window,
            max_output_tokens: window,
            device: None,
        };
        let models = [served("other", 8192), served("m", 32768)];
        let mut cfg = RemoteConfig::new("http://h/v1", "m");
        cfg.learn(&models);
        assert_eq!(cfg.context_window, Some(32768));
        let mut set = RemoteConfig {
            context_window: Some(4096),
            ..RemoteConfig::new("http://h/v1", "m")
        };
        set.learn(&models);
        assert_eq!(
            set.context_window,
            Some(4096),
            "the config's own value wins"
        );
        let mut unknown = RemoteConfig::new("http://h/v1", "m");
        unknown.learn(&[served("m", 0), served("other", 8192)]);
        assert_eq!(
            unknown.context_window, None,
            "0 is no window, another model's is not ours"
        );
    }
}
