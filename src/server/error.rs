//! [`ApiError`]: every way an HTTP request can fail, answered in OpenAI's shape
//! `{"error": {"message", "type", "param", "code"}}` with the status a client expects (400 bad input, 401 key,
//! 404 unknown model or route, 413 body too large, 503 saturated or shutting down, 500 our bug).
//!
//! Provider and engine failures are mapped here once ([`ApiError::from_provider`], [`ApiError::from_provider_error`]), so
//! every route reports the same failure the same way.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::app::AppError;
use crate::provider::{ErrorKind, ProviderError};
use crate::session::SessionError;

/// An error answer. What the client should do is implied by the status (see the module doc).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `server_error`, …
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `invalid_api_key`, `context_length_exceeded`, …).
    pub code: Option<&'static str>,
    /// Seconds to wait before retrying (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

/// The JSON body (OpenAI's error shape; every door but Anthropic's and Ollama's).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = OpenAiError)]
pub struct ErrorBody<'a> {
    pub error: ErrorObject<'a>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = OpenAiErrorObject)]
pub struct ErrorObject<'a> {
    pub message: &'a str,
    /// `invalid_request_error`, `authentication_error`, `permission_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// The request field at fault, when one is.
    pub param: Option<&'a str>,
    /// `model_not_found`, `invalid_api_key`, `context_length_exceeded`, `server_overloaded`, …
    pub code: Option<&'a str>,
}

