//! `CpuModel::forward_batch` on the real models: a batch of sequences, each with its own block table into one
//! paged store, gives each the logits it gets alone; the reduced KV types keep the f32 cache's logits; and a
//! verify step whose drafts are rejected leaves the keys and values plain decoding leaves. (Moved here from the
//! integration suite: block tables and paged stores are the engine's own, not its API.)

use candle_core::Device;

use crate::engine::arch::weights::WeightFormat;
use crate::engine::backend::Model;
use crate::engine::gguf::GgufFile;
use crate::engine::kv::{BatchSeq, KvBlocks, KvDtype};
use crate::engine::sampler::argmax;
use crate::engine::test_models;
use crate::text::Tokenizer;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Three sequences of different lengths and positions in one batch, each with its own blocks of one shared
/// paged store, get exactly the logits each gets alone — in the prefill batch and in a decode step after it.
#[test]
fn a_batch_of_sequences_matches_each_sequence_alone() {
    let gguf = GgufFile::open(&test_models::smollm2_path()).unwrap();
    let model = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    let cpu = model.cpu_engine().unwrap();
    let prompts: [Vec<u32>; 3] = [
        (0..9).map(|i| 300 + i).collect(),
        (0..23).map(|i| 1000 + 3 * i).collect(),
        vec![42],
    ];
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut own = model.new_sequence();
            model.forward(p, &mut own).unwrap().to_vec1().unwrap()
        })
        .collect();
    // Blocks interleaved across the sequences, in a store with room to spare.
    // f32, as the standalone sequences keep.
    let mut store = cpu.new_blocks(16, KvDtype::F32).unwrap();
    let tables: Vec<Vec<u32>> = vec![vec![5, 0], vec![3, 7, 1], vec![9]];
    let batch: Vec<BatchSeq> = prompts
        .iter()
        .zip(&tables)
        .map(|(p, t)| BatchSeq {
            tokens: p,
            blocks: t,
            pos: 0,
            logits: 1,
        })
        .collect();
    let together = cpu.forward_batch(&mut store, &batch).unwrap();
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "sequence {i}: max |Δ| {}", max_abs_diff(a, b));
    }
    // A decode step for all three at their own positions (one asks for no logits), against the same tokens
    // fed alone.
    let next = [5u32, 6, 7];
    let batch: Vec<BatchSeq> = prompts
        .iter()
        .zip(&tables)
        .zip(&next)
        .enumerate()
        .map(|(i, ((p, t), n))| BatchSeq {
            tokens: std::slice::from_ref(n),
            blocks: t,
            pos: p.len(),
            logits: usize::from(i != 1),
        })
        .collect();
    let stepped = cpu.forward_batch(&mut store, &batch).unwrap();
    assert!(stepped[1].is_empty(), "no logits were asked for");
    for i in [0, 2] {
        let mut kv = model.new_sequence();
        model.forward(&prompts[i], &mut kv).unwrap();
        let want: Vec<f32> = model
            .forward(&next[i..=i], &mut kv)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(want, stepped[i], "sequence {i} decode step");
    }
    // A table that does not cover the positions is an error, not a panic.
    let short = [BatchSeq {
        tokens: &prompts[1],
        blocks: &[2],
        pos: 0,
        logits: 1,
    }];
    assert!(cpu.forward_batch(&mut store, &short).is_err());
}

/// Logits of a prompt and of each token of `then` fed after it, with the KV cache kept as `dtype`.
fn with_kv(model: &Model, dtype: KvDtype, prompt: &[u32], then: &[u32]) -> Vec<Vec<f32>> {
    let cpu = model.cpu_engine().unwrap();
    let mut store = cpu.new_blocks(64, dtype).unwrap();
    let table: Vec<u32> = (0..64).collect();
    let mut out = Vec::new();
    let (mut fed, mut pos) = (prompt.to_vec(), 0);
    for step in 0..=then.len() {
        let b = [BatchSeq {
            tokens: &fed[pos..],
            blocks: &table,
            pos,
            logits: 1,
        }];
        out.push(cpu.forward_batch(&mut store, &b).unwrap().pop().unwrap());
        pos = fed.len();
        if let Some(&t) = then.get(step) {
            fed.push(t);
        }
    }
    out
}

