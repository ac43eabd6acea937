//! Embedding requests and answers at the provider boundary: texts or token ids in, one vector per input out,
//! with the tokens counted (every door's usage) and the time spent waiting for the model to load.

use serde::{Deserialize, Serialize};

use super::KeepAlive;

/// Most inputs one request may carry (OpenAI's limit).
pub const MAX_EMBED_INPUTS: usize = 2048;

/// One input to embed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbedInput {
    /// Text, tokenized with the model's tokenizer (its special tokens added).
    Text(String),
    /// Token ids given as they are: the model's whole input, special tokens included.
    Tokens(Vec<u32>),
}

/// An embedding request.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    /// The model id; empty means the provider's default model.
    pub model: String,
    pub inputs: Vec<EmbedInput>,
    /// Cut an input longer than the model's window to the window (else the request is refused).
    pub truncate: bool,
    /// How long the model stays loaded after this request (Ollama's `keep_alive`).
    pub keep_alive: Option<KeepAlive>,
}

/// The vectors of an [`EmbedRequest`], in its inputs' order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    /// The model that made them.
    pub model: String,
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of every input together, as the model saw them (after truncation).
    pub prompt_tokens: u64,
    /// Seconds the request waited for its model to load (0 when it was loaded).
    pub load_secs: f64,
}
