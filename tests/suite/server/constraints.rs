//! Every constraint on every door, on both real models, over a `max_tokens` sweep: vLLM's `structured_outputs`
//! (`regex`, `choice`, `grammar` as GBNF and as Lark, `json`) and older `guided_*` fields and llama.cpp's `grammar`
//! (GBNF) and `json_schema`, on Chat Completions and on `/v1/completions`, streamed and not, at temperatures 0
//! and 1. Every reply is checked by an oracle of its own (the `regex` crate, a parser, the JSON schema): whole when
//! the model ended it, and whole too when the budget cut it (the engine closes the constrained text in the last
//! tokens it has) — or empty when nothing the constraint accepts fits in the budget. A constraint that does not
//! compile is a 400 naming the field.

use std::sync::Arc;

use agentd::schema::compile::{validator, violations};
use futures::future::join_all;
use serde_json::{json, Value};

use super::{client, TestServer};
use crate::suite::common;

const PHONE: &str = r"\(\d{3}\) \d{3}-\d{4}";
const WORDS_GBNF: &str =
    "# a comma-separated list of lowercase words\nroot ::= word (\", \" word)*\nword ::= [a-z]+\n";
const WORDS_RE: &str = r"^[a-z]+(, [a-z]+)*$";
const ANSWER_LARK: &str =
    "start: verdict \" because \" reason\nverdict: \"yes\" | \"no\"\nreason: /[a-z ]{1,40}/\n";
const ANSWER_RE: &str = r"^(yes|no) because [a-z ]{1,40}$";
const SCHEMA: &str = r#"{"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"]}"#;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Regex,
    Choice,
    Gbnf,
    Lark,
    Json,
}

/// The request's constraint field, in one of the names each kind has.
fn field(kind: Kind, variant: usize) -> (String, Value) {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let (name, value) = match (kind, variant % 3) {
        (Kind::Regex, 0) => ("structured_outputs", json!({"regex": PHONE})),
        (Kind::Regex, _) => ("guided_regex", json!(PHONE)),
        (Kind::Choice, 0) => (
            "structured_outputs",
            json!({"choice": ["red", "green", "blue"]}),
        ),
        (Kind::Choice, _) => ("guided_choice", json!(["red", "green", "blue"])),
        (Kind::Gbnf, 0) => ("grammar", json!(WORDS_GBNF)),
        (Kind::Gbnf, 1) => ("structured_outputs", json!({"grammar": WORDS_GBNF})),
        (Kind::Gbnf, _) => ("guided_grammar", json!(WORDS_GBNF)),
        (Kind::Lark, 0) => ("guided_grammar", json!(ANSWER_LARK)),
        (Kind::Lark, _) => ("structured_outputs", json!({"grammar": ANSWER_LARK})),
        (Kind::Json, 0) => ("structured_outputs", json!({"json": schema})),
        (Kind::Json, 1) => ("guided_json", schema),
        (Kind::Json, _) => ("json_schema", schema),
    };
    (name.to_string(), value)
}

fn prompt(kind: Kind) -> &'static str {
    match kind {
        Kind::Regex => "Give me a phone number for the office.",
        Kind::Choice => "Which color is the sky? Answer with one word.",
        Kind::Gbnf => "List some fruits.",
        Kind::Lark => "Is water wet? Say yes or no and why.",
        Kind::Json => "Name a big city and its population as JSON.",
    }
}

