//! The CPU forward pass of a llama-family decoder (llama, qwen2/3, qwen3moe, gemma3, phi3) over our own kernels: weights in their file
//! types, activations quantized once per matmul input (fused with the RMS norm), rotary applied in place, the
//! SwiGLU fused with the quantization of the MLP's hidden state, attention over our own KV layout, and every
//! parallel step on one thread pool. All intermediate buffers live in a scratch that only grows.
//!
//! `forward_batch` takes tokens from several sequences at once (each with its own block table into one paged
//! [`KvBlocks`] store and its own position): the matmuls see one token batch, attention stays per sequence and
//! walks the sequence's blocks. That is the shape continuous batching needs. Logits are computed only for the
//! sequences that ask for them (a prefill chunk that does not end its prompt needs none).

use std::sync::Mutex;

#[cfg(test)]
mod batch_tests;
mod load;
mod shapes;

use crate::engine::arch::{Activation, DecoderConfig, Moe, RopeStyle};
use crate::engine::cpu::act::{grow, ActKind, Acts, SyncPtr};
use crate::engine::cpu::attention;
use crate::engine::cpu::embedding::Embedding;
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::pool::ThreadPool;
use crate::engine::cpu::qmatrix::{matmul_many, QMatrix};
use crate::engine::cpu::vector;
use crate::engine::error::{EngineError, Result};
use crate::engine::kv::{BatchSeq, KvBlocks, KvDtype, StepOutput, BLOCK_TOKENS};

/// The widest head QK-norm handles (Qwen3's are 128).
const MAX_HEAD_DIM: usize = 512;

struct Layer {
    attn_norm: Vec<f32>,
    q: QMatrix,
    k: QMatrix,
    v: QMatrix,
    o: QMatrix,
    bias: Option<[Vec<f32>; 3]>,
    /// Qwen3's per-head RMSNorm weights of q and k.
    qk_norm: Option<[Vec<f32>; 2]>,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
    /// Gemma's norms of the attention and MLP outputs before their residual adds.
    post_norms: Option<[Vec<f32>; 2]>,
    /// Attends within the sliding window and rotates with the SWA tables.
    swa: bool,
}

/// A layer's feed-forward part.
enum Ffn {
    /// The gated MLP.
    Dense {
        gate: QMatrix,
        up: QMatrix,
        down: QMatrix,
    },
    /// A routed mixture of SwiGLU experts (Qwen3-MoE).
    Moe(MoeFfn),
}

struct MoeFfn {
    /// `[experts][hidden]` router weights, f32.
    router: Vec<f32>,
    gate: Vec<QMatrix>,
    up: Vec<QMatrix>,
    down: Vec<QMatrix>,
    moe: Moe,
}

impl Ffn {
    /// The width of the hidden state between up and down.
    fn width(&self) -> usize {
        match self {
            Ffn::Dense { gate, .. } => gate.rows,
            Ffn::Moe(m) => m.moe.ff,
        }
    }
}

#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    acts: Acts,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    tmp: Vec<f32>,
    normed: Vec<f32>,
    moe_out: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    scores: Vec<f32>,
    /// The output head's logits of every row that wants them (copied out per sequence).
    logits: Vec<f32>,
    /// Per batch row: (sequence index, absolute position).
    rows: Vec<(usize, usize)>,
    /// The batch row of each sequence's last token.
    last: Vec<usize>,
}

/// The largest logits scratch kept between steps (8 sequences of a 262k vocabulary fit).
const MAX_KEPT_LOGITS_BYTES: usize = 16 << 20;

/// A decoder loaded for the CPU engine.
pub struct CpuModel {
    pub config: DecoderConfig,
    pub vocab_size: usize,
    /// Weight bytes read per decoded token.
    pub weight_bytes: usize,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: QMatrix,
    /// `[position][rope_dims / 2]` rotary tables of the global layers, and of the sliding-window layers.
    cos: Vec<f32>,
    sin: Vec<f32>,
    swa_tables: Option<(Vec<f32>, Vec<f32>)>,
    isa: Isa,
    pool: ThreadPool,
    scratch: Mutex<Scratch>,
}

