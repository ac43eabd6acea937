//! `GET /metrics`: Prometheus text exposition under vLLM's metric names, so the dashboards and benchmark tools
//! written for `vllm serve` read agentd unchanged. Histograms (`vllm:time_to_first_token_seconds`,
//! `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`),
//! counters (`vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:request_success_total`) and the
//! admission gauges (`vllm:num_requests_running`, `vllm:num_requests_waiting`), each labelled `model_name`.
//!
//! A [`RequestTimer`] follows one request from arrival to its last token and records it when it finishes.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::provider::response_cache::CacheCounts;
use crate::provider::{EngineLoad, PrefixCacheCounts};

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
    data: Mutex<HistogramData>,
}

#[derive(Default)]
struct HistogramData {
    /// Per bucket (not cumulative); the last entry is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Self {
            name,
            help,
            bounds,
            data: Mutex::new(HistogramData {
                counts: vec![0; bounds.len() + 1],
                ..HistogramData::default()
            }),
        }
    }

    fn observe(&self, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        let i = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        let mut d = lock(&self.data);
        d.counts[i] += 1;
        d.sum += secs;
        d.count += 1;
    }

    fn render(&self, out: &mut String, labels: &str) {
        let d = lock(&self.data);
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        let mut cumulative = 0;
        for (i, &b) in self.bounds.iter().enumerate() {
            cumulative += d.counts[i];
            let _ = writeln!(
                out,
                "{}_bucket{{{labels},le=\"{b:?}\"}} {cumulative}",
                self.name
            );
        }
        cumulative += d.counts[self.bounds.len()];
        let _ = writeln!(
            out,
            "{}_bucket{{{labels},le=\"+Inf\"}} {cumulative}",
            self.name
        );
        let _ = writeln!(out, "{}_sum{{{labels}}} {:?}", self.name, d.sum);
        let _ = writeln!(out, "{}_count{{{labels}}} {}", self.name, d.count);
    }
}

/// How a finished request ended (the `finished_reason` label of `vllm:request_success_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Stop,
    Length,
    Abort,
    Error,
}

impl Finished {
    const ALL: [Finished; 4] = [
        Finished::Stop,
        Finished::Length,
        Finished::Abort,
        Finished::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            Finished::Stop => "stop",
            Finished::Length => "length",
            Finished::Abort => "abort",
            Finished::Error => "error",
        }
    }
}

/// The server's metrics registry.
pub struct Metrics {
    pub(crate) model: String,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    finished: [AtomicU64; 4],
}

impl Metrics {
    pub fn new(model: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            model: model.into(),
            ttft: Histogram::new(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            itl: Histogram::new(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                ITL_BUCKETS,
            ),
            e2e: Histogram::new(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_BUCKETS,
            ),
            queue: Histogram::new(
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_BUCKETS,
            ),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            finished: Default::default(),
        })
    }

    /// Starts timing a request that arrived now.
    pub fn timer(self: &Arc<Self>) -> RequestTimer {
        RequestTimer {
            metrics: self.clone(),
            arrived: Instant::now(),
            last_output: None,
            admitted: false,
            recorded: false,
        }
    }

    /// The text exposition, with the admission gauges as given.
    pub fn render(&self, running: usize, waiting: usize) -> String {
        let labels = format!("model_name=\"{}\"", escape_label(&self.model));
        let mut out = String::with_capacity(8 * 1024);
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        };
        gauge(
            &mut out,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            running,
        );
        gauge(
            &mut out,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            waiting,
        );
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        };
        counter(
            &mut out,
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            self.generation_tokens.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP vllm:request_success_total Count of successfully processed requests."
        );
        let _ = writeln!(out, "# TYPE vllm:request_success_total counter");
        for f in Finished::ALL {
            let _ = writeln!(
                out,
                "vllm:request_success_total{{{labels},finished_reason=\"{}\"}} {}",
                f.label(),
                self.finished[f as usize].load(Ordering::Relaxed)
            );
        }
        for h in [&self.ttft, &self.itl, &self.e2e, &self.queue] {
            h.render(&mut out, &labels);
        }
        out
    }
}

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

