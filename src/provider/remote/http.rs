//! Sending a request: the request timeout, retries with exponential backoff on connection errors, HTTP 429
//! and 5xx (honouring `Retry-After` / `retry-after-ms`), and turning a failed response into the
//! [`ProviderError`] that says what to do about it (401 → auth, 404 → unknown model or wrong URL, context
//! overflow recognised in a 400, …).

use std::time::Duration;

use rand::Rng;
use reqwest::{header, Response, StatusCode};
use tokio_util::sync::CancellationToken;

use super::super::{ProviderError, TimeoutKind};
use super::wire;
use super::Shared;

/// How long reading an error body may take before the status alone is reported.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// A failed attempt, and whether to try again (after the server's `Retry-After`, when it sent one).
struct Failure {
    error: ProviderError,
    retry: bool,
    retry_after: Option<Duration>,
}

/// POSTs `body` as JSON to `url` and returns the successful response (headers received, body not read).
pub(super) async fn post(
    shared: &Shared,
    url: &reqwest::Url,
    body: &serde_json::Value,
    model: &str,
    cancel: &CancellationToken,
) -> Result<Response, ProviderError> {
    let retry = &shared.config.retry;
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let mut req = shared
            .client
            .post(url.clone())
            .headers(shared.resolved.headers.clone())
            .header(header::ACCEPT, "text/event-stream, application/json")
            .json(body);
        if let Some(key) = &shared.resolved.api_key {
            req = req.bearer_auth(key);
        }
        let sent = tokio::select! {
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            r = tokio::time::timeout(shared.resolved.request, req.send()) => r,
        };
        let failure = match sent {
            Err(_) => {
                return Err(ProviderError::Timeout {
                    what: TimeoutKind::Request,
                    after: shared.resolved.request,
                })
            }
            Ok(Err(e)) => Failure {
                error: ProviderError::Connect {
                    url: url.to_string(),
                    message: error_chain(&e),
                },
                retry: true,
                retry_after: None,
            },
            Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
            Ok(Ok(resp)) => failed_response(resp, url, model, attempt).await,
        };
        if !failure.retry || attempt > retry.max_retries {
            return Err(failure.error);
        }
        let wait = match failure.retry_after {
            Some(d) if d.as_secs_f64() > retry.max_retry_after_secs => {
                tracing::warn!(after = ?d, "the server asks to retry later than allowed; giving up");
                return Err(failure.error);
            }
            Some(d) => d,
            None => backoff(retry.initial_backoff_ms, retry.max_backoff_ms, attempt),
        };
        tracing::info!(attempt, ?wait, error = %failure.error, "retrying the request");
        tokio::select! {
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The wait before retry number `attempt` (1-based): `initial · 2^(attempt−1)`, at most `max`, minus up to 20%.
fn backoff(initial_ms: u64, max_ms: u64, attempt: u32) -> Duration {
    let exp = initial_ms.saturating_mul(1u64 << (attempt - 1).min(20));
    let ms = exp.min(max_ms) as f64;
    let jitter = rand::thread_rng().gen_range(0.8..=1.0);
    Duration::from_secs_f64(ms * jitter / 1000.0)
}

/// Reads a failed response and classifies it.
async fn failed_response(resp: Response, url: &reqwest::Url, model: &str, attempt: u32) -> Failure {
    let status = resp.status();
    let retry_after = retry_after(resp.headers());
    let body = match tokio::time::timeout(ERROR_BODY_TIMEOUT, resp.text()).await {
        Ok(Ok(text)) => text,
        _ => String::new(),
    };
    let message = wire::error_message(&body);
    let retry = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
    Failure {
        error: classify(status.as_u16(), message, url, model, attempt),
        retry,
        retry_after,
    }
}

/// The error for an HTTP status and the server's message. Also used for errors sent inside a stream.
pub(super) fn classify(
    status: u16,
    message: String,
    url: &reqwest::Url,
    model: &str,
    attempts: u32,
) -> ProviderError {
    let lower = message.to_lowercase();
    let about_model = lower.contains("model")
        && (lower.contains("not exist")
            || lower.contains("not found")
            || lower.contains("unknown"));
    match status {
        401 | 403 => ProviderError::Auth { status, message },
        404 if about_model || (!model.is_empty() && lower.contains(&model.to_lowercase())) => {
            ProviderError::UnknownModel {
                model: model.to_string(),
                message,
            }
        }
        404 => ProviderError::NotFound {
            url: url.to_string(),
            message,
        },
        429 => ProviderError::RateLimited { attempts, message },
        _ if is_context_overflow(&lower) => ProviderError::ContextOverflow { message },
        400..=499 if about_model => ProviderError::UnknownModel {
            model: model.to_string(),
            message,
        },
        500..=599 => ProviderError::Server {
            status,
            attempts,
            message,
        },
        _ => ProviderError::InvalidRequest { status, message },
    }
}

/// Whether an error message (lowercased) says the prompt does not fit (OpenAI, vLLM, llama.cpp, TGI wording).
pub(super) fn is_context_overflow(lower: &str) -> bool {
    const PATTERNS: [&str; 10] = [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "exceeds the context",
        "prompt is too long",
        "input is too long",
        "too many tokens",
        "longer than the model",
        "exceed_context_size",
    ];
    PATTERNS.iter().any(|p| lower.contains(p))
}

/// `retry-after-ms` (OpenAI) or `Retry-After` in seconds or as an HTTP date.
fn retry_after(headers: &header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let v = get("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

/// An error and its causes on one line (reqwest's top-level message alone says little).
/// POSTs `body` as JSON to `url`: the answer's status and text (see [`send`]).
pub(super) async fn post_json(
    shared: &Shared,
    url: &reqwest::Url,
    body: &serde_json::Value,
) -> Result<(u16, String), ProviderError> {
    send(shared, shared.client.post(url.clone()).json(body), url).await
}

/// Sends `req` (to `url`) with the server's headers and key, within the request timeout: the answer's status
/// and text (any status; the caller classifies it).
pub(super) async fn send(
    shared: &Shared,
    req: reqwest::RequestBuilder,
    url: &reqwest::Url,
) -> Result<(u16, String), ProviderError> {
    let mut req = req.headers(shared.resolved.headers.clone());
    if let Some(key) = &shared.resolved.api_key {
        req = req.bearer_auth(key);
    }
    let resp = tokio::time::timeout(shared.resolved.request, req.send())
        .await
        .map_err(|_| ProviderError::Timeout {
            what: TimeoutKind::Request,
            after: shared.resolved.request,
        })?
        .map_err(|e| ProviderError::Connect {
            url: url.to_string(),
            message: error_chain(&e),
        })?;
    let status = resp.status().as_u16();
    let text = resp
        .text()
        .await
        .map_err(|e| ProviderError::Protocol(format!("reading {url}: {e}")))?;
    Ok((status, text))
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> reqwest::Url {
        reqwest::Url::parse("http://h/v1/chat/completions").unwrap()
    }

    #[test]
    fn statuses_are_classified() {
        let c = |s, m: &str| classify(s, m.to_string(), &url(), "qwen", 1).kind();
        use super::super::super::ErrorKind as K;
        assert_eq!(c(401, "bad key"), K::Auth);
        assert_eq!(c(404, "The model `qwen` does not exist."), K::UnknownModel);
        assert_eq!(c(404, "Not Found"), K::NotFound);
        assert_eq!(
            c(400, "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens"),
            K::ContextOverflow
        );
        assert_eq!(c(400, "temperature must be >= 0"), K::InvalidRequest);
        assert_eq!(c(503, "overloaded"), K::Server);
        assert_eq!(c(429, "slow down"), K::RateLimited);
    }

    #[test]
    fn retry_after_forms() {
        let mut h = header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = header::HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        for attempt in 1..=6 {
            let d = backoff(100, 1_000, attempt).as_secs_f64() * 1000.0;
            let full = (100.0 * 2f64.powi(attempt as i32 - 1)).min(1_000.0);
            assert!(d <= full + 1e-6 && d >= 0.8 * full - 1e-6, "{attempt}: {d}");
        }
    }
}
