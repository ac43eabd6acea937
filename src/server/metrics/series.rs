//! The request metrics of each served model (vLLM's names, each labelled `model_name`): latency histograms —
//! time to first token, inter-token latency, end to end, queue time, and the engine's prefill, decode and
//! inference (prefill + decode) time of each request — token counters and finished-request counters. A
//! [`RequestTimer`] follows one request and records it into its model's series.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::escape_label;
use crate::provider::Timings;

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

/// A histogram's family: its name, help and buckets.
struct Family {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
}

const FAMILIES: [Family; 7] = [
    Family {
        name: "vllm:time_to_first_token_seconds",
        help: "Histogram of time to first token in seconds.",
        bounds: TTFT_BUCKETS,
    },
    Family {
        name: "vllm:inter_token_latency_seconds",
        help: "Histogram of inter-token latency in seconds.",
        bounds: ITL_BUCKETS,
    },
    Family {
        name: "vllm:e2e_request_latency_seconds",
        help: "Histogram of e2e request latency in seconds.",
        bounds: REQUEST_BUCKETS,
    },
    Family {
        name: "vllm:request_queue_time_seconds",
        help: "Histogram of time spent in WAITING phase for request.",
        bounds: REQUEST_BUCKETS,
    },
    Family {
        name: "vllm:request_prefill_time_seconds",
        help: "Histogram of time spent in PREFILL phase for request.",
        bounds: REQUEST_BUCKETS,
    },
    Family {
        name: "vllm:request_decode_time_seconds",
        help: "Histogram of time spent in DECODE phase for request.",
        bounds: REQUEST_BUCKETS,
    },
    Family {
        name: "vllm:request_inference_time_seconds",
        help: "Histogram of time spent in RUNNING phase for request.",
        bounds: REQUEST_BUCKETS,
    },
];

/// Which histogram of a series.
#[derive(Clone, Copy)]
enum Hist {
    Ttft,
    Itl,
    E2e,
    Queue,
    Prefill,
    Decode,
    Inference,
}

#[derive(Default)]
struct HistogramData {
    /// Per bucket (not cumulative); the last entry is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
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

/// One model's request metrics.
struct Series {
    histograms: [Mutex<HistogramData>; 7],
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    finished: [AtomicU64; 4],
}

impl Series {
    fn new() -> Self {
        Self {
            histograms: std::array::from_fn(|i| {
                Mutex::new(HistogramData {
                    counts: vec![0; FAMILIES[i].bounds.len() + 1],
                    ..HistogramData::default()
                })
            }),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            finished: Default::default(),
        }
    }

    fn observe(&self, hist: Hist, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        let bounds = FAMILIES[hist as usize].bounds;
        let i = bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(bounds.len());
        let mut d = lock(&self.histograms[hist as usize]);
        d.counts[i] += 1;
        d.sum += secs;
        d.count += 1;
    }
}

/// The server's request metrics, a series per model (made on its first request; the default model's always).
pub struct Metrics {
    /// The model requests count under when they name none, and the admission gauges' label.
    pub(crate) default_model: String,
    series: Mutex<BTreeMap<String, Arc<Series>>>,
}

impl Metrics {
    pub fn new(default_model: impl Into<String>) -> Arc<Self> {
        let default_model = default_model.into();
        let mut series = BTreeMap::new();
        series.insert(default_model.clone(), Arc::new(Series::new()));
        Arc::new(Self {
            default_model,
            series: Mutex::new(series),
        })
    }

    fn series(&self, model: &str) -> Arc<Series> {
        let model = if model.is_empty() {
            &self.default_model
        } else {
            model
        };
        lock(&self.series)
            .entry(model.to_string())
            .or_insert_with(|| Arc::new(Series::new()))
            .clone()
    }

    /// Starts timing a request that arrived now (counted under the default model until
    /// [`RequestTimer::model`] names another).
    pub fn timer(self: &Arc<Self>) -> RequestTimer {
        RequestTimer {
            metrics: self.clone(),
            series: self.series(""),
            arrived: Instant::now(),
            last_output: None,
            admitted: false,
            recorded: false,
        }
    }

