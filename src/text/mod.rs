//! Tokens ↔ text, no weights, no tensor library: what a model's text side needs, for the local engine and for a
//! remote model alike (exact token counts in front of vLLM). A GGUF's metadata (`gguf_meta.rs`), the tokenizer
//! built from it (`tokenizer/`, SentencePiece in `spm.rs`), the chat template and rendering a chat with tools
//! into prompt tokens (`template.rs`, `chat_prompt.rs`, `render_budget.rs` for its limits), how each model family
//! writes tool calls (`call_format.rs`), fill-in-the-middle prompts (`fim.rs`), reasoning markers
//! (`reasoning.rs`), the guard against content that would read as a call (`content_guard.rs`) and streaming
//! detokenisation (`detok.rs`). Imports only `schema`; the engine and the provider import it.

pub mod call_format;
pub mod chat_prompt;
pub(crate) mod content_guard;
#[cfg(feature = "local")]
pub(crate) mod detok;
pub mod error;
pub mod fim;
pub mod gguf_meta;
pub mod reasoning;
pub mod render_budget;
pub(crate) mod spm;
pub mod template;
pub mod tokenizer;

pub use call_format::ToolCallFormat;
pub use chat_prompt::chat_prompt_tokens;
pub use error::TextError;
pub use gguf_meta::{GgufMetadata, MetaValue, Metadata};
pub use template::ChatTemplate;
pub use tokenizer::Tokenizer;
