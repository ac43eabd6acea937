//! An [`Encoder`] on its own thread (the engine's work never runs on the async runtime): requests queue on a
//! channel, and what is waiting when the thread is free is merged, sorted by length and run in padded batches
//! of at most [`MAX_BATCH`] sequences, so concurrent small requests share forward passes and long and short
//! texts are not padded to each other. Each request gets its own vectors back on its own reply channel.

use std::sync::mpsc;
use std::sync::Arc;

use super::{Encoder, EncoderInfo, EncoderTokenizer};
use crate::engine::error::{EngineError, Result};

/// Sequences in one forward pass.
pub const MAX_BATCH: usize = 32;
/// Sequences merged from waiting requests before the thread starts on them.
const MAX_MERGED: usize = 256;

struct Job {
    inputs: Vec<Vec<u32>>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>>>,
}

/// A handle on an encoder thread; cheap to clone. The thread ends when the last handle is dropped.
#[derive(Clone)]
pub struct EncoderHandle {
    jobs: mpsc::Sender<Job>,
    info: Arc<EncoderInfo>,
    tokenizer: Arc<EncoderTokenizer>,
}

impl EncoderHandle {
    /// Starts `encoder`'s thread.
    pub fn spawn(encoder: Encoder) -> Result<EncoderHandle> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let info = Arc::new(encoder.info().clone());
        let tokenizer = Arc::new(encoder.tokenizer().clone());
        std::thread::Builder::new()
            .name("agentd-encoder".into())
            .spawn(move || run(encoder, queue))
            .map_err(|e| EngineError::io("starting the encoder thread", e))?;
        Ok(EncoderHandle {
            jobs,
            info,
            tokenizer,
        })
    }

    pub fn info(&self) -> &EncoderInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &EncoderTokenizer {
        &self.tokenizer
    }

    /// One vector per sequence of ids (each non-empty, within the window and the vocabulary).
    pub async fn encode(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job { inputs, reply })
            .map_err(|_| EngineError::Internal("the encoder thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| EngineError::Internal("the encoder thread dropped a request".into()))?
    }
}

fn run(encoder: Encoder, queue: mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        let mut merged = jobs[0].inputs.len();
        while merged < MAX_MERGED {
            match queue.try_recv() {
                Ok(job) => {
                    merged += job.inputs.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let all: Vec<&[u32]> = jobs
            .iter()
            .flat_map(|j| j.inputs.iter().map(Vec::as_slice))
            .collect();
        match encode_sorted(&encoder, &all) {
            Ok(mut vectors) => {
                for job in jobs {
                    let rest = vectors.split_off(job.inputs.len());
                    let _ = job.reply.send(Ok(std::mem::replace(&mut vectors, rest)));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for job in jobs {
                    let _ = job.reply.send(Err(EngineError::Internal(message.clone())));
                }
            }
        }
    }
}

/// `all`'s vectors in `all`'s order, computed in batches of similar lengths.
fn encode_sorted(encoder: &Encoder, all: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by_key(|&i| all[i].len());
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); all.len()];
    for chunk in order.chunks(MAX_BATCH) {
        let batch: Vec<&[u32]> = chunk.iter().map(|&i| all[i]).collect();
        let vectors = encoder.encode_batch(&batch)?;
        for (&i, v) in chunk.iter().zip(vectors) {
            out[i] = v;
        }
    }
    Ok(out)
}
