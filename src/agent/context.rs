//! The context budget: the request a turn sends ([`prompt_request`], shared with the loop so the count is of the
//! very prompt the model gets), its exact size ([`context_tokens`]: the provider's count of the rendered system
//! prompt, tools block and messages) and the model's descriptor — what a context policy
//! ([`ContextPolicy`](super::hooks::ContextPolicy)) measures with. [`super::compaction::Compactor`] is the policy
//! that compacts.

use super::hooks::{AgentContext, AgentLoopConfig};
use crate::provider::{
    estimate_tokens, CompletionRequest, ModelDescriptor, TokenCount, ToolChoice,
};
use crate::transcript::AgentMessage;

/// The request one turn sends for `messages` (after `transform_context`): system prompt, tools, the messages
/// mapped by `convert_to_llm`, the loop's sampling settings.
pub fn prompt_request(
    context: &AgentContext,
    messages: &[AgentMessage],
    config: &AgentLoopConfig,
) -> CompletionRequest {
    let harness = config.harness.as_deref();
    let hidden = harness.map(|h| h.hidden_tools()).unwrap_or_default();
    let offered: Vec<&std::sync::Arc<dyn crate::tools::tool::Tool>> = context
        .tools
        .iter()
        .filter(|t| !hidden.contains(&t.spec().name))
        .collect();
    CompletionRequest {
        model: config.model.clone(),
        system: (!context.system_prompt.is_empty()).then(|| context.system_prompt.clone()),
        messages: harness
            .and_then(|h| h.convert(messages))
            .unwrap_or_else(|| (config.convert_to_llm)(messages)),
        tools: offered
            .iter()
            .map(|t| tool_spec(t.as_ref(), config))
            .collect(),
        tool_choice: match harness.and_then(|h| h.tool_choice(messages)) {
            _ if offered.is_empty() => ToolChoice::None,
            Some(choice) => choice,
            None => ToolChoice::Auto,
        },
        response_format: harness
            .and_then(|h| h.response_format())
            .unwrap_or_default(),
        sampling: config.sampling.clone(),
        max_tokens: config.max_tokens,
        parallel_tool_calls: (!offered.is_empty()).then_some(config.parallel_tool_calls),
        cache_key: config.cache_key.clone(),
        // One conversation is one tenant: its KV prefixes are shared with no other.
        cache_scope: config.cache_key.clone(),
        thinking: config.thinking,
        ..CompletionRequest::default()
    }
}

/// The spec a turn sends for `tool`: with the workspace, its argument grammar there (an invalid one is logged
/// and left out: the plain schema still holds).
fn tool_spec(
    tool: &dyn crate::tools::tool::Tool,
    config: &AgentLoopConfig,
) -> crate::schema::ToolSpec {
    let spec = tool.spec().clone();
    let Some(grammar) = config
        .workspace_state
        .as_ref()
        .and_then(|ws| tool.argument_grammar(ws))
    else {
        return spec;
    };
    match spec.clone().with_grammar(grammar) {
        Ok(with) => with,
        Err(e) => {
            tracing::warn!(tool = %spec.name, error = %e, "a tool's workspace grammar is invalid; using its schema");
            spec
        }
    }
}

/// The size of `request`'s prompt by the provider's count (exact on the local engine: the rendered, tokenized
/// prompt). If the provider cannot count, the character estimate, marked inexact.
pub async fn count(config: &AgentLoopConfig, request: &CompletionRequest) -> TokenCount {
    match config.provider.count_tokens(request).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "the provider could not count tokens; using an estimate");
            TokenCount {
                tokens: estimate_tokens(request),
                exact: false,
            }
        }
    }
}

/// `context_tokens`: the size of the prompt the next turn would send for `messages`.
pub async fn context_tokens(
    context: &AgentContext,
    messages: &[AgentMessage],
    config: &AgentLoopConfig,
) -> TokenCount {
    count(config, &prompt_request(context, messages, config)).await
}

/// The descriptor of the model `config` names (the provider's first when it names none or an unknown one).
pub fn model_descriptor(config: &AgentLoopConfig) -> Option<ModelDescriptor> {
    let models = config.provider.models();
    models
        .iter()
        .find(|m| m.id == config.model)
        .or_else(|| models.first())
        .cloned()
}