/// Whether `text` is a whole reply of `kind` (`Err` says what is wrong).
fn check(kind: Kind, text: &str) -> Result<(), String> {
    let re = |pattern: &str| regex::Regex::new(pattern).unwrap().is_match(text);
    let ok = match kind {
        Kind::Regex => re(&format!("^{PHONE}$")),
        Kind::Choice => ["red", "green", "blue"].contains(&text),
        Kind::Gbnf => re(WORDS_RE),
        Kind::Lark => re(ANSWER_RE),
        Kind::Json => {
            let doc: Value = serde_json::from_str(text).map_err(|e| format!("{text:?}: {e}"))?;
            let bad = violations(
                &validator(&serde_json::from_str(SCHEMA).unwrap()).unwrap(),
                &doc,
            );
            if !bad.is_empty() {
                return Err(format!("{doc} invalid: {bad:?}"));
            }
            // No key the schema does not declare (as llama.cpp and xgrammar generate).
            doc.as_object().is_some_and(|o| o.len() == 2)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{text:?} is not a whole {kind:?} reply"))
    }
}

/// How a checked reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The model ended it.
    Ended,
    /// `max_tokens` cut it and the engine closed it inside the constraint.
    Closed,
    /// Nothing the constraint accepts fits in the budget: empty, `length`.
    NotStarted,
}