/// An error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AnthropicError {
    /// Always `error`.
    #[serde(rename = "type")]
    #[schema(pattern = "^error$")]
    pub kind: &'static str,
    pub error: AnthropicErrorObject,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AnthropicErrorObject {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `overloaded_error`, …
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

/// An error in Ollama's shape: `{"error": "…"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OllamaError {
    pub error: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or asks for something invalid. Fix the request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the field at fault.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::bad_request(message).with_param(param)
    }

    /// 401: no API key, or the wrong one.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message);
        e.code = Some("invalid_api_key");
        e
    }

    /// 404 for a model this server does not serve.
    pub fn unknown_model(model: &str, served: &[String]) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "The model `{model}` does not exist. This server serves: {}",
                served.join(", ")
            ),
        );
        e.param = Some("model".into());
        e.code = Some("model_not_found");
        e
    }

    /// 404 for anything else that does not exist (a route, a session).
    pub fn not_found(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
        e.code = Some("not_found");
        e
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            message,
        )
    }

    /// 403: the request is refused whoever sends it (a foreign Host or Origin, an agent session that may write
    /// or run commands on a server without a key).
    pub fn forbidden(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::FORBIDDEN, "permission_error", message);
        e.code = Some("forbidden");
        e
    }

    /// 415: the body is not JSON.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            message,
        );
        e.code = Some("unsupported_media_type");
        e
    }

    /// 409: the resource is busy (an agent session that is already running).
    pub fn conflict(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::CONFLICT, "invalid_request_error", message);
        e.code = Some("conflict");
        e
    }

    /// 413: the body is larger than the server accepts.
    pub fn payload_too_large(limit: usize) -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the server's limit of {limit} bytes"),
        );
        e.code = Some("request_too_large");
        e
    }

    /// 501: this server cannot do that in its current configuration.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            "invalid_request_error",
            message,
        )
    }

    /// 503 with `Retry-After`: too many requests are queued, or the server is shutting down.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.code = Some("server_overloaded");
        e.retry_after = Some(retry_after);
        e
    }

    /// 500: our bug or a failed engine.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body of this error.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(ErrorBody {
            error: ErrorObject {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_else(|_| serde_json::json!({"error": {"message": self.message}}))
    }

    /// Anthropic's error `type` for this error's status.
    pub fn anthropic_type(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 405 | 409 | 415 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ => "api_error",
        }
    }

    /// The body of this error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
    pub fn anthropic_body(&self) -> serde_json::Value {
        // Claude Code recognises an over-long prompt by Anthropic's wording and compacts its conversation.
        let message = if self.code == Some("context_length_exceeded") {
            anthropic_overflow(&self.message)
        } else {
            self.message.clone()
        };
        serde_json::to_value(AnthropicError {
            kind: "error",
            error: AnthropicErrorObject {
                kind: self.anthropic_type(),
                message,
            },
        })
        .unwrap_or_else(|_| serde_json::json!({"type": "error"}))
    }

    /// The body of an error in Ollama's shape: `{"error": "…"}`.
    pub fn ollama_body(message: &str) -> String {
        serde_json::to_string(&OllamaError {
            error: message.to_string(),
        })
        .unwrap_or_default()
    }

    /// A provider failure, classified by its kind.
    pub fn from_provider(kind: ErrorKind, message: &str) -> Self {
        match kind {
            ErrorKind::InvalidRequest | ErrorKind::Unsupported => match sampling_param(message) {
                Some(param) => Self::invalid_param(param, message),
                None => Self::bad_request(message),
            },
            ErrorKind::ContextOverflow => {
                Self::bad_request(message).with_code("context_length_exceeded")
            }
            ErrorKind::UnknownModel => {
                let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
                e.param = Some("model".into());
                e.code = Some("model_not_found");
                e
            }
            ErrorKind::Cancelled => {
                Self::unavailable("the request was cancelled (the server is shutting down)", 1)
            }
            ErrorKind::RateLimited => Self::unavailable(message, 1),
            // The upstream server (remote provider) failed or is unreachable: a gateway error.
            ErrorKind::Connect
            | ErrorKind::Timeout
            | ErrorKind::Server
            | ErrorKind::Protocol
            | ErrorKind::NotFound
            | ErrorKind::Auth => Self::new(StatusCode::BAD_GATEWAY, "server_error", message),
            ErrorKind::Engine | ErrorKind::Config | ErrorKind::Internal => Self::internal(message),
        }
    }

    /// A provider error value.
    pub fn from_provider_error(e: &ProviderError) -> Self {
        Self::from_provider(e.kind(), &e.to_string())
    }

    /// An application-layer error (agent sessions): usage → 400 naming `param`, not found → 404, busy → 409,
    /// backend → 503, tree-operation refusals → 400, anything else → 500.
    pub fn from_app(e: AppError, param: &str) -> Self {
        match e {
            AppError::Usage(m) => Self::invalid_param(param, m),
            AppError::NotFound(m) => Self::not_found(m).with_param(param),
            AppError::Busy(m) => Self::conflict(m),
            AppError::Backend(m) => Self::unavailable(m, 1),
            AppError::Session(
                s @ (SessionError::UnknownEntry(_)
                | SessionError::NotALeaf(_)
                | SessionError::RewindTooFar { .. }),
            ) => Self::invalid_param(param, s.to_string()),
            AppError::Session(SessionError::AgentRunning) => {
                Self::conflict(SessionError::AgentRunning.to_string())
            }
            AppError::Session(s) => Self::internal(s.to_string()),
            AppError::Failed(m) => Self::internal(m),
        }
    }

    /// A provider error of a route the provider may not offer at all (raw completions, tokenizing): 501 for
    /// what it does not offer, else as [`from_provider_error`](Self::from_provider_error).
    pub fn from_optional_feature(e: &ProviderError) -> Self {
        match e {
            ProviderError::Unsupported(message) => Self::not_implemented(message.clone()),
            other => Self::from_provider_error(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

/// The sampling parameter an engine message names ("invalid sampling parameter: logit_bias names token …"),
/// so a value the engine refuses is a 400 naming that field like one refused before queueing.
pub fn sampling_param(message: &str) -> Option<String> {
    const AT: &str = "invalid sampling parameter: ";
    let rest = &message[message.find(AT)? + AT.len()..];
    let name = rest.split_whitespace().next()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Anthropic's wording of a prompt over the window: `prompt is too long: 2131 tokens > 2048 maximum` when the
/// message says how many tokens the prompt had and the window holds (`prompt is N tokens … window is W tokens`;
/// Claude Code reads the two numbers to see how much to compact), else the message after that prefix.
fn anthropic_overflow(message: &str) -> String {
    let after = |key: &str| -> Option<u64> {
        let rest = &message[message.find(key)? + key.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    match (after("prompt is "), after("window is ")) {
        (Some(tokens), Some(window)) => {
            format!("prompt is too long: {tokens} tokens > {window} maximum")
        }
        _ => format!("prompt is too long: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_in_openai_shape() {
        let e = ApiError::invalid_param("n", "n must be 1");
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "n must be 1", "type": "invalid_request_error",
                                         "param": "n", "code": null}})
        );
        let resp = ApiError::unavailable("busy", 3).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "3");
    }

    #[test]
    fn provider_kinds_map_to_statuses() {
        let cases = [
            (ErrorKind::InvalidRequest, 400),
            (ErrorKind::ContextOverflow, 400),
            (ErrorKind::UnknownModel, 404),
            (ErrorKind::Connect, 502),
            (ErrorKind::Engine, 500),
            (ErrorKind::Cancelled, 503),
        ];
        for (kind, status) in cases {
            assert_eq!(ApiError::from_provider(kind, "m").status.as_u16(), status);
        }
    }

    #[test]
    fn an_overflow_reads_as_anthropics_with_both_numbers() {
        assert_eq!(
            anthropic_overflow(
                "context window exceeded: prompt is 2131 tokens, but the model's context window is 2048 tokens"
            ),
            "prompt is too long: 2131 tokens > 2048 maximum"
        );
        assert_eq!(
            anthropic_overflow("the server said no"),
            "prompt is too long: the server said no"
        );
    }
}
