//! The provider boundary's data: the conversation a model sees ([`Message`]), what is asked of it
//! ([`CompletionRequest`]), and what streams back ([`ProviderEvent`], ending in an [`AssistantMessage`] with
//! [`Usage`] and a [`StopReason`]). Every type is plain serde data so transcripts, sessions and logs can store it.
//!
//! JSON shapes: messages are tagged by `role` (`user` | `assistant` | `tool_result`), like Pi's and OpenAI's
//! messages; content blocks, events, tool choices and response formats are tagged by `type`; all tags are
//! snake_case.

use serde::{Deserialize, Serialize};

mod infill;

pub use infill::{Infill, InfillFile};

use super::{ResponseFormat, ToolChoice, ToolSpec};

mod embed;
mod load;
mod sampling;
pub use embed::{EmbedInput, EmbedRequest, Embeddings, MAX_EMBED_INPUTS};
pub use load::{EngineLoad, PrefixCacheCounts, SpecDecodeCounts};
pub use sampling::{
    Sampling, DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, LOGIT_BIAS_RANGE,
    REPETITION_PENALTY_RANGE,
};

/// One message of the conversation the model sees (the system prompt travels separately, in
/// [`CompletionRequest::system`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResultMessage),
}

impl Message {
    /// A user message with this text.
    pub fn user(text: impl Into<String>) -> Self {
        Message::User(UserMessage {
            content: text.into(),
        })
    }

    /// A tool result answering `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>, is_error: bool) -> Self {
        Message::ToolResult(ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: content.into(),
            is_error,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    pub content: String,
}

/// What the model said: text, reasoning and tool calls, in the order they were produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub content: Vec<ContentBlock>,
}

impl AssistantMessage {
    /// All text blocks, concatenated.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// All thinking blocks, concatenated.
    pub fn thinking(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Thinking { thinking } => Some(thinking.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls, in call order.
    pub fn tool_calls(&self) -> Vec<&ToolCall> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall(c) => Some(c),
                _ => None,
            })
            .collect()
    }
}

/// One piece of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Reasoning the model produced before answering (`reasoning_content` on vLLM). Never sent back to a model.
    Thinking {
        thinking: String,
    },
    ToolCall(ToolCall),
}

/// A tool call as the model made it.
///
/// **Invalid calls are data, not errors.** When the model named a tool that was not offered, or wrote
/// arguments that are not JSON or do not match the tool's schema, the call still arrives (in events and in the
/// final message) with [`invalid`](Self::invalid) set. The agent must not execute such a call; it answers it
/// with `Message::tool_result(&call, invalid.message_for_model(), true)` so the model can correct itself on the
/// next turn. On the local engine calls are grammar-constrained and `invalid` is always `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Unique within the conversation (`call_…`); the matching tool result carries it back.
    pub id: String,
    pub name: String,
    /// The parsed arguments (a JSON object for a valid call). `Null` when the model's text was not JSON; the
    /// text itself is then in [`InvalidToolCall::raw_arguments`].
    pub arguments: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<InvalidToolCall>,
}

impl ToolCall {
    /// A valid call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            invalid: None,
        }
    }

    /// The arguments as the JSON text a model wrote (or would have written): what goes back on the wire.
    pub fn arguments_text(&self) -> String {
        match &self.invalid {
            Some(InvalidToolCall {
                raw_arguments: Some(raw),
                ..
            }) => raw.clone(),
            _ => self.arguments.to_string(),
        }
    }
}

/// Why a tool call cannot be executed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvalidToolCall {
    pub kind: InvalidToolCallKind,
    /// What is wrong, in words meant for the model (it names the tool, the problem and what was received).
    pub message: String,
    /// The arguments text exactly as received, when it could not be parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl InvalidToolCall {
    /// The text of the `is_error` tool result the agent sends back for this call.
    pub fn message_for_model(&self) -> &str {
        &self.message
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidToolCallKind {
    /// The name is not one of the request's tools.
    UnknownTool,
    /// The arguments are not a JSON document.
    InvalidJson,
    /// The arguments are JSON but break the tool's schema.
    SchemaViolation,
    /// The output token limit cut the call. Where the engine could, it closed the call in the fewest tokens the
    /// grammar allows, so the arguments are valid JSON, but they are not what the model meant to finish.
    Truncated,
}

/// The answer to a tool call. `content` is what the model reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultMessage {
    pub tool_call_id: String,
    pub tool_name: String,
    pub content: String,
    #[serde(default)]
    pub is_error: bool,
}

