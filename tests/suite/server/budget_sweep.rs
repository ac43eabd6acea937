//! No broken call reaches a client, whatever `max_tokens` cuts: a sweep of budgets (8…200) over Chat Completions
//! with `tool_choice: "required"` and parallel calls, `auto`, `response_format` `json_object` and `json_schema`, at
//! temperature 0 and at 1.0 over several seeds, on both real models, streamed and not. Every returned call's
//! arguments parse (and validate against the tool's schema unless the output was cut: `finish_reason: "length"`),
//! every JSON document parses, streamed deltas add up to the same message, and `finish_reason` is honest:
//! `length` exactly when the output did not end by itself.

use std::sync::Arc;

use agentd::schema::compile::{validator, violations};
use futures::future::join_all;
use serde_json::{json, Value};

use super::{client, TestServer};
use crate::suite::common;
use crate::suite::engine::constraint::three_tools;

fn openai_tools() -> Value {
    Value::Array(
        three_tools()
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect(),
    )
}

const SCHEMA: &str = r#"{"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "tags"], "additionalProperties": false}"#;

#[derive(Debug, Clone, Copy)]
enum Mode {
    Required,
    Auto,
    JsonObject,
    JsonSchema,
}

fn body(mode: Mode, max_tokens: u64, temperature: f64, seed: u64, stream: bool) -> Value {
    let mut b = json!({
        "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "stream": stream,
    });
    match mode {
        Mode::Required | Mode::Auto => {
            b["messages"] = json!([{"role": "user", "content":
                "What is the weather in Paris and in Tokyo? Also read notes.txt and add 2 and 40."}]);
            b["tools"] = openai_tools();
            b["parallel_tool_calls"] = json!(true);
            b["tool_choice"] = json!(match mode {
                Mode::Required => "required",
                _ => "auto",
            });
        }
        Mode::JsonObject => {
            b["messages"] = json!([{"role": "user", "content":
                "Describe three fictional people as a JSON object with their names, ages, cities and hobbies."}]);
            b["response_format"] = json!({"type": "json_object"});
        }
        Mode::JsonSchema => {
            b["messages"] =
                json!([{"role": "user", "content": "Invent a person with a long list of tags."}]);
            b["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": "person", "schema": serde_json::from_str::<Value>(SCHEMA).unwrap()}});
        }
    }
    b
}