/// One request: the reply's text, `finish_reason` and completion tokens.
async fn ask(url: &str, body: Value, stream: bool) -> Result<(String, String, u64), String> {
    let resp = client()
        .post(url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if !stream {
        let v: Value = resp.json().await.map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{status}: {v}"));
        }
        let c = &v["choices"][0];
        let text = c["message"]["content"]
            .as_str()
            .or(c["text"].as_str())
            .unwrap_or("");
        let n = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        return Ok((
            text.to_string(),
            c["finish_reason"].as_str().unwrap_or("").into(),
            n,
        ));
    }
    if status != 200 {
        return Err(format!(
            "{status}: {}",
            resp.text().await.unwrap_or_default()
        ));
    }
    let (mut text, mut finish, mut n) = (String::new(), String::new(), 0);
    for ev in super::sse(resp).await {
        if let Some(u) = ev["usage"]["completion_tokens"].as_u64() {
            n = u;
        }
        let Some(c) = ev["choices"].get(0) else {
            continue;
        };
        for t in [c["delta"]["content"].as_str(), c["text"].as_str()]
            .into_iter()
            .flatten()
        {
            text.push_str(t);
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    Ok((text, finish, n))
}

async fn sweep(server: &TestServer, budgets: &[u64]) {
    let model = super::served_model(server).await;
    let chat = Arc::new(server.url("/v1/chat/completions"));
    let completions = Arc::new(server.url("/v1/completions"));
    let mut jobs = Vec::new();
    let kinds = [
        Kind::Regex,
        Kind::Choice,
        Kind::Gbnf,
        Kind::Lark,
        Kind::Json,
    ];
    for (k, &kind) in kinds.iter().enumerate() {
        for (b, &max_tokens) in budgets.iter().enumerate() {
            for (t, temperature) in [0.0, 1.0].into_iter().enumerate() {
                let variant = k + b + t;
                let on_chat = (b + t) % 2 == 0;
                let stream = (k + b) % 2 == 1;
                let (name, value) = field(kind, variant);
                let mut body = json!({"model": model, "max_tokens": max_tokens, "temperature": temperature,
                                      "seed": variant, "stream": stream});
                if stream {
                    body["stream_options"] = json!({"include_usage": true});
                }
                body[&name] = value;
                let url = if on_chat {
                    body["messages"] = json!([{"role": "user", "content": prompt(kind)}]);
                    chat.clone()
                } else {
                    body["prompt"] = json!(format!("Q: {}\nA: ", prompt(kind)));
                    completions.clone()
                };
                let label = format!(
                    "{kind:?} via {name} on {} max_tokens {max_tokens} t={temperature} stream {stream}",
                    if on_chat { "chat" } else { "completions" }
                );
                jobs.push(async move {
                    let (text, finish, n) = ask(&url, body, stream)
                        .await
                        .map_err(|e| format!("{label}: {e}"))?;
                    if n > max_tokens {
                        return Err(format!("{label}: {n} tokens over {max_tokens}"));
                    }
                    let cut = finish == "length";
                    if !cut && finish != "stop" {
                        return Err(format!("{label}: finish_reason {finish:?}"));
                    }
                    if cut && text.is_empty() {
                        return Ok(Outcome::NotStarted);
                    }
                    check(kind, &text).map_err(|e| format!("{label} ({finish}): {e}"))?;
                    Ok(if cut { Outcome::Closed } else { Outcome::Ended })
                });
            }
        }
    }
    let n = jobs.len();
    let results = join_all(jobs).await;
    let count = |o: Outcome| {
        results
            .iter()
            .filter(|r| r.as_ref().ok() == Some(&o))
            .count()
    };
    let (closed, empty) = (count(Outcome::Closed), count(Outcome::NotStarted));
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    eprintln!(
        "{model}: {n} constrained replies: {} ended by the model, {closed} cut by max_tokens and closed, \
         {empty} not started (nothing fits), {} broken",
        count(Outcome::Ended),
        failures.len()
    );
    // The sweep reaches the interesting case: replies cut mid-way and closed inside the constraint.
    assert!(
        closed > 0 || !failures.is_empty(),
        "no reply was cut and closed"
    );
    assert!(
        failures.is_empty(),
        "{} of {n} broken:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn smollm2_every_constraint_holds_over_a_budget_sweep() {
    let server = TestServer::local(Default::default()).await;
    sweep(&server, &[1, 2, 4, 7, 12, 20, 40]).await;
}

#[tokio::test]
async fn qwen_every_constraint_holds_over_a_budget_sweep() {
    let engine = tokio::task::spawn_blocking(|| common::qwen_engine().clone())
        .await
        .unwrap();
    let provider = agentd::provider::LocalProvider::new(engine);
    let server = TestServer::start(agentd::server::AppState::new(
        Arc::new(provider),
        Default::default(),
    ))
    .await;
    sweep(&server, &[1, 3, 8, 16, 32]).await;
}

#[tokio::test]
async fn constraints_that_do_not_compile_are_400s_naming_the_field() {
    let server = TestServer::local(Default::default()).await;
    let model = super::served_model(&server).await;
    for (door, name, value, param) in [
        (
            "/v1/chat/completions",
            "structured_outputs",
            json!({"regex": "(unclosed"}),
            "structured_outputs.regex",
        ),
        (
            "/v1/chat/completions",
            "grammar",
            json!("root ::= <[1234]>"),
            "grammar",
        ),
        (
            "/v1/chat/completions",
            "grammar",
            json!("root ::= missing"),
            "grammar",
        ),
        (
            "/v1/completions",
            "guided_grammar",
            json!("start: nowhere"),
            "guided_grammar",
        ),
        (
            "/v1/completions",
            "guided_choice",
            json!([]),
            "guided_choice",
        ),
        (
            "/v1/completions",
            "json_schema",
            json!({"type": "strin"}),
            "json_schema",
        ),
        (
            "/v1/chat/completions",
            "guided_json",
            json!("{not json"),
            "guided_json",
        ),
    ] {
        let mut body = json!({"model": model, "max_tokens": 4});
        body[name] = value;
        if door.contains("chat") {
            body["messages"] = json!([{"role": "user", "content": "hi"}]);
        } else {
            body["prompt"] = json!("hi");
        }
        let (status, v) = super::post(&server.url(door), &body).await;
        assert_eq!(status, 400, "{door} {name}: {v}");
        assert_eq!(v["error"]["param"], json!(param), "{door} {name}: {v}");
    }
    // With callable tools a whole-reply constraint is refused; with tool_choice none it holds.
    let tools =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let base = json!({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                      "tools": tools, "guided_choice": ["a", "b"]});
    let (status, v) = super::post(&server.url("/v1/chat/completions"), &base).await;
    assert_eq!(
        (status, v["error"]["param"].clone()),
        (400, json!("guided_choice")),
        "{v}"
    );
    let mut none = base.clone();
    none["tool_choice"] = json!("none");
    let (status, v) = super::post(&server.url("/v1/chat/completions"), &none).await;
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
    assert!(
        text == "a" || text == "b" || v["choices"][0]["finish_reason"] == "length",
        "{v}"
    );
}