/// Token accounting of one completion. On the local engine every number is exact; remote numbers are the
/// server's (zero when it sent none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, including the cached ones.
    pub input: u64,
    /// Generated tokens.
    pub output: u64,
    /// Prompt tokens whose KV state was reused (prefix cache).
    pub cached_input: u64,
    /// `input + output`.
    pub total: u64,
    /// Speculative decoding: draft tokens verified, and those accepted (output tokens that cost no decode step
    /// of their own). Zero where nothing was drafted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draft_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accepted_draft_tokens: u64,
    /// Where the time went on the server, when the provider measures it (the local engine does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A completion's time on the server, in nanoseconds (Ollama's unit): waiting for its model to load, waiting in
/// the engine for a batch slot, computing the prompt (to the first token) and generating the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    pub load_ns: u64,
    pub queue_ns: u64,
    pub prefill_ns: u64,
    pub decode_ns: u64,
}

impl Timings {
    /// Seconds as nanoseconds (negative and non-finite as 0).
    pub fn ns(secs: f64) -> u64 {
        if secs.is_finite() && secs > 0.0 {
            (secs * 1e9) as u64
        } else {
            0
        }
    }

    pub fn prefill_secs(&self) -> f64 {
        self.prefill_ns as f64 / 1e9
    }

    pub fn decode_secs(&self) -> f64 {
        self.decode_ns as f64 / 1e9
    }
}

impl Usage {
    pub fn new(input: u64, output: u64, cached_input: u64) -> Self {
        Self {
            input,
            output,
            cached_input,
            total: input + output,
            draft_tokens: 0,
            accepted_draft_tokens: 0,
            timings: None,
        }
    }
}

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished (end of turn or a stop string).
    Stop,
    /// `max_tokens` or the context window was reached; the message may be cut mid-sentence or mid-call.
    Length,
    /// The model called tools and waits for their results.
    ToolUse,
    /// The request failed.
    Error,
    /// The request was cancelled.
    Aborted,
}

/// How a failed stream ended (the `reason` of [`ProviderEvent::Error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorReason {
    Error,
    Aborted,
}

/// One request to a model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    /// The model id; empty means the provider's default model.
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    /// `Some(false)`: at most one tool call. `None`: the provider's default (allowed).
    pub parallel_tool_calls: Option<bool>,
    pub response_format: ResponseFormat,
    pub sampling: Sampling,
    /// Most tokens to generate; `None` leaves it to the provider (the local engine stops at the context window).
    pub max_tokens: Option<u32>,
    /// Stop strings (not included in the output).
    pub stop: Vec<String>,
    /// Names the conversation so the local engine can reuse its KV prefix (an agent session id, say). A key
    /// names a sequence within the request's [`cache_scope`](Self::cache_scope) only.
    pub cache_key: Option<String>,
    /// Who may share KV prefixes with whom: requests of different scopes never reuse each other's cached
    /// prefixes (the server sets it per API key / session). `None` (the default) is a scope of its own, shared
    /// by every unscoped request.
    pub cache_scope: Option<String>,
    /// Report the log-probability of every generated token with this many alternatives (`Some(0)`: the token's
    /// own only) as [`ProviderEvent::Logprobs`] events.
    pub logprobs: Option<usize>,
    /// Keep generating through end-of-sequence up to `max_tokens` (benchmarks; not under tools or a
    /// `response_format`, where the grammar decides the end).
    pub ignore_eos: bool,
    /// How much a reasoning model should think (`None`: the model's default). Remote servers get
    /// `reasoning_effort` and `chat_template_kwargs.enable_thinking`.
    pub thinking: Option<Thinking>,
    /// Continue the last message, the assistant's text, instead of answering it with a new one: an **assistant
    /// prefill** (vLLM's `continue_final_message`; Anthropic's Messages API does so whenever the last message is
    /// the assistant's). See [`prefill`](Self::prefill).
    pub continue_final_message: bool,
    /// How long the model stays loaded after this request (`None`: the server's default).
    pub keep_alive: Option<KeepAlive>,
}

/// How much a reasoning model thinks before it answers (Pi's thinking level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thinking {
    Off,
    Minimal,
    Low,
    Medium,
    High,
}

