//! `GET /metrics`: Prometheus text exposition under vLLM's metric names, so the dashboards and benchmark tools
//! written for `vllm serve` read agentd unchanged: each model's request series ([`series`]: latency histograms,
//! token and request counters), the admission gauges (`vllm:num_requests_running`, `vllm:num_requests_waiting`),
//! the engine's KV-cache, preemption and speculative-decoding figures, the prefix and response caches — every
//! series labelled `model_name`.

mod series;

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::provider::response_cache::CacheCounts;
use crate::provider::{EngineLoad, PrefixCacheCounts};
pub use series::{Finished, Metrics, RequestTimer};

/// vLLM's KV-cache gauge (the fraction of blocks in use) and its preemption counter.
fn render_engine_load(out: &mut String, model: &str, load: EngineLoad) {
    let labels = format!("model_name=\"{}\"", escape_label(model));
    let _ = writeln!(
        out,
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage."
    );
    let _ = writeln!(out, "# TYPE vllm:kv_cache_usage_perc gauge");
    let _ = writeln!(
        out,
        "vllm:kv_cache_usage_perc{{{labels}}} {}",
        load.kv_cache_usage
    );
    render_counters(
        out,
        model,
        &[(
            "vllm:num_preemptions_total",
            "Cumulative number of preemptions from the engine.",
            load.preemptions,
        )],
    );
    let spec = load.spec;
    render_counters(
        out,
        model,
        &[
            (
                "vllm:spec_decode_num_drafts_total",
                "Number of spec decoding drafts.",
                spec.drafts,
            ),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "Number of draft tokens.",
                spec.draft_tokens,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "Number of accepted tokens.",
                spec.accepted_tokens,
            ),
        ],
    );
    // Per draft position, up to the last position that ever accepted a token (at least the first).
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    let _ = writeln!(out, "# HELP {name} Accepted tokens per draft position.");
    let _ = writeln!(out, "# TYPE {name} counter");
    let used = spec
        .accepted_per_pos
        .iter()
        .rposition(|&n| n > 0)
        .map_or(1, |i| i + 1);
    for (pos, n) in spec.accepted_per_pos[..used].iter().enumerate() {
        let _ = writeln!(
            out,
            "{name}{{model_name=\"{}\",position=\"{pos}\"}} {n}",
            escape_label(model)
        );
    }
}

/// vLLM's prefix-cache counters (in tokens): prompt tokens looked up and tokens whose KV state was reused.
fn render_prefix_cache(out: &mut String, model: &str, counts: PrefixCacheCounts) {
    render_counters(
        out,
        model,
        &[
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                counts.queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                counts.hits,
            ),
        ],
    );
}

/// The response cache's counters (agentd's own; vLLM has no response cache).
fn render_response_cache(out: &mut String, model: &str, counts: CacheCounts) {
    render_counters(
        out,
        model,
        &[
            (
                "agentd:response_cache_hits_total",
                "Completions answered from the response cache.",
                counts.hits,
            ),
            (
                "agentd:response_cache_misses_total",
                "Cacheable completions not found in the response cache.",
                counts.misses,
            ),
            (
                "agentd:response_cache_bypassed_total",
                "Completions not cacheable (temperature not 0).",
                counts.bypassed,
            ),
            (
                "agentd:response_cache_stores_total",
                "Completions stored in the response cache.",
                counts.stores,
            ),
            (
                "agentd:response_cache_errors_total",
                "Response cache failures (the provider answered instead).",
                counts.errors,
            ),
        ],
    );
}

/// Counters with HELP and TYPE lines, labelled with the model.
fn render_counters(out: &mut String, model: &str, counters: &[(&str, &str, u64)]) {
    let labels = format!("model_name=\"{}\"", escape_label(model));
    for (name, help, v) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses((status = 200, description = "Prometheus text (vLLM's metric names)", content_type = "text/plain",
               body = String)))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // With a batching engine behind it, "running" is its batch and "waiting" counts both queues: the server's
    // (requests not yet admitted) and the engine's (admitted, waiting for a batch slot or KV blocks).
    let load = state.provider.engine_load();
    let (running, waiting) = match &load {
        Some(l) => (
            l.running as usize,
            state.admission.waiting() + l.waiting as usize,
        ),
        None => (state.admission.running(), state.admission.waiting()),
    };
    let model = state.metrics.default_model.clone();
    let mut body = String::with_capacity(16 * 1024);
    for (name, help, v) in [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            running,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            waiting,
        ),
    ] {
        let _ = writeln!(body, "# HELP {name} {help}");
        let _ = writeln!(body, "# TYPE {name} gauge");
        let _ = writeln!(
            body,
            "{name}{{model_name=\"{}\"}} {v}",
            escape_label(&model)
        );
    }
    state.metrics.render_series(&mut body);
    if let Some(load) = load {
        render_engine_load(&mut body, &model, load);
    }
    if let Some(counts) = state.provider.prefix_cache() {
        render_prefix_cache(&mut body, &model, counts);
    }
    if let Some(stats) = &state.cache {
        render_response_cache(&mut body, &model, stats.snapshot());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}
