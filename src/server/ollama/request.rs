//! Ollama's request bodies (`/api/chat`, `/api/generate`) → the provider's request: messages (with tool calls
//! whose arguments are objects, tool results named by `tool_name`), tools, `format` (`"json"` or a JSON schema),
//! `options` (temperature, top_p, top_k, min_p, seed, num_predict, stop, repeat/presence/frequency penalties;
//! num_ctx and the rest Ollama tunes its runner with are accepted and left to the server), `keep_alive` (seconds,
//! or a Go duration such as `"5m"`; 0 unloads after the request, a negative value keeps the model) and `think`.

use serde::Deserialize;
use serde_json::Value;

use crate::provider::{
    AssistantMessage, CompletionRequest, ContentBlock, KeepAlive, Message, ResponseFormat,
    Sampling, Thinking, ToolChoice, ToolResultMessage, ToolSpec, UserMessage,
};
use crate::server::error::ApiError;
use crate::server::limits::RequestLimits;

use crate::server::request_fields::{
    check_constraint, past_call, sampling, stop_list, SamplingFields,
};

/// `POST /api/chat`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatRequest {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub options: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub think: Option<Value>,
    /// Not Ollama's: what the Vercel AI SDK's Ollama provider sends beside `options` (Ollama drops them; here
    /// they are honoured, `options` winning where both say).
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub temperature: Option<Value>,
    #[serde(default)]
    pub top_p: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<Value>,
}

/// One message of `/api/chat`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// `POST /api/generate`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct GenerateRequest {
    pub model: String,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub template: Option<String>,
    #[serde(default)]
    pub raw: bool,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
    #[serde(default)]
    pub options: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    /// Deprecated conversation memory (token ids a reply gave back); this server gives none back, so only an
    /// empty one is accepted.
    #[serde(default)]
    pub context: Option<Value>,
}

/// A Go duration (`"5m"`, `"1h30m"`, `"-1s"`, `"0"`) in seconds.
fn go_duration_secs(text: &str) -> Option<f64> {
    let t = text.trim();
    if let Ok(n) = t.parse::<f64>() {
        // A bare number in a string: Go's ParseDuration wants a unit, except for 0; take it as seconds.
        return Some(n);
    }
    let (sign, mut rest) = match t.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, t.strip_prefix('+').unwrap_or(t)),
    };
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(sign * total)
}

/// `keep_alive` (seconds as a number, or a Go duration): 0 unloads after the request, negative keeps the model.
pub fn keep_alive(value: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    let secs = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => go_duration_secs(s),
        Some(_) => None,
    };
    let secs = secs.ok_or_else(|| {
        ApiError::invalid_param(
            "keep_alive",
            "keep_alive must be seconds or a duration such as \"5m\"",
        )
    })?;
    Ok(Some(if secs < 0.0 {
        KeepAlive::Forever
    } else if secs == 0.0 {
        KeepAlive::Unload
    } else {
        KeepAlive::For(std::time::Duration::from_secs_f64(secs.min(1e12)))
    }))
}

/// `think`: a boolean or a level.
fn think(value: Option<&Value>) -> Result<Option<Thinking>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(false)) => Ok(Some(Thinking::Off)),
        Some(Value::Bool(true)) => Ok(Some(Thinking::Medium)),
        Some(Value::String(s)) => match s.as_str() {
            "low" => Ok(Some(Thinking::Low)),
            "medium" => Ok(Some(Thinking::Medium)),
            "high" | "max" => Ok(Some(Thinking::High)),
            other => Err(ApiError::invalid_param(
                "think",
                format!("invalid think value `{other}` (true, false, \"low\", \"medium\", \"high\", \"max\")"),
            )),
        },
        Some(other) => Err(ApiError::invalid_param(
            "think",
            format!("think must be a boolean or a level, got {other}"),
        )),
    }
}