/// One request's timings. Record with [`finish`](Self::finish); a timer dropped unfinished after it was admitted
/// records an abort (a request refused before admission — bad input, a full queue — is not counted).
pub struct RequestTimer {
    metrics: Arc<Metrics>,
    arrived: Instant,
    last_output: Option<Instant>,
    admitted: bool,
    recorded: bool,
}

impl RequestTimer {
    /// The request got its slot after waiting `queued`.
    pub fn admitted(&mut self, queued: Duration) {
        self.admitted = true;
        self.metrics.queue.observe(queued.as_secs_f64());
    }

    /// Output went to the client now (the first call is the first token).
    pub fn output(&mut self) {
        let now = Instant::now();
        match self.last_output {
            None => self
                .metrics
                .ttft
                .observe(now.duration_since(self.arrived).as_secs_f64()),
            Some(prev) => self
                .metrics
                .itl
                .observe(now.duration_since(prev).as_secs_f64()),
        }
        self.last_output = Some(now);
    }

    /// Records the finished request with its token counts.
    pub fn finish(&mut self, finished: Finished, prompt_tokens: u64, generation_tokens: u64) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let m = &self.metrics;
        m.e2e.observe(self.arrived.elapsed().as_secs_f64());
        m.prompt_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
        m.generation_tokens
            .fetch_add(generation_tokens, Ordering::Relaxed);
        m.finished[finished as usize].fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for RequestTimer {
    fn drop(&mut self) {
        if self.admitted && !self.recorded {
            self.finish(Finished::Abort, 0, 0);
        }
    }
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // With a batching engine behind it, "running" is its batch and "waiting" counts both queues: the server's
    // (requests not yet admitted) and the engine's (admitted, waiting for a batch slot or KV blocks).
    let load = state.provider.engine_load();
    let (running, waiting) = match load {
        Some(l) => (
            l.running as usize,
            state.admission.waiting() + l.waiting as usize,
        ),
        None => (state.admission.running(), state.admission.waiting()),
    };
    let mut body = state.metrics.render(running, waiting);
    if let Some(load) = load {
        render_engine_load(&mut body, &state.metrics.model, load);
    }
    if let Some(counts) = state.provider.prefix_cache() {
        render_prefix_cache(&mut body, &state.metrics.model, counts);
    }
    if let Some(stats) = &state.cache {
        render_response_cache(&mut body, &state.metrics.model, stats.snapshot());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_names_with_cumulative_buckets() {
        let m = Metrics::new("m\"1");
        let mut t = m.timer();
        t.admitted(Duration::from_millis(5));
        t.output();
        t.output();
        t.finish(Finished::Stop, 10, 2);
        let text = m.render(1, 3);
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\\\"1\"} 1"));
        assert!(text.contains("vllm:num_requests_waiting{model_name=\"m\\\"1\"} 3"));
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"m\\\"1\"} 10"));
        assert!(text.contains("vllm:generation_tokens_total{model_name=\"m\\\"1\"} 2"));
        assert!(text.contains(
            "vllm:request_success_total{model_name=\"m\\\"1\",finished_reason=\"stop\"} 1"
        ));
        assert!(text.contains("vllm:time_to_first_token_seconds_count{model_name=\"m\\\"1\"} 1"));
        assert!(text.contains("vllm:inter_token_latency_seconds_count{model_name=\"m\\\"1\"} 1"));
        assert!(text.contains(
            "vllm:request_queue_time_seconds_bucket{model_name=\"m\\\"1\",le=\"0.3\"} 1"
        ));
        assert!(text.contains(
            "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\\\"1\",le=\"+Inf\"} 1"
        ));
        // A timer dropped unfinished counts as an abort, once, if it was admitted.
        drop(m.timer());
        m.timer().admitted(Duration::ZERO);
        assert!(m.render(0, 0).contains("finished_reason=\"abort\"} 1"));
    }
}
