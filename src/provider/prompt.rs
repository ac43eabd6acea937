//! A chat request as the model's own prompt tokens, rendered with its chat template and tokenizer (the text
//! layer, no weights): what the local engine generates from, and an exact count for a remote model.

use super::remote::wire;
use super::{CompletionRequest, ProviderError, Thinking};
use crate::text::{chat_prompt_tokens, ChatTemplate, Tokenizer, ToolCallFormat};

/// Renders `request` the way the model expects (tools shown through the template or injected into the
/// system message in `format`; a thinking level sets the template's
/// `enable_thinking`), with the generation prompt, and tokenizes it: the
/// template's markup becomes control tokens, the request's own strings never do (see
/// [`chat_prompt_tokens`]). BOS is prepended when the tokenizer wants one and the template did not write
/// it. Generation, `count_tokens` and chat `/tokenize` all use this, so usage is exact.
pub fn render_prompt(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    format: ToolCallFormat,
    request: &CompletionRequest,
) -> Result<Vec<u32>, ProviderError> {
    let mut messages = wire::messages(request);
    let prefill = request.prefill();
    if prefill.is_some() {
        messages.pop();
    }
    let mut ids = chat_prompt_tokens(
        template,
        tokenizer,
        &messages,
        &request.tools,
        &request.tool_choice,
        format,
        request.thinking.map(|t| t != Thinking::Off),
    )?;
    // An assistant prefill: the reply's start, after the generation prompt, as plain text (a control token's
    // text in it stays text, as in any message).
    if let Some(text) = prefill {
        ids.extend(tokenizer.encode(text, false)?);
    }
    Ok(ids)
}
