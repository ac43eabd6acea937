//! `cargo bench --bench cpu_matmul`: the CPU engine's matmul (`src/engine/cpu/qmatrix.rs`, reached through
//! `engine::microbench`: the weights repacked into row-interleaved tiles of 8 rows, activations quantized once,
//! rows split over the thread pool, 4 tokens per tile call for prefill) against candle's `QMatMul` on the same
//! weights, for the types of the shipped models (Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), on SmolLM2's MLP shapes
//! (`1536x576`, `576x1536`) for one decode token and a 32-token prefill chunk.
//! Random weights, quantized once. Threads: `AGENTD_THREADS` (default 1) for ours, `RAYON_NUM_THREADS` for
//! candle. The K-quants need 256-column rows, so they run on `1536x768`-style shapes rounded up.
// A bench is a test harness: a failed setup ends it with the reason (`expect`), as a test would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::Duration;

use agentd::engine::microbench::{matmul_many, Acts, Isa, QMatrix, SharedBytes, ThreadPool};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

/// A weight: its type and shape (output features × input features).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Case {
    dtype: GgmlDType,
    rows: usize,
    cols: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}x{}", self.dtype, self.rows, self.cols)
    }
}

const fn case(dtype: GgmlDType, rows: usize, cols: usize) -> Case {
    Case { dtype, rows, cols }
}

const CASES: [Case; 10] = [
    case(GgmlDType::Q4_1, 1536, 576),
    case(GgmlDType::Q4_1, 576, 1536),
    case(GgmlDType::Q5_0, 1536, 576),
    case(GgmlDType::Q5_0, 576, 1536),
    case(GgmlDType::Q8_0, 1536, 576),
    case(GgmlDType::Q8_0, 576, 1536),
    case(GgmlDType::Q4K, 1536, 768),
    case(GgmlDType::Q4K, 576, 1536),
    case(GgmlDType::Q6K, 1536, 768),
    case(GgmlDType::Q6K, 576, 1536),
];
/// Input rows: one decode token, a batched decode step of 8 sequences, a prefill chunk.
const TOKENS: [usize; 3] = [1, 8, 32];

struct Weights {
    case: Case,
    ours: QMatrix,
    candle: QMatMul,
}

fn pool() -> &'static ThreadPool {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        ThreadPool::new(
            std::env::var("AGENTD_THREADS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1),
        )
    })
}

fn weights(case: Case) -> &'static Weights {
    static ALL: OnceLock<Vec<Weights>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        CASES
            .iter()
            .map(|&case| {
                let w = Tensor::randn(0f32, 0.05, (case.rows, case.cols), &Device::Cpu)
                    .expect("random weights");
                let q = QTensor::quantize(&w, case.dtype).expect("quantize");
                let raw = SharedBytes::from(q.data().expect("raw blocks").into_owned());
                let ours = QMatrix::from_raw(raw, case.dtype, case.rows, case.cols, Isa::detect())
                    .expect("agentd's matrix");
                let candle = QMatMul::from_qtensor(q).expect("candle's QMatMul");
                Weights { case, ours, candle }
            })
            .collect()
    });
    all.iter()
        .find(|w| w.case == case)
        .expect("a case from CASES")
}

/// Multiply-adds per call, so divan prints a rate.
fn macs(tokens: usize, case: Case) -> divan::counter::ItemsCount {
    divan::counter::ItemsCount::new(tokens * case.rows * case.cols)
}

#[divan::bench(consts = TOKENS, args = CASES)]
fn agentd<const T: usize>(bencher: divan::Bencher, case: Case) {
    let w = weights(case);
    let x = Tensor::randn(0f32, 1.0, (T, case.cols), &Device::Cpu)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("random input");
    let mut acts = Acts::default();
    let mut out = vec![0f32; T * case.rows];
    bencher.counter(macs(T, case)).bench_local(|| {
        // The activations are quantized inside the timed part, as in the forward pass.
        acts.reset(T, case.cols, &[w.ours.act_kind()]);
        acts.fill(pool(), &|r, row| {
            row.copy_from_slice(&x[r * case.cols..(r + 1) * case.cols])
        });
        matmul_many(pool(), &acts, &mut [(&w.ours, &mut out)]);
        divan::black_box(&out);
    });
}

#[divan::bench(consts = TOKENS, args = CASES)]
fn candle_qmatmul<const T: usize>(bencher: divan::Bencher, case: Case) {
    let w = weights(case);
    let x = Tensor::randn(0f32, 1.0, (T, case.cols), &Device::Cpu).expect("random input");
    bencher
        .counter(macs(T, case))
        .bench(|| w.candle.forward(divan::black_box(&x)).expect("forward"));
}

fn main() {
    // Short by default; `-- --sample-count N --max-time S` for steadier figures.
    divan::Divan::default()
        .sample_count(20)
        .max_time(Duration::from_secs(1))
        .config_with_args()
        .main();
}
