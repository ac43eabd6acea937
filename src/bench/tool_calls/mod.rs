//! The measurement of `agentd bench tool-calls`: the workloads ([`scenarios`]), running them as units on one
//! endpoint or alternately on two (A B A B …, so slow drifts of a noisy machine hit both sides alike), and the
//! runs → report arithmetic ([`metrics`]). The CLI parses the flags, starts `--local`'s server, draws the progress
//! bar and prints the report; everything measured is here.

pub mod copy_heavy;
pub mod metrics;
pub mod scenarios;

use std::time::Instant;

pub use metrics::{EndpointInfo, Report, RunInfo, TurnReport, UnitRun};
pub use scenarios::{RequestSettings, Scenario, Target, Turn};

use super::{ab_schedule, BenchError, Side};

/// What one run measures.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub scenario: Scenario,
    /// Measured units (requests, or sessions for `agent`).
    pub reps: usize,
    /// Units run first and left out of the figures.
    pub warmup: usize,
    /// Units in flight at once (on each endpoint in turn); at least 1.
    pub concurrency: usize,
    pub settings: RequestSettings,
}

impl RunPlan {
    /// Every request the run sends, over `endpoints` endpoints (the length of a progress bar).
    pub fn total_requests(&self, endpoints: usize) -> usize {
        (self.warmup + self.reps) * self.scenario.turns() * endpoints
    }
}

/// `/proc/loadavg`'s three load averages (Linux), to judge how quiet the machine was.
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Runs `plan` on `a`, and on `b` alternately when given (batches of `concurrency` units, A B A B …), then
/// builds the report; `endpoints` names them (A first). `on_request` is called after every request.
pub async fn run(
    plan: &RunPlan,
    endpoints: Vec<EndpointInfo>,
    a: Target<'_>,
    b: Option<Target<'_>>,
    on_request: &(dyn Fn() + Sync),
) -> Result<Report, BenchError> {
    let concurrency = plan.concurrency.max(1);
    let total_units = plan.warmup + plan.reps;
    let batches = total_units.div_ceil(concurrency);
    let sides = if b.is_some() { 2 } else { 1 };
    let schedule = if b.is_some() {
        ab_schedule(batches)
    } else {
        vec![Side::A; batches]
    };
    let load_before = load_average();
    let started = Instant::now();
    let mut runs = Vec::new();
    for (i, side) in schedule.into_iter().enumerate() {
        let batch = i / sides;
        let units = batch * concurrency..((batch + 1) * concurrency).min(total_units);
        let target = match (side, &b) {
            (Side::B, Some(b)) => b,
            _ => &a,
        };
        let results =
            futures::future::join_all(units.clone().map(|u| {
                scenarios::run_unit(plan.scenario, target, u, &plan.settings, on_request)
            }))
            .await;
        for (unit, turns) in units.zip(results) {
            runs.push(UnitRun {
                side,
                unit,
                warmup: unit < plan.warmup,
                turns: turns?,
            });
        }
    }
    let info = RunInfo {
        scenario: plan.scenario,
        reps: plan.reps,
        warmup: plan.warmup,
        concurrency,
        max_tokens: plan.settings.max_tokens,
        nonce: plan.settings.nonce,
        load_before,
        load_after: load_average(),
        wall_s: started.elapsed().as_secs_f64(),
    };
    Ok(metrics::build(info, endpoints, runs, plan.scenario))
}