/// `format`: `"json"` (any JSON object) or a JSON schema (one document of it); absent or `""`: free text.
pub fn format(value: Option<&Value>) -> Result<ResponseFormat, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(ResponseFormat::Text),
        Some(Value::String(s)) if s.is_empty() => Ok(ResponseFormat::Text),
        Some(Value::String(s)) if s == "json" => Ok(ResponseFormat::JsonObject),
        // Ollama's llama.cpp grammars generate no key the schema does not declare: a pydantic model's schema
        // gives that model's fields only.
        Some(schema @ Value::Object(_)) => Ok(ResponseFormat::JsonSchema {
            name: "format".into(),
            schema: crate::schema::compile::close_objects(schema),
            strict: true,
        }),
        Some(other) => Err(ApiError::invalid_param(
            "format",
            format!("format must be \"json\" or a JSON schema, got {other}"),
        )),
    }
}

/// What `options` sets: sampling, the reply's length and its stop strings.
pub struct Options {
    pub sampling: Sampling,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
}

/// `options`, checked (a value of the wrong type or out of range is a 400 naming `options.NAME`).
pub fn options(
    map: Option<&serde_json::Map<String, Value>>,
    limits: &RequestLimits,
) -> Result<Options, ApiError> {
    let empty = serde_json::Map::new();
    let map = map.unwrap_or(&empty);
    let number = |key: &str| -> Result<Option<f64>, ApiError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(ApiError::invalid_param(
                format!("options.{key}"),
                format!("options.{key} must be a number, got {other}"),
            )),
        }
    };
    let float = |key: &str| -> Result<Option<f32>, ApiError> { Ok(number(key)?.map(|v| v as f32)) };
    let seed = number("seed")?.map(|s| s as i64);
    // Ollama's seed is an int: a negative one means random.
    let seed = seed.and_then(|s| u64::try_from(s).ok());
    let sampling = sampling(SamplingFields {
        temperature: float("temperature")?,
        top_p: float("top_p")?,
        top_k: number("top_k")?.map(|k| k as i64),
        min_p: float("min_p")?,
        seed,
        presence_penalty: float("presence_penalty")?,
        frequency_penalty: float("frequency_penalty")?,
        repetition_penalty: float("repeat_penalty")?,
        logit_bias: None,
    })
    .map_err(|mut e| {
        if let Some(p) = &e.param {
            e.param = Some(format!("options.{p}"));
        }
        e
    })?;
    // -1: as long as the window allows; -2: fill the window (both: no limit of our own).
    let max_tokens = match number("num_predict")? {
        None => None,
        Some(n) if n < 0.0 => None,
        Some(n) => Some(n.min(f64::from(u32::MAX)) as u32),
    };
    let stop = match map.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::invalid_param("options.stop", "options.stop must hold strings")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "options.stop",
                format!("options.stop must be a list of strings, got {other}"),
            ))
        }
    };
    Ok(Options {
        sampling,
        max_tokens,
        stop: stop_list(stop, limits).map_err(|mut e| {
            e.param = Some("options.stop".into());
            e
        })?,
    })
}

/// A tool call of an assistant message: `{"function": {"name", "arguments": {…}}}` (an `id` when it has one).
fn past_tool_call(i: usize, j: usize, call: &Value) -> Result<crate::provider::ToolCall, ApiError> {
    let function = call.get("function").unwrap_or(call);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ApiError::invalid_param(
                format!("messages[{i}].tool_calls[{j}].function.name"),
                "a tool call needs a function name",
            )
        })?;
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("call_{i}_{j}"));
    let arguments = function.get("arguments").cloned().unwrap_or(Value::Null);
    Ok(past_call(id, name.to_string(), arguments))
}