/// `--kv-cache-dtype`: f16 (the CPU default, llama.cpp's) and q8_0 keep the logits of a 300-token prompt and 24
/// decode steps after it (the f32 cache's greedy tokens, fed to all three) close to the f32 cache's, with the
/// same greedy token wherever the f32 top two are further apart than the tolerance; an f16 block is half an f32
/// one.
#[test]
fn reduced_kv_types_keep_the_logits_of_the_f32_cache() {
    let gguf = GgufFile::open(&test_models::qwen_path()).unwrap();
    let model = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 2).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let text = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    \
                for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nclass Stack:\n";
    let prompt: Vec<u32> = tok.encode(&text.repeat(6), false).unwrap();
    let top = |v: &Vec<f32>| argmax(v).unwrap();
    // The f32 cache's own greedy continuation.
    let mut then = Vec::new();
    for _ in 0..24 {
        let l = with_kv(&model, KvDtype::F32, &prompt, &then);
        then.push(top(l.last().unwrap()));
    }
    let want = with_kv(&model, KvDtype::F32, &prompt, &then);
    // Measured: f16 0.25–0.49 per step, q8_0 1.3–1.95 (Qwen2.5's keys carry large outliers).
    for (dtype, tolerance) in [(KvDtype::F16, 0.75), (KvDtype::Q8_0, 2.5)] {
        let got = with_kv(&model, dtype, &prompt, &then);
        let per: Vec<f32> = want
            .iter()
            .zip(&got)
            .map(|(a, b)| max_abs_diff(a, b))
            .collect();
        eprintln!("{dtype}: max |Δlogit| per step {per:?}");
        for (step, (a, b)) in want.iter().zip(&got).enumerate() {
            assert!(
                per[step] < tolerance,
                "{dtype} step {step}: max |Δlogit| {}",
                per[step]
            );
            let mut sorted = a.clone();
            sorted.sort_by(|p, q| q.total_cmp(p));
            if sorted[0] - sorted[1] > tolerance {
                assert_eq!(top(a), top(b), "{dtype} step {step}: greedy token");
            }
        }
    }
    let bytes = |d| model.paged_block_bytes(d).unwrap();
    assert_eq!(bytes(KvDtype::F16) * 2, bytes(KvDtype::F32));
    assert_eq!(bytes(KvDtype::Auto), bytes(KvDtype::F16));
}

/// On the CPU engine's blocks: a verify step whose drafts are wrong, then the right token fed over the rejected
/// positions, leaves exactly the keys and values of plain decoding (the next logits equal bit for bit), and the
/// verify step's first row is the plain step's logits.
#[test]
fn a_rejected_draft_leaves_the_kv_cache_as_plain_decoding_does() {
    let gguf = GgufFile::open(&test_models::qwen_path()).unwrap();
    let model = Model::load(&gguf, &Device::Cpu, WeightFormat::Auto).unwrap();
    let cpu = model.cpu_engine().unwrap();
    let vocab = cpu.vocab_size;
    let prompt: Vec<u32> = (0..40).map(|i| 300 + (i * 53) % 5000).collect();
    let table: Vec<u32> = (0..8).collect();
    let step = |store: &mut KvBlocks, tokens: &[u32], pos: usize, logits: usize| {
        let b = [BatchSeq {
            tokens,
            blocks: &table,
            pos,
            logits,
        }];
        cpu.forward_batch(store, &b).unwrap().pop().unwrap()
    };
    let n = prompt.len();
    // Plain: prompt, then tokens 11 and 12 one step each.
    let mut plain = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut plain, &prompt, 0, 0);
    let p11 = step(&mut plain, &[11], n, 1);
    let p12 = step(&mut plain, &[12], n + 1, 1);
    let p13 = step(&mut plain, &[13], n + 2, 1);
    // Speculative: 11 with drafts 99, 98, 97 (all wrong), then 12 and 13 fed over the rejected positions.
    let mut spec = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut spec, &prompt, 0, 0);
    let rows = step(&mut spec, &[11, 99, 98, 97], n, 4);
    assert_eq!(rows.len(), 4 * vocab);
    assert_eq!(&rows[..vocab], &p11[..], "the verify step's first row");
    let s12 = step(&mut spec, &[12], n + 1, 1);
    assert_eq!(s12, p12, "logits after the rejected draft was overwritten");
    // A partly right draft (12 confirmed, 55 rejected): the confirmed position is kept as it is.
    let mut part = cpu.new_blocks(8, KvDtype::Auto).unwrap();
    step(&mut part, &prompt, 0, 0);
    let rows = step(&mut part, &[11, 12, 55], n, 3);
    assert_eq!(
        &rows[vocab..2 * vocab],
        &p12[..],
        "the confirmed draft's row"
    );
    assert_eq!(step(&mut part, &[13], n + 2, 1), p13);
}
