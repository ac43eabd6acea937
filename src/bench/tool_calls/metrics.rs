//! From the runs of a bench to its report: per-endpoint summaries over the measured units (warm-up left out),
//! per-turn summaries for the agent scenario, and the pair-by-pair A/B ratios of `--compare`. The per-request
//! arithmetic is [`crate::bench::metrics`], percentiles are [`crate::bench::stats`].

use serde::Serialize;

use crate::bench::{pair_ratios, Distribution, PairedRatios, RequestSample, Side, Summary};

use super::scenarios::{Scenario, Turn};

/// One unit (a request, or an agent session) on one endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct UnitRun {
    pub side: Side,
    /// The unit's number; the same number on both sides is the same workload (a pair).
    pub unit: usize,
    pub warmup: bool,
    pub turns: Vec<Turn>,
}

/// An endpoint as the report names it.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointInfo {
    pub side: Side,
    pub url: String,
    pub model: String,
    /// `--local`: agentd's server started in this process.
    pub local: bool,
}

/// How the bench was run.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub scenario: Scenario,
    pub reps: usize,
    pub warmup: usize,
    pub concurrency: usize,
    pub max_tokens: u32,
    pub nonce: bool,
    /// `/proc/loadavg` before and after the run (Linux), to judge how quiet the machine was.
    pub load_before: Option<String>,
    pub load_after: Option<String>,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub run: RunInfo,
    pub endpoints: Vec<EndpointReport>,
    pub comparison: Option<Comparison>,
    /// Every request, warm-up included.
    pub runs: Vec<UnitRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndpointReport {
    #[serde(flatten)]
    pub endpoint: EndpointInfo,
    /// All measured requests (every turn).
    pub summary: Summary,
    /// The agent scenario: one entry per turn.
    pub turns: Vec<TurnReport>,
    /// The agent scenario: p50 time to the complete call of the last turn over that of the first.
    pub last_over_first_turn: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    pub turn: usize,
    /// The prompt size: p50 of the server's `usage.prompt_tokens`, else of agentd's estimate.
    pub prompt_tokens: f64,
    /// `prompt_tokens` is the server's count.
    pub prompt_tokens_exact: bool,
    pub summary: Summary,
}

/// `--compare`: A/B ratios pair by pair (below 1: A is faster, except for `output_tok_s`).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub pairs: usize,
    pub metrics: Vec<MetricRatios>,
    /// The agent scenario: time to the complete call, per turn.
    pub per_turn: Vec<TurnRatios>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricRatios {
    pub metric: &'static str,
    #[serde(flatten)]
    pub ratios: PairedRatios,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnRatios {
    pub turn: usize,
    pub call_complete: PairedRatios,
}

type Metric = fn(&RequestSample) -> Option<f64>;

/// The metrics compared pair by pair, with their report names.
pub const COMPARED: [(&str, Metric); 5] = [
    ("ttft_ms", |s| s.ttft_ms),
    ("tool_name_ms", |s| s.tool_name_ms),
    ("call_complete_ms", |s| s.call_complete_ms),
    ("total_ms", |s| Some(s.total_ms)),
    ("output_tok_s", RequestSample::output_tok_s),
];

/// A metric of a sample, `None` for a failed request.
fn value(metric: Metric, turn: &Turn) -> Option<f64> {
    (!turn.sample.is_error())
        .then(|| metric(&turn.sample))
        .flatten()
}

pub fn build(
    run: RunInfo,
    endpoints: Vec<EndpointInfo>,
    runs: Vec<UnitRun>,
    scenario: Scenario,
) -> Report {
    let measured = |side: Side| runs.iter().filter(move |r| r.side == side && !r.warmup);
    let reports = endpoints
        .into_iter()
        .map(|endpoint| {
            let side = endpoint.side;
            let all: Vec<RequestSample> = measured(side)
                .flat_map(|r| r.turns.iter().map(|t| t.sample.clone()))
                .collect();
            let turns = if scenario.turns() > 1 {
                (1..=scenario.turns())
                    .map(|n| turn_report(n, measured(side), scenario))
                    .collect()
            } else {
                Vec::new()
            };
            let last_over_first_turn = match (turns.first(), turns.last()) {
                (Some(first), Some(last)) if turns.len() > 1 => {
                    let p50 = |t: &TurnReport| t.summary.call_complete_ms.map(|d| d.p50);
                    match (p50(first), p50(last)) {
                        (Some(a), Some(b)) if a > 0.0 => Some(b / a),
                        _ => None,
                    }
                }
                _ => None,
            };
            EndpointReport {
                endpoint,
                summary: Summary::of(&all, scenario.call_expected()),
                turns,
                last_over_first_turn,
            }
        })
        .collect::<Vec<_>>();
    let comparison = (reports.len() == 2).then(|| compare(&runs, scenario));
    Report {
        run,
        endpoints: reports,
        comparison,
        runs,
    }
}

fn turn_report<'a>(
    n: usize,
    runs: impl Iterator<Item = &'a UnitRun>,
    scenario: Scenario,
) -> TurnReport {
    let turns: Vec<&Turn> = runs
        .flat_map(|r| r.turns.iter().filter(|t| t.turn == n))
        .collect();
    let samples: Vec<RequestSample> = turns.iter().map(|t| t.sample.clone()).collect();
    let summary = Summary::of(&samples, scenario.call_expected());
    let (prompt_tokens, prompt_tokens_exact) = match summary.prompt_tokens {
        Some(d) => (d.p50, true),
        None => {
            let estimates: Vec<f64> = turns.iter().map(|t| t.prompt_estimate as f64).collect();
            let p50 = Distribution::of(&estimates).map_or(0.0, |d| d.p50);
            (p50, false)
        }
    };
    TurnReport {
        turn: n,
        prompt_tokens,
        prompt_tokens_exact,
        summary,
    }
}

/// The measured units both sides ran, in unit order, as (A, B) pairs of runs.
fn pairs(runs: &[UnitRun]) -> Vec<(&UnitRun, &UnitRun)> {
    let a: Vec<&UnitRun> = runs
        .iter()
        .filter(|r| r.side == Side::A && !r.warmup)
        .collect();
    let mut out: Vec<(&UnitRun, &UnitRun)> = a
        .into_iter()
        .filter_map(|ra| {
            runs.iter()
                .find(|rb| rb.side == Side::B && rb.unit == ra.unit)
                .map(|rb| (ra, rb))
        })
        .collect();
    out.sort_by_key(|(ra, _)| ra.unit);
    out
}

fn compare(runs: &[UnitRun], scenario: Scenario) -> Comparison {
    let pairs = pairs(runs);
    // Every (unit, turn) of both sides is one pair.
    let series = |metric: Metric, turn: Option<usize>| {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (ra, rb) in &pairs {
            for ta in ra.turns.iter().filter(|t| turn.is_none_or(|n| t.turn == n)) {
                if let Some(tb) = rb.turns.iter().find(|t| t.turn == ta.turn) {
                    a.push(value(metric, ta));
                    b.push(value(metric, tb));
                }
            }
        }
        pair_ratios(&a, &b)
    };
    let metrics = COMPARED
        .iter()
        .map(|(name, metric)| MetricRatios {
            metric: name,
            ratios: series(*metric, None),
        })
        .collect();
    let per_turn = if scenario.turns() > 1 {
        (1..=scenario.turns())
            .map(|n| TurnRatios {
                turn: n,
                call_complete: series(|s| s.call_complete_ms, Some(n)),
            })
            .collect()
    } else {
        Vec::new()
    };
    Comparison {
        pairs: pairs.len(),
        metrics,
        per_turn,
    }
}