/// The conversation: the system text and the messages.
fn messages(list: Vec<ChatMessage>) -> Result<(Option<String>, Vec<Message>), ApiError> {
    let mut system: Vec<String> = Vec::new();
    let mut out: Vec<Message> = Vec::new();
    // Calls not answered yet, oldest first: a result without an id answers the first of its tool's.
    let mut open: Vec<(String, String)> = Vec::new();
    for (i, m) in list.into_iter().enumerate() {
        if m.images.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].images"),
                "this server's models read text only",
            ));
        }
        match m.role.to_ascii_lowercase().as_str() {
            "system" => system.push(m.content),
            "user" => out.push(Message::User(UserMessage { content: m.content })),
            "assistant" => {
                let mut blocks = Vec::new();
                if let Some(t) = m.thinking.filter(|t| !t.is_empty()) {
                    blocks.push(ContentBlock::Thinking { thinking: t });
                }
                if !m.content.is_empty() {
                    blocks.push(ContentBlock::Text { text: m.content });
                }
                for (j, call) in m.tool_calls.unwrap_or_default().iter().enumerate() {
                    let call = past_tool_call(i, j, call)?;
                    open.push((call.id.clone(), call.name.clone()));
                    blocks.push(ContentBlock::ToolCall(call));
                }
                out.push(Message::Assistant(AssistantMessage { content: blocks }));
            }
            "tool" => {
                let by_id = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| open.iter().position(|(c, _)| c == id));
                let by_name = m
                    .tool_name
                    .as_ref()
                    .and_then(|n| open.iter().position(|(_, name)| name == n));
                let (tool_call_id, tool_name) =
                    match by_id.or(by_name).or((!open.is_empty()).then_some(0)) {
                        Some(k) => open.remove(k),
                        None => (
                            m.tool_call_id
                                .clone()
                                .unwrap_or_else(|| format!("call_{i}")),
                            m.tool_name.clone().unwrap_or_default(),
                        ),
                    };
                out.push(Message::ToolResult(ToolResultMessage {
                    tool_call_id,
                    tool_name,
                    content: m.content,
                    is_error: false,
                }));
            }
            other => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].role"),
                    format!("unknown role `{other}` (system, user, assistant, tool)"),
                ))
            }
        }
    }
    Ok(((!system.is_empty()).then(|| system.join("\n\n")), out))
}

