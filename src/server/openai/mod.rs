//! The OpenAI-compatible routes: chat completions (through the configured provider), completions, models,
//! and vLLM's tokenize/detokenize, with their wire types and request checks.

pub mod chat;
pub mod completions;
pub mod convert;
pub mod models;
pub mod responses;
pub mod tokenize;
pub mod types;
