//! The OpenAI wire types the server speaks: requests as clients send them (unknown fields are ignored, as
//! OpenAI's and vLLM's servers do) and responses, streamed chunks and usage as the official SDK parses them.
//! These are the server's own types; the remote provider has its client-side ones.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::server::usage::{
    CompletionTokensDetails, PromptTokensDetails, TokenLogprobOut, TopLogprobOut, UsageInfo,
};

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

impl StopField {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopField::One(s) => vec![s],
            StopField::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Message content: a string, or a list of content parts (only text parts are understood).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A function call inside an assistant message.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct MessageToolCall {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub function: MessageFunction,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct MessageFunction {
    pub name: String,
    /// The arguments as JSON text (as OpenAI sends them); an object is accepted too.
    #[serde(default)]
    pub arguments: Value,
}

/// One message of `messages`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        content: Content,
    },
    Developer {
        content: Content,
    },
    User {
        content: Content,
    },
    Assistant {
        #[serde(default)]
        content: Option<Content>,
        #[serde(default)]
        tool_calls: Option<Vec<MessageToolCall>>,
    },
    Tool {
        content: Content,
        tool_call_id: String,
    },
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    /// vLLM's extension; -1 or 0 disables.
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    /// Token ids (as strings) to a bias added to their logits, in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f32>>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// vLLM's and llama.cpp's extension: keep generating through end-of-sequence up to `max_tokens`.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// How much a reasoning model thinks: `none`/`minimal`/`low`/`medium`/`high` (OpenAI's names; `none` turns
    /// thinking off where the template can).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Extra chat-template variables (vLLM's); `enable_thinking` is honoured.
    #[serde(default)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// Names the end user; also keys the engine's prefix cache.
    #[serde(default)]
    pub user: Option<String>,
    /// vLLM's extension: continue the last message (the assistant's text) instead of answering it.
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// vLLM's extension; only `false` goes with `continue_final_message` (and is what it implies).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// vLLM's and llama.cpp's output constraints (`structured_outputs`, `guided_*`, `grammar`, `json_schema`).
    #[serde(flatten)]
    pub constraint: crate::server::constraint_fields::ConstraintFields,
}

/// `prompt` of `/v1/completions`: text, token ids, or a batch of either.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum PromptField {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenBatches(Vec<Vec<u32>>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct CompletionsRequest {
    #[serde(default)]
    pub model: String,
    pub prompt: PromptField,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    /// Token ids (as strings) to a bias added to their logits, in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f32>>,
    #[serde(default)]
    pub stop: Option<StopField>,
    /// The number of most likely alternatives to return per token (0 still returns the chosen token's).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub best_of: Option<u32>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    #[serde(default)]
    pub user: Option<String>,
    /// JSON output (vLLM takes OpenAI's chat field here too).
    #[serde(default)]
    pub response_format: Option<Value>,
    /// vLLM's and llama.cpp's output constraints (`structured_outputs`, `guided_*`, `grammar`, `json_schema`).
    #[serde(flatten)]
    pub constraint: crate::server::constraint_fields::ConstraintFields,
}

/// `usage` of every response.
/// A tool call in a response message or a streamed delta. In a delta only the first fragment of a call
/// carries `id`, `type` and `function.name`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCallOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionOut,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FunctionOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChoiceLogprobs {
    pub content: Vec<TokenLogprobOut>,
}

/// The assistant's message in a non-streamed response.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ResponseMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ResponseMessage,
    pub logprobs: Option<ChoiceLogprobs>,
    pub finish_reason: &'static str,
}

/// `chat.completion`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageInfo,
    /// llama.cpp's server-side timings, when the provider measured them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<crate::server::timings::LlamaTimings>,
}

/// The `delta` of a streamed chunk.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: ChunkDelta,
    pub logprobs: Option<ChoiceLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// `chat.completion.chunk`. `usage` is present (null until the last chunk) when the client asked for it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<UsageInfo>>,
    /// llama.cpp's server-side timings, on the chunk that ends the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<crate::server::timings::LlamaTimings>,
}

/// `logprobs` of a `/v1/completions` choice (the legacy shape).
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<serde_json::Map<String, Value>>>,
    pub text_offset: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// `text_completion` (the whole response and each streamed chunk).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<UsageInfo>>,
    /// llama.cpp's server-side timings (the whole answer's; on the last streamed chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<crate::server::timings::LlamaTimings>,
}

pub use crate::env::now_unix;

/// A fresh response id with OpenAI's prefix (`chatcmpl-…`, `cmpl-…`).
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}
