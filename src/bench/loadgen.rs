//! A loopback load generator for the server (the client side of `agentd bench load` and of the load test):
//! many concurrent streaming chat clients, some of which hang up after their first token. Every finished
//! response is checked for the stream's shape (role chunk first, one id, exactly one `finish_reason`, the usage
//! chunk, `[DONE]` last); timings give throughput and time-to-first-token percentiles. The event stream is read
//! with the remote provider's [`SseParser`], so the bench frames SSE exactly as agentd's own client does.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};

use super::stats::Distribution;
use crate::provider::remote::sse::{SseEvent, SseParser};

/// What load to send.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The server root (`http://127.0.0.1:8080`).
    pub root: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Requests each client sends, one after the other.
    pub requests_per_client: usize,
    pub max_tokens: u32,
    /// Every n-th request (counting from 1) disconnects after its first content chunk; 0: none do.
    pub disconnect_every: usize,
    /// Give up on a request after this long.
    pub timeout: Duration,
    /// Ask for replies of exactly `max_tokens` (`ignore_eos`, which vLLM and llama.cpp's server accept too), so
    /// throughput compares equal work.
    pub ignore_eos: bool,
}

/// How one request went.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub client: usize,
    /// Hung up on purpose after the first token.
    pub disconnected: bool,
    /// Seconds to the first content chunk.
    pub ttft: Option<f64>,
    pub e2e: f64,
    pub completion_tokens: u64,
    pub prompt_tokens: u64,
    /// What was wrong with the response (status, malformed stream), if anything.
    pub error: Option<String>,
}

impl Outcome {
    /// Nothing measured yet for `client`.
    fn new(client: usize) -> Self {
        Self {
            client,
            disconnected: false,
            ttft: None,
            e2e: 0.0,
            completion_tokens: 0,
            prompt_tokens: 0,
            error: None,
        }
    }
}

/// The outcomes of a run and its wall time.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub outcomes: Vec<Outcome>,
    pub wall_secs: f64,
}

/// Percentiles (as [`super::stats`] defines them; NaN when there is no value) and rates of a report.
#[derive(Debug, Clone, Serialize)]
pub struct LoadSummary {
    pub requests: usize,
    pub completed: usize,
    pub disconnected: usize,
    pub failed: usize,
    pub wall_secs: f64,
    pub requests_per_sec: f64,
    pub output_tokens_per_sec: f64,
    pub ttft_p50: f64,
    pub ttft_p99: f64,
    pub e2e_p50: f64,
    pub e2e_p99: f64,
}

impl LoadReport {
    pub fn failures(&self) -> Vec<&Outcome> {
        self.outcomes.iter().filter(|o| o.error.is_some()).collect()
    }

    pub fn summary(&self) -> LoadSummary {
        let done: Vec<&Outcome> = self
            .outcomes
            .iter()
            .filter(|o| o.error.is_none() && !o.disconnected)
            .collect();
        let ttft: Vec<f64> = self.outcomes.iter().filter_map(|o| o.ttft).collect();
        let ttft = Distribution::of(&ttft);
        let e2e: Vec<f64> = done.iter().map(|o| o.e2e).collect();
        let e2e = Distribution::of(&e2e);
        let tokens: u64 = done.iter().map(|o| o.completion_tokens).sum();
        LoadSummary {
            requests: self.outcomes.len(),
            completed: done.len(),
            disconnected: self.outcomes.iter().filter(|o| o.disconnected).count(),
            failed: self.failures().len(),
            wall_secs: self.wall_secs,
            requests_per_sec: done.len() as f64 / self.wall_secs.max(1e-9),
            output_tokens_per_sec: tokens as f64 / self.wall_secs.max(1e-9),
            ttft_p50: ttft.map_or(f64::NAN, |d| d.p50),
            ttft_p99: ttft.map_or(f64::NAN, |d| d.p99),
            e2e_p50: e2e.map_or(f64::NAN, |d| d.p50),
            e2e_p99: e2e.map_or(f64::NAN, |d| d.p99),
        }
    }
}

/// Runs the load and waits for every client.
pub async fn run(opts: LoadOptions) -> LoadReport {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(opts.clients)
        .build()
        .unwrap_or_default();
    let started = Instant::now();
    let tasks: Vec<_> = (0..opts.clients)
        .map(|c| {
            let client = client.clone();
            let opts = opts.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for r in 0..opts.requests_per_client {
                    let n = c * opts.requests_per_client + r + 1;
                    let disconnect =
                        opts.disconnect_every > 0 && n.is_multiple_of(opts.disconnect_every);
                    let fut = one(&client, &opts, c, n, disconnect);
                    let outcome = match tokio::time::timeout(opts.timeout, fut).await {
                        Ok(o) => o,
                        Err(_) => Outcome {
                            client: c,
                            disconnected: false,
                            ttft: None,
                            e2e: opts.timeout.as_secs_f64(),
                            completion_tokens: 0,
                            prompt_tokens: 0,
                            error: Some(format!("no complete answer within {:?}", opts.timeout)),
                        },
                    };
                    out.push(outcome);
                }
                out
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        match t.await {
            Ok(o) => outcomes.extend(o),
            Err(e) => outcomes.push(Outcome {
                client: usize::MAX,
                disconnected: false,
                ttft: None,
                e2e: 0.0,
                completion_tokens: 0,
                prompt_tokens: 0,
                error: Some(format!("client task failed: {e}")),
            }),
        }
    }
    LoadReport {
        outcomes,
        wall_secs: started.elapsed().as_secs_f64(),
    }
}

/// One streamed request.
async fn one(
    client: &reqwest::Client,
    opts: &LoadOptions,
    c: usize,
    n: usize,
    disconnect: bool,
) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome::new(c);
    let body = json!({
        "model": opts.model,
        "messages": [{"role": "user", "content": format!("Request {n}: tell me something about the number {n}.")}],
        "max_tokens": opts.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut body = body;
    if opts.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    let mut req = client
        .post(format!("{}/v1/chat/completions", opts.root))
        .json(&body);
    if let Some(k) = &opts.api_key {
        req = req.bearer_auth(k);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            outcome.error = Some(format!("request failed: {e}"));
            return outcome;
        }
    };
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        outcome.error = Some(format!("HTTP {status}: {text}"));
        outcome.e2e = started.elapsed().as_secs_f64();
        return outcome;
    }
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::new();
    let mut events: Vec<Value> = Vec::new();
    let mut ended = false;
    while !ended {
        let batch = match body.next().await {
            Some(Ok(chunk)) => parser.push(&chunk),
            Some(Err(_)) => {
                outcome.error = Some("the stream broke off".into());
                break;
            }
            None => {
                ended = true;
                parser.finish()
            }
        };
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                outcome.error = Some(format!("a malformed event stream: {e}"));
                break;
            }
        };
        match take_events(batch, &mut events, &mut outcome, started, disconnect) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                outcome.error = Some(e);
                break;
            }
        }
    }
    drop(body);
    outcome.e2e = started.elapsed().as_secs_f64();
    if outcome.error.is_none() && !outcome.disconnected {
        match check_stream(&events) {
            Ok((prompt, completion)) => {
                outcome.prompt_tokens = prompt;
                outcome.completion_tokens = completion;
            }
            Err(e) => outcome.error = Some(e),
        }
    }
    outcome
}

