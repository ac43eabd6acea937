//! The local inference engine: model files (manifests, fetching, GGUF), the tokenizer and chat template built
//! from GGUF metadata, the model forward passes, sampling, and the engine actor that owns the model on its own
//! thread, where the scheduler batches every running sequence into one forward pass over a paged KV cache.

pub mod actor;
pub mod blocks;
pub mod constraint;
pub mod content_guard;
pub mod cpu;
pub mod detok;
pub mod device;
pub mod error;
pub mod fetch;
pub mod generate;
pub mod gguf;
pub mod gguf_write;
pub mod hf_folder;
mod hub;
pub mod kv;
pub mod manifest;
pub mod model;
pub mod ops;
pub mod paged_kv;
pub mod parity;
mod pip_wheel;
pub mod prefix_cache;
pub mod prompt;
pub mod reasoning;
pub mod sampler;
pub mod scheduler;
pub mod sequence;
pub mod speculative;
pub mod spm;
pub mod staging;
pub mod synth;
pub mod template;
pub mod tokenizer;

pub use actor::{Completion, Engine, EngineOptions, ModelInfo};
pub use error::EngineError;