    /// The counters and histograms of every model, each family's HELP and TYPE once.
    pub fn render_series(&self, out: &mut String) {
        let all: Vec<(String, Arc<Series>)> = lock(&self.series)
            .iter()
            .map(|(m, s)| (m.clone(), s.clone()))
            .collect();
        let counter = |out: &mut String, name: &str, help: &str, get: &dyn Fn(&Series) -> u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (model, s) in &all {
                let _ = writeln!(
                    out,
                    "{name}{{model_name=\"{}\"}} {}",
                    escape_label(model),
                    get(s)
                );
            }
        };
        counter(
            out,
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            &|s| s.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            out,
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            &|s| s.generation_tokens.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP vllm:request_success_total Count of successfully processed requests."
        );
        let _ = writeln!(out, "# TYPE vllm:request_success_total counter");
        for (model, s) in &all {
            for f in Finished::ALL {
                let _ = writeln!(
                    out,
                    "vllm:request_success_total{{model_name=\"{}\",finished_reason=\"{}\"}} {}",
                    escape_label(model),
                    f.label(),
                    s.finished[f as usize].load(Ordering::Relaxed)
                );
            }
        }
        for (i, family) in FAMILIES.iter().enumerate() {
            let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
            let _ = writeln!(out, "# TYPE {} histogram", family.name);
            for (model, s) in &all {
                let labels = format!("model_name=\"{}\"", escape_label(model));
                let d = lock(&s.histograms[i]);
                let mut cumulative = 0;
                for (j, &b) in family.bounds.iter().enumerate() {
                    cumulative += d.counts[j];
                    let _ = writeln!(
                        out,
                        "{}_bucket{{{labels},le=\"{b:?}\"}} {cumulative}",
                        family.name
                    );
                }
                cumulative += d.counts[family.bounds.len()];
                let _ = writeln!(
                    out,
                    "{}_bucket{{{labels},le=\"+Inf\"}} {cumulative}",
                    family.name
                );
                let _ = writeln!(out, "{}_sum{{{labels}}} {:?}", family.name, d.sum);
                let _ = writeln!(out, "{}_count{{{labels}}} {}", family.name, d.count);
            }
        }
    }
}

/// One request's timings. Record with [`finish`](Self::finish); a timer dropped unfinished after it was admitted
/// records an abort (a request refused before admission — bad input, a full queue — is not counted).
pub struct RequestTimer {
    metrics: Arc<Metrics>,
    series: Arc<Series>,
    arrived: Instant,
    last_output: Option<Instant>,
    admitted: bool,
    recorded: bool,
}

impl RequestTimer {
    /// The request is for `model` (before anything is observed: what came before stays under the default).
    pub fn model(&mut self, model: &str) {
        self.series = self.metrics.series(model);
    }

    /// The request got its slot after waiting `queued`.
    pub fn admitted(&mut self, queued: Duration) {
        self.admitted = true;
        self.series.observe(Hist::Queue, queued.as_secs_f64());
    }

    /// Output went to the client now (the first call is the first token).
    pub fn output(&mut self) {
        let now = Instant::now();
        match self.last_output {
            None => self
                .series
                .observe(Hist::Ttft, now.duration_since(self.arrived).as_secs_f64()),
            Some(prev) => self
                .series
                .observe(Hist::Itl, now.duration_since(prev).as_secs_f64()),
        }
        self.last_output = Some(now);
    }

    /// The engine's own account of the request: its prefill and decode time.
    pub fn timings(&mut self, t: &Timings) {
        self.series.observe(Hist::Prefill, t.prefill_secs());
        self.series.observe(Hist::Decode, t.decode_secs());
        self.series
            .observe(Hist::Inference, t.prefill_secs() + t.decode_secs());
    }

    /// Records the finished request with its token counts.
    pub fn finish(&mut self, finished: Finished, prompt_tokens: u64, generation_tokens: u64) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let s = &self.series;
        s.observe(Hist::E2e, self.arrived.elapsed().as_secs_f64());
        s.prompt_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
        s.generation_tokens
            .fetch_add(generation_tokens, Ordering::Relaxed);
        s.finished[finished as usize].fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for RequestTimer {
    fn drop(&mut self) {
        if self.admitted && !self.recorded {
            self.finish(Finished::Abort, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(m: &Metrics) -> String {
        let mut out = String::new();
        m.render_series(&mut out);
        out
    }

    #[test]
    fn renders_vllm_names_with_cumulative_buckets() {
        let m = Metrics::new("m\"1");
        let mut t = m.timer();
        t.admitted(Duration::from_millis(5));
        t.output();
        t.output();
        t.timings(&Timings {
            prefill_ns: 400_000_000,
            decode_ns: 700_000_000,
            ..Default::default()
        });
        t.finish(Finished::Stop, 10, 2);
        let text = rendered(&m);
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
        assert!(text.contains("vllm:request_prefill_time_seconds_sum{model_name=\"m\\\"1\"} 0.4"));
        assert!(text.contains(
            "vllm:request_inference_time_seconds_bucket{model_name=\"m\\\"1\",le=\"1.5\"} 1"
        ));
        // A timer dropped unfinished counts as an abort, once, if it was admitted.
        drop(m.timer());
        m.timer().admitted(Duration::ZERO);
        assert!(rendered(&m).contains("finished_reason=\"abort\"} 1"));
    }

    #[test]
    fn each_model_has_its_series_under_one_family_header() {
        let m = Metrics::new("a");
        let mut t = m.timer();
        t.model("b");
        t.finish(Finished::Length, 7, 1);
        let text = rendered(&m);
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"a\"} 0"));
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"b\"} 7"));
        assert_eq!(
            text.matches("# TYPE vllm:prompt_tokens_total counter")
                .count(),
            1
        );
        assert_eq!(
            text.matches("# TYPE vllm:request_decode_time_seconds histogram")
                .count(),
            1
        );
    }
}