impl Thinking {
    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Off => "off",
            Thinking::Minimal => "minimal",
            Thinking::Low => "low",
            Thinking::Medium => "medium",
            Thinking::High => "high",
        }
    }
}

impl std::fmt::Display for Thinking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Thinking {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.trim().to_ascii_lowercase())).map_err(
            |_| format!("unknown thinking level '{s}' (known: off, minimal, low, medium, high)"),
        )
    }
}

impl CompletionRequest {
    /// A request with one user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(text)],
            ..Self::default()
        }
    }

    /// With [`continue_final_message`](Self::continue_final_message), the text of the last message when it is
    /// the assistant's and holds only text: the start of the reply, which the model continues. The stream then
    /// carries only the continuation. `None` otherwise (a request that asks to continue something else is one
    /// the doors refuse).
    pub fn prefill(&self) -> Option<&str> {
        if !self.continue_final_message {
            return None;
        }
        let Some(Message::Assistant(a)) = self.messages.last() else {
            return None;
        };
        match a.content.as_slice() {
            [ContentBlock::Text { text }] if !text.is_empty() => Some(text),
            _ => None,
        }
    }
}

/// What a provider's stream yields. A stream is `start`, then deltas, then exactly one `done` or `error`, and
/// nothing after that.
///
/// Tool calls stream as `tool_call_start` (index, id and name known), `tool_call_delta` (argument text as it is
/// produced; concatenated, the fragments are the call's arguments text) and `tool_call_end` (the parsed,
/// validated call). `index` counts the calls of this message from 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderEvent {
    Start {
        model: String,
    },
    TextDelta {
        delta: String,
    },
    ThinkingDelta {
        delta: String,
    },
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: usize,
        arguments_fragment: String,
    },
    ToolCallEnd {
        index: usize,
        call: ToolCall,
    },
    /// The log-probabilities of the tokens behind the deltas that follow (only when the request asked for
    /// `logprobs`).
    Logprobs {
        entries: Vec<TokenLogprob>,
    },
    Done {
        stop_reason: StopReason,
        usage: Usage,
        message: AssistantMessage,
    },
    /// The stream failed (`reason: error`) or was cancelled (`reason: aborted`). `partial` holds what arrived
    /// before; `kind` classifies the failure (see [`super::ProviderError`]) so a caller can decide to retry,
    /// compact the context, or give up.
    Error {
        reason: ErrorReason,
        kind: super::ErrorKind,
        message: String,
        usage: Usage,
        partial: AssistantMessage,
    },
}

impl ProviderEvent {
    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ProviderEvent::Done { .. } | ProviderEvent::Error { .. }
        )
    }
}

/// The log-probability of one generated token, with the most likely alternatives at that step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's id in the model's vocabulary, when the provider knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// The token's text (lossy UTF-8 of `bytes`).
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// The most likely tokens at this step, most likely first.
    #[serde(default)]
    pub top: Vec<TopLogprob>,
}

/// One alternative of a [`TokenLogprob`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// The prompt of a raw completion: text (tokenized by the provider, special tokens parsed) or token ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RawPrompt {
    Text(String),
    Tokens(Vec<u32>),
}

/// A completion of raw text: no chat template, no tools (OpenAI's legacy `/v1/completions`). It streams like a
/// chat completion: `start`, `text_delta`s (with `logprobs` events when asked), then `done` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawCompletionRequest {
    /// The model id; empty means the provider's default model.
    #[serde(default)]
    pub model: String,
    pub prompt: RawPrompt,
    #[serde(default)]
    pub sampling: Sampling,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens (until `max_tokens`).
    #[serde(default)]
    pub ignore_eos: bool,
    /// As [`CompletionRequest::logprobs`].
    #[serde(default)]
    pub logprobs: Option<usize>,
    /// As [`CompletionRequest::cache_scope`]: raw completions reuse cached prefixes (matched by content) only
    /// within their scope; `None` is a scope of its own.
    #[serde(default)]
    pub cache_scope: Option<String>,
    /// As [`CompletionRequest::keep_alive`].
    #[serde(default)]
    pub keep_alive: Option<KeepAlive>,
    /// The shape the completion is held to (JSON, a regex, a choice, a grammar); text by default.
    #[serde(default)]
    pub response_format: ResponseFormat,
    /// Fill in the middle: `prompt` (text, possibly empty) goes after `infill.prefix`, and the model writes what
    /// comes before `infill.suffix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infill: Option<Infill>,
}

