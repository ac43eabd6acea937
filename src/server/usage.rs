//! What every door reports the same way: token usage (the OpenAI shape the other doors translate from) and
//! per-token log-probabilities, built once from the provider's answer by `source.rs` and `chat_answer.rs`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageInfo {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Speculative decoding's drafts, in the fields OpenAI uses for Predicted Outputs: draft tokens the model
    /// confirmed and those it did not. Only when something was drafted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: u64,
    pub rejected_prediction_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

impl UsageInfo {
    pub fn new(prompt: u64, completion: u64, cached: u64) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: cached,
            }),
            completion_tokens_details: None,
        }
    }

    /// A provider's usage, drafts included.
    pub fn from_usage(u: &crate::provider::Usage) -> Self {
        let mut info = Self::new(u.input, u.output, u.cached_input);
        if u.draft_tokens > 0 {
            info.completion_tokens_details = Some(CompletionTokensDetails {
                accepted_prediction_tokens: u.accepted_draft_tokens,
                rejected_prediction_tokens: u.draft_tokens.saturating_sub(u.accepted_draft_tokens),
            });
        }
        info
    }
}

/// One token's log-probability (`logprobs.content[]`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TokenLogprobOut {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprobOut>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TopLogprobOut {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}
