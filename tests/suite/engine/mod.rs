//! The engine layer: tokenizers, chat templates, grammars, model files and generation on real and synthetic
//! checkpoints.

mod auto_calls;
mod batching;
pub mod constraint;
mod content_guard;
mod cpu_engine;
mod cuda;
mod generate;
mod hf_folder;
mod hostile_files;
mod real_checkpoints;
mod schemas;
mod speculative;
mod synth;
mod template;
mod tokenizer;
mod tool_calls;
mod workspace_grammar;
