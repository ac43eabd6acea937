//! The local inference engine. Folders by concern, arrows pointing down (checked by `tests/suite/layers/`); the
//! text side of a model (tokenizer, template, tool-call formats, GGUF metadata) is the crate's `text` layer below:
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
//! files/       where a model file comes from: manifest, fetch, sources, staging, HF folders, synth → arch
//! request.rs   requests, events, FinishReason, validation; parity.rs  logits against a reference model
//! leaves:      error, device, gguf (tensors mapped; metadata in text's types), sampler, speculative
//! microbench.rs  the entry points `benches/` time, re-exported (nothing imports it)
//! ```
//!
//! **The engine's API is the list of names re-exported below**, plus two public concerns, `files` (resolving,
//! fetching, listing and synthesising model files) and `parity` (logits against a reference model, for `bench
//! parity`), and `microbench`, the few internals the micro-benchmarks time (a bench's surface, not an API).
//! Other layers of the crate use only those (`tests/suite/layers/` checks it). The folders are
//! reachable from outside only so the integration tests and benches can test the parts one by one; they are
//! hidden from the docs and are not an API. Inside them, a module nothing outside the engine names is `pub(crate)`.

#[doc(hidden)]
pub mod arch;
#[doc(hidden)]
pub mod backend;
#[doc(hidden)]
pub mod candle;
#[doc(hidden)]
pub mod constraint;
#[doc(hidden)]
pub mod cpu;
mod decoder_embed;
#[doc(hidden)]
pub mod device;
#[doc(hidden)]
pub mod encoder;
#[doc(hidden)]
pub mod error;
pub mod files;
#[doc(hidden)]
pub mod gguf;
#[doc(hidden)]
pub mod kv;
pub mod microbench;
pub mod parity;
#[doc(hidden)]
pub mod request;
#[doc(hidden)]
pub mod runtime;
#[doc(hidden)]
pub mod sampler;
#[doc(hidden)]
pub mod speculative;
#[cfg(test)]
mod test_models;
#[doc(hidden)]
pub mod tool_calls;

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
