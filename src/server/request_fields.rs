//! What every door's request shares, whatever API it speaks: sampling fields checked against the engine's
//! ranges (the error names the field), stop strings, the thinking level, the check of tools, `tool_choice` and
//! the response format together, which served model a name means (the model, an alias, or the one model
//! served), and a past tool call read back from a transcript. The doors (`openai/`, `anthropic/`, `ollama/`,
//! sessions) are siblings that each call these.

use std::collections::HashMap;

use serde_json::Value;

use super::error::ApiError;
use super::limits::RequestLimits;
use super::AppState;
use crate::provider::{
    CompletionRequest, InvalidToolCall, InvalidToolCallKind, ResponseFormat, Sampling, Thinking,
    ToolCall,
};
use crate::schema::SchemaError;

/// The served model a request's `model` names: the model itself, an alias (`--model-alias NAME=MODEL`), or the
/// one model served when the server serves exactly one (a client such as Claude Code names its own models).
pub fn resolve_model_alias(state: &AppState, name: &str) -> Result<String, ApiError> {
    if let Some(id) = state.provider.resolve_model(name) {
        return Ok(id);
    }
    if let Some((_, target)) = state
        .options
        .model_aliases
        .iter()
        .find(|(alias, _)| alias == name)
    {
        return state.resolve_model(target);
    }
    match state.model_ids().as_slice() {
        [only] => {
            tracing::debug!(requested = name, served = %only, "model name mapped to the served model");
            Ok(only.clone())
        }
        _ => state.resolve_model(name),
    }
}

/// The thinking level a chat request asks for: `reasoning_effort` (`none` = off), else
/// `chat_template_kwargs.enable_thinking` (false = off, true = the model's default level, medium); `None` leaves
/// the template's default. An unknown effort or a non-boolean `enable_thinking` is a 400.
pub fn thinking_level(
    effort: Option<&str>,
    kwargs: Option<&serde_json::Map<String, Value>>,
) -> Result<Option<Thinking>, ApiError> {
    if let Some(effort) = effort {
        let level = match effort {
            "none" => Thinking::Off,
            other => other.parse().map_err(|_| {
                ApiError::invalid_param(
                    "reasoning_effort",
                    format!(
                        "unknown reasoning_effort `{other}` (none, minimal, low, medium, high)"
                    ),
                )
            })?,
        };
        return Ok(Some(level));
    }
    match kwargs.and_then(|k| k.get("enable_thinking")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(false)) => Ok(Some(Thinking::Off)),
        Some(Value::Bool(true)) => Ok(Some(Thinking::Medium)),
        Some(other) => Err(ApiError::invalid_param(
            "chat_template_kwargs.enable_thinking",
            format!("expected a boolean, got {other}"),
        )),
    }
}

/// Validates tools, `tool_choice` and `response_format` together, as the engine will (400 on failure).
pub fn check_constraint(request: &CompletionRequest) -> Result<(), ApiError> {
    crate::schema::check_request(
        &request.tools,
        &request.tool_choice,
        &request.response_format,
    )
    .map_err(|e| {
        let param = match e {
            SchemaError::InvalidToolChoice(_) => "tool_choice",
            SchemaError::InvalidTool { .. } | SchemaError::DuplicateToolName(_) => "tools",
            _ if request.response_format != ResponseFormat::Text => "response_format",
            _ => "tools",
        };
        ApiError::invalid_param(param, e.to_string())
    })
}

/// The sampling fields a request may carry; each API sets the ones it has.
#[derive(Debug, Default)]
pub struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// OpenAI's `logit_bias`: token ids as strings (`"1234"`) to a bias in [-100, 100].
    pub logit_bias: Option<HashMap<String, f32>>,
}

/// Sampling settings, checked against the engine's ranges (the error names the parameter). Token ids in
/// `logit_bias` are checked against the model's vocabulary when the engine admits the request.
pub fn sampling(f: SamplingFields) -> Result<Sampling, ApiError> {
    let SamplingFields {
        temperature,
        top_p,
        top_k,
        min_p,
        seed,
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        logit_bias,
    } = f;
    let top_k = match top_k {
        None | Some(-1) | Some(0) => None,
        Some(k) if k > 0 => Some(u32::try_from(k).unwrap_or(u32::MAX)),
        Some(k) => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("top_k must be -1 (disabled) or positive, got {k}"),
            ))
        }
    };
    let logit_bias = match logit_bias {
        None => None,
        Some(m) => Some(
            m.into_iter()
                .map(|(k, v)| match k.trim().parse::<u32>() {
                    Ok(id) => Ok((id, v)),
                    Err(_) => Err(ApiError::invalid_param(
                        "logit_bias",
                        format!("logit_bias keys must be token ids (\"1234\"), got {k:?}"),
                    )),
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    let s = Sampling {
        temperature,
        top_p,
        top_k,
        min_p,
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        seed,
        logit_bias,
    };
    s.validate().map_err(|e| {
        let message = format!("invalid sampling parameter: {e}");
        match crate::server::error::sampling_param(&message) {
            Some(param) => ApiError::invalid_param(param, message),
            None => ApiError::bad_request(message),
        }
    })?;
    Ok(s)
}

/// Stop strings, checked: non-empty, within the limits.
pub fn stop_list(list: Vec<String>, limits: &RequestLimits) -> Result<Vec<String>, ApiError> {
    limits.check_stop(&list)?;
    if list.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param(
            "stop",
            "stop sequences must not be empty",
        ));
    }
    Ok(list)
}

/// A call from the transcript. Arguments that are not JSON are kept as written (an invalid call), so the
/// prompt shows the model exactly what it wrote before.
pub fn past_call(id: String, name: String, arguments: Value) -> ToolCall {
    match arguments {
        Value::Null => ToolCall::new(id, name, Value::Object(Default::default())),
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v) => ToolCall::new(id, name, v),
            Err(e) => ToolCall {
                invalid: Some(InvalidToolCall {
                    kind: InvalidToolCallKind::InvalidJson,
                    message: format!("the arguments are not JSON: {e}"),
                    raw_arguments: Some(text),
                }),
                ..ToolCall::new(id, name, Value::Null)
            },
        },
        other => ToolCall::new(id, name, other),
    }
}
