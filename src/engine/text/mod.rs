//! Tokens ↔ text, no weights: the tokenizer built from GGUF metadata (`tokenizer/`, SentencePiece in
//! `spm.rs`), the chat template and rendering a chat with tools into prompt tokens (`template.rs`,
//! `chat_prompt.rs`), fill-in-the-middle prompts (`fim.rs`), reasoning markers (`reasoning.rs`), the guard against content that would read as a call
//! (`content_guard.rs`) and streaming detokenisation (`detok.rs`).

pub mod chat_prompt;
pub(crate) mod content_guard;
pub(crate) mod detok;
pub mod fim;
pub mod reasoning;
pub mod render_budget;
pub(crate) mod spm;
pub mod template;
pub mod tokenizer;
