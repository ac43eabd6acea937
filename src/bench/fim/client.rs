//! A streaming `/infill` client that stamps the first piece the moment it arrives and reads the server's own
//! `timings` (llama.cpp's `prompt_n`, `cache_n`, `predicted_n`) from the last object. Cancelling it hangs up.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::bench::BenchError;

/// One endpoint's `/infill`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InfillClient {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
}

/// One answered request.
#[derive(Debug, Clone, Default)]
pub struct InfillAnswer {
    pub content: String,
    /// To the first object with text; `None` when the middle was empty.
    pub ttft_ms: Option<f64>,
    pub total_ms: f64,
    /// Prompt tokens computed, and those the server took from its cache (its `timings`; 0 when absent).
    pub prompt_n: u64,
    pub cache_n: u64,
    pub predicted_n: u64,
    /// Each generated token with its alternatives, when the request asked for `n_probs`.
    pub tokens: Vec<ProbToken>,
}

/// One generated token of llama.cpp's `completion_probabilities`: its bytes and log-probability, and the most
/// likely tokens at that step (bytes, log-probability), most likely first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ProbToken {
    pub bytes: Vec<u8>,
    pub logprob: f64,
    pub top: Vec<(Vec<u8>, f64)>,
}

impl ProbToken {
    /// The entries of a `completion_probabilities` array (unreadable ones skipped).
    fn parse_all(v: &Value) -> Vec<ProbToken> {
        let bytes = |e: &Value| -> Vec<u8> {
            match e.get("bytes").and_then(Value::as_array) {
                Some(b) => b
                    .iter()
                    .filter_map(|x| x.as_u64().map(|x| x as u8))
                    .collect(),
                None => e
                    .get("token")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .as_bytes()
                    .to_vec(),
            }
        };
        let logprob = |e: &Value| e.get("logprob").and_then(Value::as_f64);
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| {
                        Some(ProbToken {
                            bytes: bytes(e),
                            logprob: logprob(e)?,
                            top: e
                                .get("top_logprobs")
                                .and_then(Value::as_array)
                                .map(|t| {
                                    t.iter()
                                        .filter_map(|x| Some((bytes(x), logprob(x)?)))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl InfillClient {
    /// `root` is the server's root (`http://127.0.0.1:8080`; a trailing `/v1` is dropped).
    pub fn new(root: &str, api_key: Option<String>) -> Result<Self, BenchError> {
        let root = root.trim_end_matches('/').trim_end_matches("/v1");
        let url = format!("{root}/infill");
        reqwest::Url::parse(&url)
            .map_err(|e| BenchError::Config(format!("`{root}` is not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| BenchError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { http, url, api_key })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends `body` with `stream: true`; `Ok(None)` when `cancel` fired first (the connection is dropped).
    pub async fn infill(
        &self,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<Option<InfillAnswer>, BenchError> {
        let mut body = body.clone();
        body["stream"] = Value::Bool(true);
        let started = Instant::now();
        tokio::select! {
            r = self.run(&body, started) => r.map(Some),
            _ = cancel.cancelled() => Ok(None),
        }
    }

    async fn run(&self, body: &Value, started: Instant) -> Result<InfillAnswer, BenchError> {
        let url = self.url.clone();
        let mut req = self.http.post(&url).json(body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| BenchError::Connect {
            url: url.clone(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let message = resp.text().await.unwrap_or_default();
            return Err(BenchError::Http {
                url,
                status,
                message,
            });
        }
        let mut answer = InfillAnswer::default();
        let mut pending = String::new();
        let mut bytes = resp.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            let chunk = chunk.map_err(|e| BenchError::Protocol {
                url: url.clone(),
                message: e.to_string(),
            })?;
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(nl) = pending.find('\n') {
                let line: String = pending.drain(..=nl).collect();
                let Some(data) = line.trim().strip_prefix("data:") else {
                    continue;
                };
                let v: Value = match serde_json::from_str(data.trim()) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                if let Some(e) = v.get("error") {
                    return Err(BenchError::Protocol {
                        url,
                        message: e.to_string(),
                    });
                }
                let text = v.get("content").and_then(Value::as_str).unwrap_or("");
                if !text.is_empty() && answer.ttft_ms.is_none() {
                    answer.ttft_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
                }
                answer.content.push_str(text);
                if let Some(p) = v.get("completion_probabilities") {
                    answer.tokens.extend(ProbToken::parse_all(p));
                }
                if v.get("stop").and_then(Value::as_bool) == Some(true) {
                    let t = v.get("timings").cloned().unwrap_or(Value::Null);
                    let n = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
                    answer.prompt_n = n("prompt_n");
                    answer.cache_n = n("cache_n");
                    answer.predicted_n = n("predicted_n");
                    answer.total_ms = started.elapsed().as_secs_f64() * 1000.0;
                    return Ok(answer);
                }
            }
        }
        Err(BenchError::Protocol {
            url,
            message: "the stream ended without its last object".into(),
        })
    }
}
