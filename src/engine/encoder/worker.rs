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
    let lengths: Vec<usize> = order.iter().map(|&i| all[i].len()).collect();
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); all.len()];
    let mut start = 0;
    for end in batch_ends(&lengths) {
        let chunk = &order[start..end];
        start = end;
        let batch: Vec<&[u32]> = chunk.iter().map(|&i| all[i]).collect();
        let vectors = encoder.encode_batch(&batch)?;
        for (&i, v) in chunk.iter().zip(vectors) {
            out[i] = v;
        }
    }
    Ok(out)
}

/// Where batches of the ascending `lengths` end: at most [`MAX_BATCH`] sequences, and a batch stops growing once
/// padding to its longest would waste more than a quarter of its work (a batch pads to its last, longest one).
fn batch_ends(lengths: &[usize]) -> Vec<usize> {
    const MIN_BATCH: usize = 4;
    let mut ends = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, &len) in lengths.iter().enumerate() {
        let count = i - start;
        let padded = (count + 1) * len;
        if count == MAX_BATCH || (count >= MIN_BATCH && 4 * padded > 5 * (sum + len)) {
            ends.push(i);
            start = i;
            sum = 0;
        }
        sum += len;
    }
    if start < lengths.len() {
        ends.push(lengths.len());
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_within_the_size_and_the_padding_bound() {
        assert_eq!(batch_ends(&[]), Vec::<usize>::new());
        assert_eq!(batch_ends(&[5; 70]), vec![32, 64, 70]);
        // Short ones together, long ones apart: 4 x 10 then 3 x 100 (padding 10 to 100 would waste 90%).
        assert_eq!(batch_ends(&[10, 10, 10, 10, 100, 100, 100]), vec![4, 7]);
        // A gentle spread stays one batch.
        let gentle: Vec<usize> = (20..30).collect();
        assert_eq!(batch_ends(&gentle), vec![10]);
    }
}
