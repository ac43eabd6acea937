//! `cargo bench --bench verify_step`: what a speculative verify step costs on the CPU engine — one sequence's
//! forward pass over `1 + k` tokens with logits for all of them (the pending token and `k` drafts), against the
//! plain decode step (`k = 0`), at a depth of 512 positions, for SmolLM2-135M and Qwen2.5-Coder-0.5B. The ratio
//! `time(k) / time(0)` is the price of a draft of `k` tokens; a draft pays when more than that many tokens are
//! accepted on average. Models not in the cache are skipped with a message (`agentd model pull …`).
// A bench is a test harness: a failed setup ends it with the reason (`expect`), as a test would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use agentd::engine::microbench::{BatchSeq, CpuModel, KvBlocks};
use agentd::engine::{GgufFile, KvDtype, Model, WeightFormat};
use agentd::model_files::fetch::{self, FetchOptions, ModelSelector};
use candle_core::Device;

const MODELS: [&str; 2] = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"];
const DEPTH: usize = 512;
const BLOCKS: usize = 64;

struct Loaded {
    model: Model,
    table: Vec<u32>,
}

fn load(name: &str) -> Option<Loaded> {
    let opts = FetchOptions {
        offline: true,
        progress: false,
        ..FetchOptions::default()
    };
    let resolved = fetch::resolve(&ModelSelector::Name(name.into()), &opts).ok()?;
    let gguf = GgufFile::open(&resolved.path).ok()?;
    let model = Model::load(&gguf, &Device::Cpu, WeightFormat::Auto).ok()?;
    Some(Loaded {
        model,
        table: (0..BLOCKS as u32).collect(),
    })
}

fn models() -> &'static [Option<Loaded>; 2] {
    static CELL: OnceLock<[Option<Loaded>; 2]> = OnceLock::new();
    CELL.get_or_init(|| MODELS.map(load))
}

fn cpu(i: usize) -> (&'static CpuModel, &'static [u32]) {
    let l = models()[i].as_ref().expect("skipped in main");
    (l.model.cpu_engine().expect("the CPU engine"), &l.table)
}

/// A store holding `DEPTH` positions of a prompt.
fn primed(m: &CpuModel, table: &[u32]) -> KvBlocks {
    let mut store = m.new_blocks(BLOCKS, KvDtype::Auto).expect("a store");
    let prompt: Vec<u32> = (0..DEPTH as u32).map(|i| 100 + (i * 37) % 900).collect();
    for (c, chunk) in prompt.chunks(256).enumerate() {
        let b = [BatchSeq {
            tokens: chunk,
            blocks: table,
            pos: c * 256,
            logits: 0,
        }];
        m.forward_batch(&mut store, &b).expect("prefill");
    }
    store
}

fn step(bencher: divan::Bencher, model: usize, k: usize) {
    let (m, table) = cpu(model);
    let mut store = primed(m, table);
    let tokens: Vec<u32> = (0..=k as u32).map(|i| 300 + i).collect();
    bencher.bench_local(|| {
        let b = [BatchSeq {
            tokens: &tokens,
            blocks: table,
            pos: DEPTH,
            logits: k + 1,
        }];
        divan::black_box(m.forward_batch(&mut store, &b).expect("verify step"));
    });
}

#[divan::bench(args = [0, 1, 2, 4, 8])]
fn smollm2(bencher: divan::Bencher, k: usize) {
    step(bencher, 0, k);
}

#[divan::bench(args = [0, 1, 2, 4, 8])]
fn qwen_coder(bencher: divan::Bencher, k: usize) {
    step(bencher, 1, k);
}

fn main() {
    for (name, m) in MODELS.iter().zip(models()) {
        if m.is_none() {
            eprintln!("verify_step: {name} is not cached (`agentd model pull {name}`); skipped");
            return;
        }
    }
    divan::main();
}