/// Records the `data` payloads of `batch` (`[DONE]` as the JSON string `"[DONE]"`), stamping the first content
/// chunk. `Ok(true)`: this request hangs up now (its first token arrived and it is one that disconnects).
fn take_events(
    batch: Vec<SseEvent>,
    events: &mut Vec<Value>,
    outcome: &mut Outcome,
    started: Instant,
    disconnect: bool,
) -> Result<bool, String> {
    for SseEvent { data, .. } in batch {
        let ev: Value = if data == "[DONE]" {
            Value::String(data)
        } else {
            serde_json::from_str(&data)
                .map_err(|e| format!("an event is not JSON ({e}): {data}"))?
        };
        let content = ev["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|s| !s.is_empty());
        if content && outcome.ttft.is_none() {
            outcome.ttft = Some(started.elapsed().as_secs_f64());
            if disconnect {
                outcome.disconnected = true;
                return Ok(true);
            }
        }
        events.push(ev);
    }
    Ok(false)
}

/// Checks a whole streamed chat answer; returns its usage (prompt, completion).
pub fn check_stream(events: &[Value]) -> Result<(u64, u64), String> {
    let fail = |m: &str| Err(format!("{m}: {}", Value::Array(events.to_vec())));
    if events.last() != Some(&Value::String("[DONE]".into())) {
        return fail("the stream does not end with [DONE]");
    }
    let chunks = &events[..events.len() - 1];
    let Some(first) = chunks.first() else {
        return fail("no chunks");
    };
    if first["choices"][0]["delta"]["role"] != "assistant" {
        return fail("the first chunk has no assistant role");
    }
    if chunks.iter().any(|c| c.get("error").is_some()) {
        return fail("an error event");
    }
    if chunks.iter().any(|c| c["id"] != first["id"]) {
        return fail("chunk ids differ");
    }
    let finishes = chunks
        .iter()
        .filter(|c| {
            c["choices"]
                .get(0)
                .is_some_and(|ch| !ch["finish_reason"].is_null())
        })
        .count();
    if finishes != 1 {
        return fail("not exactly one finish_reason");
    }
    let Some(last) = chunks.last() else {
        return fail("no chunks");
    };
    if last["choices"] != json!([]) {
        return fail("the last chunk is not the usage chunk");
    }
    let usage = &last["usage"];
    let (p, c, t) = (
        usage["prompt_tokens"].as_u64(),
        usage["completion_tokens"].as_u64(),
        usage["total_tokens"].as_u64(),
    );
    match (p, c, t) {
        (Some(p), Some(c), Some(t)) if p + c == t && p > 0 => Ok((p, c)),
        _ => fail("inconsistent usage"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes go through the provider's SSE parser: CRLF framing and keep-alive comments are fine, and the
    /// first content chunk is stamped.
    #[test]
    fn reads_events_with_the_provider_parser() {
        let mut parser = SseParser::new();
        let mut batch = parser
            .push(b": keep-alive\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\ndata: [DO")
            .unwrap();
        batch.extend(parser.push(b"NE]").unwrap());
        batch.extend(parser.finish().unwrap());
        let mut outcome = Outcome::new(0);
        let mut events = Vec::new();
        let hang_up = take_events(batch, &mut events, &mut outcome, Instant::now(), false);
        assert_eq!(hang_up, Ok(false));
        assert_eq!(events.len(), 2);
        assert_eq!(events[1], json!("[DONE]"));
        assert!(outcome.ttft.is_some());
    }

    #[test]
    fn checks_the_stream_shape() {
        let role = json!({"id": "a", "choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
        let fin = json!({"id": "a", "choices": [{"delta": {}, "finish_reason": "stop"}]});
        let usage = json!({"id": "a", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}});
        let done = json!("[DONE]");
        assert_eq!(
            check_stream(&[role.clone(), fin.clone(), usage.clone(), done.clone()]),
            Ok((3, 1))
        );
        assert!(check_stream(&[role.clone(), usage.clone(), done.clone()]).is_err());
        assert!(check_stream(&[role, fin, usage]).is_err());
    }
}