impl CpuModel {
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Runs `f(i)` for every `i < n` on the engine's own threads (the caller's included), claimed one at a time.
    pub fn parallel_for(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        self.pool.run(n, &|i, _| f(i));
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// A paged KV store for `n_blocks` blocks of this model, kept as `dtype`.
    pub fn new_blocks(&self, n_blocks: usize, dtype: KvDtype) -> Result<KvBlocks> {
        KvBlocks::new(
            n_blocks,
            self.config.n_layer,
            self.config.n_kv_head,
            self.config.head_dim,
            dtype,
        )
    }

    /// Bytes one KV block of this model takes as `dtype`.
    pub fn kv_block_bytes(&self, dtype: KvDtype) -> Result<usize> {
        KvBlocks::bytes_per_block(
            self.config.n_layer,
            self.config.n_kv_head,
            self.config.head_dim,
            dtype,
        )
    }

    /// Runs every sequence's tokens through the model in one batch and returns, per sequence, the logits of its
    /// last `logits` tokens, row after row (an empty vector for a sequence that asked for none). Each sequence's blocks gain the
    /// keys and values of its tokens.
    pub fn forward_batch(
        &self,
        kv: &mut KvBlocks,
        batch: &[BatchSeq<'_>],
    ) -> Result<Vec<Vec<f32>>> {
        self.forward_batch_as(kv, batch, StepOutput::Logits)
    }

    /// [`forward_batch`](Self::forward_batch) returning the rows as `output` says: logits, or the final norm's
    /// hidden states.
    pub fn forward_batch_as(
        &self,
        kv: &mut KvBlocks,
        batch: &[BatchSeq<'_>],
        output: StepOutput,
    ) -> Result<Vec<Vec<f32>>> {
        let cfg = &self.config;
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut *guard;
        s.rows.clear();
        for (i, b) in batch.iter().enumerate() {
            if b.tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            let end = b.pos + b.tokens.len();
            if end > cfg.context_length {
                return Err(EngineError::PromptTooLong {
                    tokens: end,
                    limit: cfg.context_length,
                });
            }
            if end.div_ceil(BLOCK_TOKENS) > b.blocks.len()
                || b.blocks.iter().any(|&blk| blk as usize >= kv.len())
            {
                return Err(EngineError::Internal(format!(
                    "sequence {i}'s block table does not cover {end} positions of the KV store"
                )));
            }
            s.rows.extend((0..b.tokens.len()).map(|t| (i, b.pos + t)));
        }
        let t_all = s.rows.len();
        let (h, d) = (cfg.hidden, cfg.head_dim);
        let (qw, kvw) = (cfg.n_head * d, cfg.n_kv_head * d);
        let ff = self.layers.first().map_or(0, |l| l.ffn.width());
        grow(&mut s.x, t_all * h);
        grow(&mut s.q, t_all * qw);
        grow(&mut s.k, t_all * kvw);
        grow(&mut s.v, t_all * kvw);
        grow(&mut s.att, t_all * qw);
        grow(&mut s.tmp, t_all * h);
        if cfg.post_norms {
            grow(&mut s.normed, t_all * h);
        }
        grow(&mut s.gate, t_all * ff);
        grow(&mut s.up, t_all * ff);
        grow(
            &mut s.scores,
            self.pool.threads() * attention::scratch_per_thread(cfg.n_head, cfg.head_dim),
        );
        let mut r = 0;
        for b in batch.iter() {
            for &tok in b.tokens {
                if tok as usize >= self.vocab_size {
                    return Err(EngineError::Internal(format!(
                        "token id {tok} is outside the vocabulary of {}",
                        self.vocab_size
                    )));
                }
                let row = &mut s.x[r * h..(r + 1) * h];
                self.embed.row(tok, row, &self.output)?;
                if let Some(scale) = cfg.embed_scale {
                    row.iter_mut().for_each(|v| *v *= scale);
                }
                r += 1;
            }
        }
        let eps = cfg.rms_eps as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            // Attention block.
            let kinds = [layer.q.act_kind(), layer.k.act_kind(), layer.v.act_kind()];
            self.norm_into(&mut s.acts, &s.x, t_all, &layer.attn_norm, eps, &kinds);
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [
                    (&layer.q, &mut s.q[..t_all * qw]),
                    (&layer.k, &mut s.k[..t_all * kvw]),
                    (&layer.v, &mut s.v[..t_all * kvw]),
                ],
            );
            self.bias_and_rope(s, layer, t_all);
            for (row, &(si, pos)) in s.rows.iter().enumerate() {
                kv.write(
                    batch[si].blocks[pos / BLOCK_TOKENS],
                    pos % BLOCK_TOKENS,
                    li,
                    &s.k[row * kvw..(row + 1) * kvw],
                    &s.v[row * kvw..(row + 1) * kvw],
                );
            }
            self.attention(s, kv, batch, li);
            let att = &s.att;
            s.acts.reset(t_all, qw, &[layer.o.act_kind()]);
            s.acts.fill(&self.pool, &|r, row| {
                row.copy_from_slice(&att[r * qw..(r + 1) * qw])
            });
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [(&layer.o, &mut s.tmp[..t_all * h])],
            );
            self.residual(s, layer.post_norms.as_ref().map(|[a, _]| a), t_all);
            // MLP block.
            let (gate_m, up_m, down_m) = match &layer.ffn {
                Ffn::Dense { gate, up, down } => (gate, up, down),
                Ffn::Moe(m) => {
                    self.moe_block(s, m, &layer.ffn_norm, t_all);
                    self.residual(s, layer.post_norms.as_ref().map(|[_, b]| b), t_all);
                    continue;
                }
            };
            let kinds = [gate_m.act_kind(), up_m.act_kind()];
            self.norm_into(&mut s.acts, &s.x, t_all, &layer.ffn_norm, eps, &kinds);
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [
                    (gate_m, &mut s.gate[..t_all * ff]),
                    (up_m, &mut s.up[..t_all * ff]),
                ],
            );
            let (gate, up, isa) = (SyncPtr(s.gate.as_mut_ptr()), &s.up, self.isa);
            let gelu = cfg.activation == Activation::GeluTanh;
            s.acts.reset(t_all, ff, &[down_m.act_kind()]);
            s.acts.fill(&self.pool, &|r, row| {
                // SAFETY: `fill` hands each row index to exactly one thread; `gate` holds `t_all * ff` values.
                let g = unsafe { gate.slice(r * ff, ff) };
                match gelu {
                    true => vector::gelu_mul(isa, g, &up[r * ff..(r + 1) * ff]),
                    false => vector::silu_mul(isa, g, &up[r * ff..(r + 1) * ff]),
                }
                row.copy_from_slice(g);
            });
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [(down_m, &mut s.tmp[..t_all * h])],
            );
            self.residual(s, layer.post_norms.as_ref().map(|[_, b]| b), t_all);
        }
        // The last rows of every sequence that wants logits: final norm and the output head.
        s.last.clear();
        let mut end = 0;
        for b in batch.iter() {
            end += b.tokens.len();
            let rows = b.logits.min(b.tokens.len());
            s.last.extend(end - rows..end);
        }
        if s.last.is_empty() {
            return Ok(vec![Vec::new(); batch.len()]);
        }
        let (x, norm, isa, last) = (&s.x, &self.norm, self.isa, &s.last);
        if output == StepOutput::Hidden {
            let mut rows = vec![0f32; last.len() * h];
            {
                let out = SyncPtr(rows.as_mut_ptr());
                self.pool.run(last.len(), &|i, _| {
                    // SAFETY: each row index is one item, run once; `rows` holds `last.len()` rows.
                    let row = unsafe { out.slice(i * h, h) };
                    let r = last[i];
                    vector::rms_norm(isa, row, &x[r * h..(r + 1) * h], norm, eps);
                });
            }
            let mut at = 0;
            return Ok(batch
                .iter()
                .map(|b| {
                    let n = b.logits.min(b.tokens.len()) * h;
                    at += n;
                    rows[at - n..at].to_vec()
                })
                .collect());
        }
        s.acts.reset(last.len(), h, &[self.output.act_kind()]);
        s.acts.fill(&self.pool, &|i, row| {
            let r = last[i];
            vector::rms_norm(isa, row, &x[r * h..(r + 1) * h], norm, eps);
        });
        // Into the reused scratch (a fresh zeroed vector per step cost a memset and page faults of a megabyte
        // and a half at 8 sequences), then one copy per sequence.
        let n = last.len() * self.vocab_size;
        grow(&mut s.logits, n);
        let logits = &mut s.logits[..n];
        matmul_many(&self.pool, &s.acts, &mut [(&self.output, logits)]);
        if let Some(cap) = cfg.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
        let mut at = 0;
        let out = batch
            .iter()
            .map(|b| {
                let n = b.logits.min(b.tokens.len()) * self.vocab_size;
                at += n;
                logits[at - n..at].to_vec()
            })
            .collect();
        // A batch of many logit rows (a prefill of many prompts, speculative verification) is not kept.
        if s.logits.len() * std::mem::size_of::<f32>() > MAX_KEPT_LOGITS_BYTES {
            s.logits = Vec::new();
        }
        Ok(out)
    }

    /// The mixture of experts of every row into `s.tmp`: rows RMS-normed, routed (see [`Moe::route`]), then per
    /// expert the rows it got, as one batch through its SwiGLU MLP, added in with their weights.
    fn moe_block(&self, s: &mut Scratch, m: &MoeFfn, norm: &[f32], t_all: usize) {
        let (h, ff, isa) = (self.config.hidden, m.moe.ff, self.isa);
        let eps = self.config.rms_eps as f32;
        grow(&mut s.normed, t_all * h);
        grow(&mut s.moe_out, t_all * h);
        {
            let (normed, x) = (SyncPtr(s.normed.as_mut_ptr()), &s.x);
            self.pool.run(t_all, &|r, _| {
                // SAFETY: each row is one item, run once; `normed` holds `t_all` rows (grown above).
                let out = unsafe { normed.slice(r * h, h) };
                vector::rms_norm(isa, out, &x[r * h..(r + 1) * h], norm, eps);
            });
        }
        let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); m.moe.experts];
        for r in 0..t_all {
            let row = &s.normed[r * h..(r + 1) * h];
            let logits: Vec<f32> = m
                .router
                .chunks_exact(h)
                .map(|w| vector::dot(isa, w, row))
                .collect();
            for (e, w) in m.moe.route(&logits) {
                routed[e].push((r, w));
            }
        }
        s.tmp[..t_all * h].fill(0.0);
        for (e, rows) in routed.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let n = rows.len();
            let normed = &s.normed;
            s.acts
                .reset(n, h, &[m.gate[e].act_kind(), m.up[e].act_kind()]);
            s.acts.fill(&self.pool, &|i, row| {
                let r = rows[i].0;
                row.copy_from_slice(&normed[r * h..(r + 1) * h]);
            });
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [
                    (&m.gate[e], &mut s.gate[..n * ff]),
                    (&m.up[e], &mut s.up[..n * ff]),
                ],
            );
            let (gate, up) = (SyncPtr(s.gate.as_mut_ptr()), &s.up);
            s.acts.reset(n, ff, &[m.down[e].act_kind()]);
            s.acts.fill(&self.pool, &|i, row| {
                // SAFETY: `fill` hands each row index to exactly one thread; `gate` holds `n * ff` values.
                let g = unsafe { gate.slice(i * ff, ff) };
                vector::silu_mul(isa, g, &up[i * ff..(i + 1) * ff]);
                row.copy_from_slice(g);
            });
            matmul_many(
                &self.pool,
                &s.acts,
                &mut [(&m.down[e], &mut s.moe_out[..n * h])],
            );
            for (i, &(r, w)) in rows.iter().enumerate() {
                vector::axpy(
                    isa,
                    &mut s.tmp[r * h..(r + 1) * h],
                    w,
                    &s.moe_out[i * h..(i + 1) * h],
                );
            }
        }
    }

    /// `x += tmp`, with `tmp`'s rows RMS-normed by `post_norm` first when there is one (Gemma).
    fn residual(&self, s: &mut Scratch, post_norm: Option<&Vec<f32>>, t_all: usize) {
        let h = self.config.hidden;
        let Some(w) = post_norm else {
            return vector::add(self.isa, &mut s.x[..t_all * h], &s.tmp[..t_all * h]);
        };
        let (eps, isa) = (self.config.rms_eps as f32, self.isa);
        let (normed, tmp) = (SyncPtr(s.normed.as_mut_ptr()), &s.tmp);
        self.pool.run(t_all, &|r, _| {
            // SAFETY: each row is one item, run once; `normed` holds `t_all` rows (grown in forward_batch).
            let out = unsafe { normed.slice(r * h, h) };
            vector::rms_norm(isa, out, &tmp[r * h..(r + 1) * h], w, eps);
        });
        vector::add(self.isa, &mut s.x[..t_all * h], &s.normed[..t_all * h]);
    }

    /// RMS-norms `t` rows of `x` with `w` into `acts`, quantized for `kinds` in the same pass.
    fn norm_into(
        &self,
        acts: &mut Acts,
        x: &[f32],
        t: usize,
        w: &[f32],
        eps: f32,
        kinds: &[ActKind],
    ) {
        let h = self.config.hidden;
        let isa = self.isa;
        acts.reset(t, h, kinds);
        acts.fill(&self.pool, &|r, row| {
            vector::rms_norm(isa, row, &x[r * h..(r + 1) * h], w, eps)
        });
    }

    /// Adds the q/k/v biases (qwen2) and rotates q and k of every row by its position.
    fn bias_and_rope(&self, s: &mut Scratch, layer: &Layer, t_all: usize) {
        let cfg = &self.config;
        let d = cfg.head_dim;
        let (qw, kvw) = (cfg.n_head * d, cfg.n_kv_head * d);
        let (rot, half) = (cfg.rope_dims, cfg.rope_dims / 2);
        let neox = cfg.rope_style == RopeStyle::Neox;
        let (cos_t, sin_t) = match (&self.swa_tables, layer.swa) {
            (Some((c, s)), true) => (c, s),
            _ => (&self.cos, &self.sin),
        };
        let (q, k, v) = (
            SyncPtr(s.q.as_mut_ptr()),
            SyncPtr(s.k.as_mut_ptr()),
            SyncPtr(s.v.as_mut_ptr()),
        );
        let rows = &s.rows;
        self.pool.run(t_all, &|r, _| {
            {
                // SAFETY: each row is one item, run once; the buffers hold `t_all` rows.
                let (qr, kr, vr) = unsafe {
                    (
                        q.slice(r * qw, qw),
                        k.slice(r * kvw, kvw),
                        v.slice(r * kvw, kvw),
                    )
                };
                if let Some([bq, bk, bv]) = &layer.bias {
                    vector::add(self.isa, qr, bq);
                    vector::add(self.isa, kr, bk);
                    vector::add(self.isa, vr, bv);
                }
                if let Some([wq, wk]) = &layer.qk_norm {
                    let eps = cfg.rms_eps as f32;
                    let mut normed = [0f32; MAX_HEAD_DIM];
                    for (heads, w) in [(&mut *qr, wq), (&mut *kr, wk)] {
                        for head in heads.chunks_exact_mut(d) {
                            vector::rms_norm(self.isa, &mut normed[..d], head, w, eps);
                            head.copy_from_slice(&normed[..d]);
                        }
                    }
                }
                let pos = rows[r].1;
                let (cos, sin) = (
                    &cos_t[pos * half..(pos + 1) * half],
                    &sin_t[pos * half..(pos + 1) * half],
                );
                for head in qr.chunks_exact_mut(d).chain(kr.chunks_exact_mut(d)) {
                    vector::rope(&mut head[..rot], cos, sin, neox);
                }
            }
        });
    }

    /// Causal grouped-query attention of every row over its own sequence's blocks, into `s.att` (see
    /// [`attention::attend`]: tiles of rows per KV head, an online softmax over fixed chunks of positions, so the
    /// same sums in the same order whatever the batch).
    fn attention(&self, s: &mut Scratch, kv: &KvBlocks, batch: &[BatchSeq<'_>], layer: usize) {
        let cfg = &self.config;
        let heads = attention::Heads {
            head_dim: cfg.head_dim,
            n_head: cfg.n_head,
            n_kv: cfg.n_kv_head,
            scale: cfg.attn_scale,
        };
        let window = match self.layers[layer].swa {
            true => cfg.sliding_window.as_ref(),
            false => None,
        };
        let tables: Vec<&[u32]> = batch.iter().map(|b| b.blocks).collect();
        attention::attend(
            &self.pool,
            self.isa,
            &heads,
            kv,
            layer,
            window,
            &tables,
            &s.rows,
            &s.q,
            &mut s.att,
            &mut s.scores,
        );
    }
}
