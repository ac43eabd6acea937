//! The local inference engine. Folders by concern, arrows pointing down (checked by `tests/suite/layers/`); the
//! text side of a model (tokenizer, template, tool-call formats, GGUF metadata) is the crate's `text` layer below,
//! and finding and fetching a model file is the crate's `model_files` layer:
//!
//! ```text
//! runtime/     the engine thread: actor, scheduler, sequence           → everything below; nothing imports it
//! tool_calls/  generated text → content + calls                        → constraint, request
//! constraint/  one llguidance grammar per request                      → sampler
//! backend.rs   a loaded model on its backend: our CPU engine or candle → cpu, candle, arch, kv
//! cpu/         our forward pass and kernels     candle/  candle's forward pass and our CUDA ops
//!              (cpu and candle never import each other)                → arch, kv
//! kv/          KV memory, no math: paged stores, block manager, BLOCK_TOKENS
//! arch/        what an architecture is: DecoderConfig, per-family hyper-parameters, the one weight loader
//! encoder/     text encoders (BERT folders) → one vector per text, on their own thread → device, error
//! files/       model files the engine writes: HF folders converted to GGUF, synthetic models → arch, gguf
//! request.rs   requests, events, FinishReason, validation; parity.rs  logits against a reference model
//! leaves:      error, device, gguf (tensors mapped; metadata in text's types), sampler, speculative
//! microbench.rs  the entry points `benches/` time, re-exported (nothing imports it)
//! ```
//!
//! **The engine's API is the list of names re-exported below**, plus three public concerns: `files` (resolving a
//! model to the GGUF the engine loads, converting folders, synthesising models), `parity` (logits against a
//! reference model, for `bench parity`) and `microbench`, the few internals the micro-benchmarks time (a bench's
//! surface, not an API). The folders are private, so the compiler holds the rest of the crate, the binary, the
//! integration tests and the benches to those names; a part tested on its own is tested beside its code, in
//! `#[cfg(test)]` modules (those that need a real model find it through `test_models`).

mod arch;
mod backend;
mod candle;
mod constraint;
mod cpu;
mod decoder_embed;
mod device;
mod encoder;
mod error;
pub mod files;
mod gguf;
mod kv;
pub mod microbench;
pub mod parity;
mod request;
mod runtime;
mod sampler;
mod speculative;
#[cfg(test)]
mod test_models;
mod tool_calls;

// The engine thread and what one asks of it.
pub use error::{EngineError, Result};
pub use kv::KvDtype;
pub use request::{
    FinishReason, GenerateEvent, GenerateRequest, GenerateSummary, TokenEvent, TokenLogprob,
};
pub use runtime::actor::{Completion, Engine, EngineOptions, ModelInfo};
pub use runtime::scheduler::{
    SchedulerConfig, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
};
pub use sampler::SamplingParams;
pub use speculative::{SpecMethod, SpeculativeConfig, MAX_SPECULATIVE_TOKENS};

// The output's shape: the grammar a request asks for and how its calls come back.
pub use crate::text::ToolCallFormat;
pub use constraint::{ConstraintSpec, ConstraintStats, GrammarFactory};
// `EngineToolCall`: a finished call as the engine parsed it (the provider layer has its own `ToolCall`).
pub use tool_calls::{OutputAssembler, OutputDelta, ToolCall as EngineToolCall};

// Text without weights (the text layer's, named here for the engine's callers).
pub use crate::text::fim::{
    indent_cut as fim_indent_cut, layout as fim_layout, suffix_stops as fim_suffix_stops,
    ExtraFile as FimExtraFile, FimBudget, FimInput, FimPrompt, FimTokens,
};
pub use crate::text::reasoning::{Piece as ReasoningPiece, ReasoningSplitter};
pub use crate::text::{chat_prompt_tokens, ChatTemplate, Tokenizer};

// The model and the machine it runs on. `Model`: one loaded model driven by hand (`parity`, tests), whose
// `config` is a `DecoderConfig` and whose `forward` gives the logits `argmax` reads greedily.
pub use arch::weights::WeightFormat;
pub use arch::{Architecture, DecoderConfig};
pub use backend::Model;
pub use candle::fused::{check as kernel_check, Kernels};
pub use device::{
    auto_summary as device_summary, cpu_threads, init_threads, select as select_device, DeviceSpec,
};
pub use gguf::GgufFile;
pub use sampler::argmax;

// Encoders: text → one vector (embeddings).
pub use encoder::worker::{EncoderHandle, MAX_BATCH as ENCODER_MAX_BATCH};
pub use encoder::{is_encoder_folder, Encoder, EncoderInfo, Pooling, PoolingConfig};
