//! `cargo bench --bench sampler`: one sampling step of the engine's `Sampler` (through `engine::microbench`)
//! over a 49,152-entry logits vector (SmolLM2's vocabulary): greedy (argmax), the engine's default temperature
//! draw, top-k + top-p, top-p alone, min-p, and the repetition / presence / frequency penalties
//! (`Sampler::adjust`). The logits are synthetic: normal with σ = 3 plus a few strong candidates, so top-p has a
//! realistic head to cut.
// A bench is a test harness: a failed setup ends it with the reason (`expect`), as a test would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use agentd::engine::microbench::Sampler;
use agentd::engine::SamplingParams;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const VOCAB: usize = 49_152;

fn logits() -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut v: Vec<f32> = (0..VOCAB)
        .map(|_| {
            // Irwin–Hall: the sum of 12 uniforms is close to normal (mean 6, σ 1).
            let z: f32 = (0..12).map(|_| rng.gen::<f32>()).sum::<f32>() - 6.0;
            3.0 * z
        })
        .collect();
    for (i, boost) in [
        (17usize, 22.0f32),
        (4_242, 21.0),
        (30_000, 20.5),
        (49_000, 19.0),
    ] {
        v[i] = boost;
    }
    v
}

/// The sampling settings benched, by name.
const CASES: [&str; 6] = [
    "greedy",
    "temperature_0.7",
    "top_k_40_top_p_0.9",
    "top_p_0.95",
    "min_p_0.05",
    "penalties",
];

fn params(case: &str) -> SamplingParams {
    let seeded = SamplingParams {
        seed: Some(1),
        ..SamplingParams::default()
    };
    match case {
        "greedy" => SamplingParams::greedy(),
        "temperature_0.7" => seeded,
        "top_k_40_top_p_0.9" => SamplingParams {
            top_k: 40,
            top_p: 0.9,
            ..seeded
        },
        "top_p_0.95" => SamplingParams {
            temperature: 1.0,
            top_p: 0.95,
            ..seeded
        },
        "min_p_0.05" => SamplingParams {
            temperature: 1.0,
            min_p: 0.05,
            ..seeded
        },
        _ => SamplingParams {
            repetition_penalty: 1.1,
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            ..seeded
        },
    }
}

/// `Sampler::pick` (plus `adjust` for `penalties`, on a fresh copy of the logits each time).
#[divan::bench(args = CASES)]
fn pick(bencher: divan::Bencher, case: &str) {
    let mut sampler = Sampler::new(params(case)).expect("valid sampling params");
    let logits = logits();
    if case == "penalties" {
        // 512 tokens of context, the last 128 generated.
        let context: Vec<u32> = (0..512u32).map(|i| (i * 97) % VOCAB as u32).collect();
        let generated = context[384..].to_vec();
        bencher
            .with_inputs(|| logits.clone())
            .bench_local_refs(|l| {
                sampler.adjust(l, &context, &generated);
                sampler.pick(l)
            });
    } else {
        bencher.bench_local(|| sampler.pick(divan::black_box(&logits)));
    }
}

fn main() {
    // Short by default; `-- --sample-count N --max-time S` for steadier figures.
    divan::Divan::default()
        .sample_count(50)
        .max_time(Duration::from_secs(1))
        .config_with_args()
        .main();
}
