//! A request's `max_tokens` fitted to the remote model before it is sent, as the local engine fits it: an upper
//! bound, cut to the model's output limit and to what the window leaves after the prompt. vLLM treats
//! `max_tokens` as a requirement instead — a prompt plus `max_tokens` over `max_model_len` is a 400 — while the
//! coding clients send caps far above what is left (Claude Code asks for 32,000 on every request), so without
//! this every long-prompt request of such a client fails on a 32k-window model.
//!
//! The prompt is counted (the server's `/tokenize`, else `remote.tokenizer`, else an estimate) only when a cheap
//! bound says the request might not fit: a token covers at least one byte of the rendered prompt, so the prompt's
//! bytes plus a margin for the chat template bound its tokens.

use std::sync::Arc;

use super::super::{model_or_default, CompletionRequest};
use super::{tokenize, wire, Shared};

/// Bytes a chat template adds around the messages and tools (role markers, a default system prompt, the tool
/// instructions): generous, since erring high only costs a count.
const TEMPLATE_BYTES: u64 = 4096;

/// Lowers `request.max_tokens` to the model's output limit and to the window left after the prompt. A prompt
/// that fills the window is left for the server to refuse (its error names the lengths); so is a request
/// without `max_tokens` (the server's default already fits) or to a model whose window is unknown.
pub(super) async fn max_tokens(shared: &Arc<Shared>, request: &mut CompletionRequest) {
    let Some(asked) = request.max_tokens else {
        return;
    };
    let models = shared.models();
    let model = model_or_default(request, &models);
    let Some(info) = models.into_iter().find(|m| m.id == model) else {
        return;
    };
    let mut cap = u64::from(asked);
    if info.max_output_tokens > 0 {
        cap = cap.min(info.max_output_tokens);
    }
    let window = info.context_window;
    if window > 0 && cap.saturating_add(prompt_bytes(request)) > window {
        match tokenize::count(shared, request).await {
            Ok(n) if n.tokens < window => cap = cap.min(window - n.tokens),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "no prompt count to fit max_tokens to"),
        }
    }
    request.max_tokens = Some(u32::try_from(cap).unwrap_or(asked).max(1));
}

/// An upper bound on the rendered prompt's bytes, hence on its tokens.
fn prompt_bytes(request: &CompletionRequest) -> u64 {
    let messages = serde_json::to_vec(&wire::messages(request)).map_or(0, |v| v.len());
    let tools = serde_json::to_vec(&wire::tools(&request.tools)).map_or(0, |v| v.len());
    (messages + tools) as u64 + TEMPLATE_BYTES
}