/// `/api/chat`'s request as the provider's, for served model `model`.
pub fn chat_request(
    req: ChatRequest,
    model: String,
    limits: &RequestLimits,
) -> Result<CompletionRequest, ApiError> {
    limits.check_messages(req.messages.len())?;
    if let Some(tools) = &req.tools {
        limits.check_tools(tools)?;
    }
    let tools = req
        .tools
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            ToolSpec::from_openai(t)
                .map_err(|e| ApiError::invalid_param(format!("tools[{i}]"), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut merged = req.options.clone().unwrap_or_default();
    for (key, value) in [
        ("temperature", &req.temperature),
        ("top_p", &req.top_p),
        ("num_predict", &req.max_output_tokens),
    ] {
        if let Some(v) = value.as_ref().filter(|v| !v.is_null()) {
            merged.entry(key).or_insert_with(|| v.clone());
        }
    }
    let opts = options(Some(&merged), limits)?;
    let tool_choice = match &req.tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(v) => ToolChoice::from_openai(v)
            .map_err(|e| ApiError::invalid_param("tool_choice", e.to_string()))?,
    };
    let (system, messages) = messages(req.messages)?;
    let request = CompletionRequest {
        model,
        system,
        messages,
        tools,
        tool_choice,
        response_format: format(req.format.as_ref())?,
        sampling: opts.sampling,
        max_tokens: opts.max_tokens,
        stop: opts.stop,
        thinking: think(req.think.as_ref())?,
        keep_alive: keep_alive(req.keep_alive.as_ref())?,
        ..CompletionRequest::default()
    };
    check_constraint(&request)?;
    Ok(request)
}

/// `/api/generate`'s templated prompt (not `raw`) as a chat request: the system text and one user turn.
pub fn generate_request(
    req: &GenerateRequest,
    model: String,
    limits: &RequestLimits,
) -> Result<CompletionRequest, ApiError> {
    let opts = options(req.options.as_ref(), limits)?;
    let request = CompletionRequest {
        model,
        system: req.system.clone().filter(|s| !s.is_empty()),
        messages: vec![Message::user(req.prompt.clone().unwrap_or_default())],
        response_format: format(req.format.as_ref())?,
        sampling: opts.sampling,
        max_tokens: opts.max_tokens,
        stop: opts.stop,
        thinking: think(req.think.as_ref())?,
        keep_alive: keep_alive(req.keep_alive.as_ref())?,
        ..CompletionRequest::default()
    };
    check_constraint(&request)?;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_reads_numbers_and_go_durations() {
        let k = |v: Value| keep_alive(Some(&v)).unwrap();
        assert_eq!(k(json!(0)), Some(KeepAlive::Unload));
        assert_eq!(k(json!("0")), Some(KeepAlive::Unload));
        assert_eq!(k(json!(-1)), Some(KeepAlive::Forever));
        assert_eq!(k(json!("-1m")), Some(KeepAlive::Forever));
        assert_eq!(
            k(json!("1h30m")),
            Some(KeepAlive::For(std::time::Duration::from_secs(5400)))
        );
        assert_eq!(
            k(json!(90)),
            Some(KeepAlive::For(std::time::Duration::from_secs(90)))
        );
        assert_eq!(keep_alive(None).unwrap(), None);
        assert!(keep_alive(Some(&json!("5 minutes"))).is_err());
        assert!(keep_alive(Some(&json!([1]))).is_err());
    }

    #[test]
    fn messages_with_tool_calls_and_results_become_the_providers() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]},
                {"role": "tool", "content": "sunny", "tool_name": "get_weather"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "options": {"temperature": 0, "num_predict": 32, "stop": ["END"], "num_ctx": 4096, "seed": 7},
            "format": "json",
            "keep_alive": "10m"
        }))
        .unwrap();
        let r = chat_request(req, "m".into(), &RequestLimits::default()).unwrap();
        assert_eq!(r.system.as_deref(), Some("Be brief."));
        assert_eq!(r.max_tokens, Some(32));
        assert_eq!(r.stop, ["END"]);
        assert_eq!(r.sampling.temperature, Some(0.0));
        assert_eq!(r.sampling.seed, Some(7));
        assert_eq!(r.response_format, ResponseFormat::JsonObject);
        let Message::Assistant(a) = &r.messages[1] else {
            panic!("{:?}", r.messages)
        };
        let ContentBlock::ToolCall(call) = &a.content[0] else {
            panic!("{a:?}")
        };
        assert_eq!(call.arguments, json!({"city": "Tokyo"}));
        let Message::ToolResult(t) = &r.messages[2] else {
            panic!()
        };
        assert_eq!(
            (t.tool_call_id.as_str(), t.tool_name.as_str()),
            (call.id.as_str(), "get_weather")
        );
    }

    #[test]
    fn top_level_settings_of_the_ai_sdk_count_where_options_are_silent() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "temperature": 0.5, "top_p": 0.9, "max_output_tokens": 10, "tool_choice": "required",
            "options": {"top_p": 0.8}
        }))
        .unwrap();
        let r = chat_request(req, "m".into(), &RequestLimits::default()).unwrap();
        assert_eq!(r.sampling.temperature, Some(0.5));
        assert_eq!(r.sampling.top_p, Some(0.8));
        assert_eq!(r.max_tokens, Some(10));
        assert_eq!(r.tool_choice, ToolChoice::Required);
    }

    #[test]
    fn bad_fields_are_400s_naming_them() {
        let bad = |body: Value| {
            let req: ChatRequest = serde_json::from_value(body).unwrap();
            chat_request(req, "m".into(), &RequestLimits::default())
                .unwrap_err()
                .param
        };
        assert_eq!(
            bad(json!({"model": "m", "messages": [], "options": {"temperature": "hot"}}))
                .as_deref(),
            Some("options.temperature")
        );
        assert_eq!(
            bad(json!({"model": "m", "messages": [], "options": {"top_p": 7}})).as_deref(),
            Some("options.top_p")
        );
        assert_eq!(
            bad(json!({"model": "m", "messages": [], "format": 3})).as_deref(),
            Some("format")
        );
        assert_eq!(
            bad(json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]})).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            bad(json!({"model": "m", "messages": [], "think": "very"})).as_deref(),
            Some("think")
        );
    }
}