/// The message and finish reason of a streamed response, assembled as an SDK does.
fn assemble_stream(events: &[Value]) -> (Value, String, Value) {
    let (mut content, mut finish, mut usage) = (String::new(), String::new(), Value::Null);
    let mut calls: Vec<(String, String)> = Vec::new();
    for ev in events {
        if !ev["usage"].is_null() {
            usage = ev["usage"].clone();
        }
        let Some(choice) = ev["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
        for c in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.resize(i + 1, (String::new(), String::new()));
            }
            if let Some(n) = c["function"]["name"].as_str() {
                calls[i].0.push_str(n);
            }
            if let Some(a) = c["function"]["arguments"].as_str() {
                calls[i].1.push_str(a);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    let tool_calls: Vec<Value> = calls
        .into_iter()
        .map(|(name, arguments)| json!({"function": {"name": name, "arguments": arguments}}))
        .collect();
    (
        json!({"content": content, "tool_calls": tool_calls}),
        finish,
        usage,
    )
}

async fn ask(url: &str, body: Value) -> (Value, String, Value) {
    let stream = body["stream"].as_bool().unwrap_or(false);
    let mut body = body;
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    let resp = client().post(url).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{body}");
    if stream {
        let events = super::sse(resp).await;
        return assemble_stream(&events);
    }
    let r: Value = resp.json().await.unwrap();
    let choice = &r["choices"][0];
    (
        choice["message"].clone(),
        choice["finish_reason"].as_str().unwrap_or("").to_string(),
        r["usage"].clone(),
    )
}

/// Checks one response: whether it was cut (`length`), or what is wrong with it.
fn check(
    mode: Mode,
    message: &Value,
    finish: &str,
    usage: &Value,
    max_tokens: u64,
) -> Result<bool, String> {
    let tools = three_tools();
    let completion = usage["completion_tokens"].as_u64().unwrap_or(u64::MAX);
    if completion > max_tokens {
        return Err(format!("{completion} tokens over {max_tokens}"));
    }
    let cut = finish == "length";
    if !matches!(finish, "stop" | "tool_calls" | "length") {
        return Err(format!("finish_reason {finish:?}"));
    }
    let calls = message["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match mode {
        Mode::Required | Mode::Auto => {
            if !cut && matches!(mode, Mode::Required) && calls.is_empty() {
                return Err(format!(
                    "`required` ended ({finish}) with no call: {message}"
                ));
            }
            if !calls.is_empty() && !cut && finish != "tool_calls" {
                return Err(format!("calls with finish_reason {finish:?}"));
            }
            for (i, call) in calls.iter().enumerate() {
                let name = call["function"]["name"].as_str().unwrap_or("");
                let text = call["function"]["arguments"].as_str().unwrap_or("");
                let args: Value = serde_json::from_str(text).map_err(|e| {
                    format!("call {i} ({name}) arguments {text:?} do not parse ({finish}): {e}")
                })?;
                let tool = tools
                    .iter()
                    .find(|t| t.name == name)
                    .ok_or_else(|| format!("call {i}: unknown tool {name:?}"))?;
                // The last call of a cut output may be one closed early as valid JSON; the others are whole.
                let last = i + 1 == calls.len();
                if !(cut && last) {
                    let bad = violations(&validator(&tool.parameters).unwrap(), &args);
                    if !bad.is_empty() {
                        return Err(format!(
                            "call {i} {name}({args}) invalid ({finish}): {bad:?}"
                        ));
                    }
                }
            }
        }
        Mode::JsonObject | Mode::JsonSchema => {
            if !calls.is_empty() {
                return Err(format!("calls under response_format: {message}"));
            }
            let text = message["content"].as_str().unwrap_or("");
            if cut && text.is_empty() {
                // Not started: no document of the schema fits in the budget.
                return Ok(cut);
            }
            let doc: Value = serde_json::from_str(text)
                .map_err(|e| format!("content {text:?} does not parse ({finish}): {e}"))?;
            if !doc.is_object() {
                return Err(format!("{doc} is not an object"));
            }
            if matches!(mode, Mode::JsonSchema) {
                // An early close fills what is required with the shortest values the grammar allows.
                let bad = violations(
                    &validator(&serde_json::from_str(SCHEMA).unwrap()).unwrap(),
                    &doc,
                );
                if !bad.is_empty() {
                    return Err(format!("{doc} invalid ({finish}): {bad:?}"));
                }
            }
        }
    }
    Ok(cut)
}

async fn sweep(server: &TestServer, model: &str, budgets: &[u64], runs: &[(f64, u64)]) {
    let url = Arc::new(server.url("/v1/chat/completions"));
    let id = super::served_model(server).await;
    let mut jobs = Vec::new();
    for &mode in &[
        Mode::Required,
        Mode::Auto,
        Mode::JsonObject,
        Mode::JsonSchema,
    ] {
        for &max_tokens in budgets {
            for (k, &(temperature, seed)) in runs.iter().enumerate() {
                // Half streamed, half not, alternating over the budgets.
                let stream = (k + max_tokens as usize).is_multiple_of(2);
                let url = url.clone();
                let mut request = body(mode, max_tokens, temperature, seed, stream);
                request["model"] = json!(id);
                let label = format!("{model} {mode:?} max_tokens {max_tokens} t={temperature} seed {seed} stream {stream}");
                jobs.push(async move {
                    let (message, finish, usage) = ask(&url, request).await;
                    check(mode, &message, &finish, &usage, max_tokens)
                        .map_err(|e| format!("{label}: {e}"))
                });
            }
        }
    }
    let n = jobs.len();
    let results = join_all(jobs).await;
    let cut = results.iter().filter(|r| matches!(r, Ok(true))).count();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    eprintln!(
        "{model}: {n} responses checked, {cut} of them cut by max_tokens (finish_reason length), {} broken",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {n} responses broken:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

const RUNS: &[(f64, u64)] = &[(0.0, 0), (1.0, 1), (1.0, 2), (1.0, 3)];

#[tokio::test]
async fn smollm2_budget_sweep_never_returns_a_broken_call() {
    let server = TestServer::local(Default::default()).await;
    let budgets = [8, 11, 16, 23, 32, 45, 64, 90, 128, 200];
    sweep(&server, "smollm2", &budgets, RUNS).await;
}

#[tokio::test]
async fn qwen_budget_sweep_never_returns_a_broken_call() {
    let engine = tokio::task::spawn_blocking(|| common::qwen_engine().clone())
        .await
        .unwrap();
    let provider = agentd::provider::LocalProvider::new(engine);
    let server = TestServer::start(agentd::server::AppState::new(
        Arc::new(provider),
        Default::default(),
    ))
    .await;
    let budgets = [8, 16, 32, 64, 128, 200];
    sweep(&server, "qwen2.5-coder", &budgets, &RUNS[..3]).await;
}
