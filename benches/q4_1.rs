//! `cargo bench --bench q4_1`: agentd's Q4_1 matrix-vector kernel (`engine::model::q4_1`, Q8_1 activations,
//! AVX2/FMA when present) against candle's own Q4_1 `QMatMul` (the scalar path), on SmolLM2-135M's shapes:
//! the MLP's up/gate projection (`[1536, 576]`: 576-column rows) and down projection (`[576, 1536]`: 1536-column
//! rows), for one decode token and for a 32-token prefill chunk. Random weights, quantized once; the thread count
//! is rayon's (set `RAYON_NUM_THREADS=1` for one core).
// A bench is a test harness: a failed setup ends it with the reason (`expect`), as a test would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::Duration;

use agentd::engine::model::q4_1::Q4_1Matrix;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

/// A weight's shape: output features × input features (the row length).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    rows: usize,
    cols: usize,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

const SHAPES: [Shape; 2] = [
    Shape {
        rows: 1536,
        cols: 576,
    },
    Shape {
        rows: 576,
        cols: 1536,
    },
];
/// Input rows: one decode token, a prefill chunk.
const TOKENS: [usize; 2] = [1, 32];

struct Weights {
    shape: Shape,
    ours: Q4_1Matrix,
    candle: QMatMul,
}

fn weights(shape: Shape) -> &'static Weights {
    static ALL: OnceLock<Vec<Weights>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        SHAPES
            .iter()
            .map(|&shape| {
                let w = Tensor::randn(0f32, 0.05, (shape.rows, shape.cols), &Device::Cpu)
                    .expect("random weights");
                let q = QTensor::quantize(&w, GgmlDType::Q4_1).expect("quantize to Q4_1");
                let ours = Q4_1Matrix::from_qtensor(&q).expect("agentd's Q4_1 matrix");
                let candle = QMatMul::from_qtensor(q).expect("candle's QMatMul");
                Weights {
                    shape,
                    ours,
                    candle,
                }
            })
            .collect()
    });
    all.iter()
        .find(|w| w.shape == shape)
        .expect("a shape from SHAPES")
}

fn input(tokens: usize, cols: usize) -> Tensor {
    Tensor::randn(0f32, 1.0, (tokens, cols), &Device::Cpu).expect("random input")
}

/// Multiply-adds per call, so divan prints a rate.
fn macs(tokens: usize, shape: Shape) -> divan::counter::ItemsCount {
    divan::counter::ItemsCount::new(tokens * shape.rows * shape.cols)
}

#[divan::bench(consts = TOKENS, args = SHAPES)]
fn agentd<const T: usize>(bencher: divan::Bencher, shape: Shape) {
    let w = weights(shape);
    let x = input(T, shape.cols);
    bencher
        .counter(macs(T, shape))
        .bench(|| w.ours.forward(divan::black_box(&x)).expect("forward"));
}

#[divan::bench(consts = TOKENS, args = SHAPES)]
fn candle_qmatmul<const T: usize>(bencher: divan::Bencher, shape: Shape) {
    let w = weights(shape);
    let x = input(T, shape.cols);
    bencher
        .counter(macs(T, shape))
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
