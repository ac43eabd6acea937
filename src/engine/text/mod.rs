//! Tokens ↔ text, no weights: the tokenizer built from GGUF metadata (`tokenizer.rs`, SentencePiece in
//! `spm.rs`), the chat template and rendering a chat with tools into prompt tokens (`template.rs`,
//! `chat_prompt.rs`), fill-in-the-middle prompts (`fim.rs`), reasoning markers (`reasoning.rs`), the guard against content that would read as a call
//! (`content_guard.rs`), streaming detokenisation (`detok.rs`) and a GGUF's metadata read without a tensor
//! library (`gguf_meta.rs`).

pub mod chat_prompt;
pub(crate) mod content_guard;
pub(crate) mod detok;
pub mod fim;
pub mod gguf_meta;
pub mod reasoning;
pub mod render_budget;
pub(crate) mod spm;
pub mod template;
pub mod tokenizer;