/// What to tokenize: text, or a chat request rendered exactly as a completion of it would be (template, tools,
/// generation prompt), so the count equals that completion's `input` usage.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizeInput {
    Text {
        text: String,
        /// Add the model's BOS token where it wants one.
        add_special_tokens: bool,
    },
    Chat(Box<CompletionRequest>),
}

/// A tokenizing request (vLLM's `/tokenize`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizeRequest {
    /// The model id; empty means the provider's default model.
    pub model: String,
    pub input: TokenizeInput,
}

/// Token ids, their texts, and the model's context length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tokenized {
    pub tokens: Vec<u32>,
    /// Each token's text (lossy UTF-8), when the provider knows them.
    #[serde(default)]
    pub token_strs: Option<Vec<String>>,
    /// The model's context window in tokens (0: unknown).
    pub max_model_len: u64,
}

/// A prompt's size in tokens. `exact: false` marks an estimate (no tokenizer for the model was available).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    pub tokens: u64,
    pub exact: bool,
}

/// Whether a model is in memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "value")]
pub enum ModelState {
    Loaded,
    Loading,
    Unloaded,
    /// The last load failed (the next request tries again).
    Failed {
        message: String,
    },
}

impl ModelState {
    /// `loaded`, `loading`, `unloaded` or `failed` (llama.cpp's router names the first three so).
    pub fn as_str(&self) -> &'static str {
        match self {
            ModelState::Loaded => "loaded",
            ModelState::Loading => "loading",
            ModelState::Unloaded => "unloaded",
            ModelState::Failed { .. } => "failed",
        }
    }
}

/// A servable model and its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelStatus {
    pub model: ModelDescriptor,
    pub state: ModelState,
    /// Memory it takes (or will take) in bytes: weights and KV cache, when known.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// When it is unloaded if nothing uses it before (`None`: not on a timer).
    #[serde(default)]
    pub expires_at: Option<std::time::SystemTime>,
    /// Requests it is running or loading for.
    #[serde(default)]
    pub in_flight: usize,
    /// What the model is (known before it is loaded), when the provider knows.
    #[serde(default)]
    pub details: Option<ModelDetails>,
}

/// What a model file is: for the lists of models clients show (Ollama's `details`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDetails {
    /// The architecture (`llama`, `qwen2`, `gemma3`, …).
    pub family: String,
    /// How its weights are stored (`Q4_K_M`, `Q8_0`, `F16`, …), when known.
    pub quantization: String,
    /// The file's sha256, when known.
    pub digest: String,
    /// Its size on disk in bytes (0 before it is fetched).
    pub file_bytes: u64,
    /// When the file was written (seconds since the epoch), when it exists.
    pub modified_unix: Option<u64>,
    /// The chat template its file carries (Jinja), when it has one.
    pub template: Option<String>,
    /// How many weights it has, when its file has been read.
    pub parameter_count: Option<u64>,
    /// Whether its vocabulary has fill-in-the-middle tokens (it completes code between a prefix and a suffix).
    #[serde(default)]
    pub fill_in_middle: bool,
    /// It is an encoder: it serves embeddings, not completions.
    #[serde(default)]
    pub embedding_only: bool,
    /// A chat model that serves embeddings too (its hidden states pooled: `--pooling`).
    #[serde(default)]
    pub pooled_embeddings: bool,
}

impl ModelStatus {
    /// `model`, loaded for good.
    pub fn loaded(model: ModelDescriptor) -> Self {
        Self {
            model,
            state: ModelState::Loaded,
            size_bytes: None,
            expires_at: None,
            in_flight: 0,
            details: None,
        }
    }
}

/// How long a model stays in memory after a request (Ollama's `keep_alive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepAlive {
    /// Unload as soon as nothing uses it.
    Unload,
    /// Keep it this long after the last request.
    For(std::time::Duration),
    /// Keep it until it is unloaded by hand (or evicted for room).
    Forever,
}

/// A model a provider serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDescriptor {
    pub id: String,
    /// Prompt plus output, in tokens.
    pub context_window: u64,
    /// Most tokens one completion may generate.
    pub max_output_tokens: u64,
    /// Where the model runs (`cpu (2 threads)`, `cuda`, `metal`), when the provider knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

#[cfg(test)]
mod tests;
