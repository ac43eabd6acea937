//! A reply that starts from a given text (an assistant prefill, see [`super::harness::LoopHarness::next_prefill`]): the request that asks
//! for its continuation, and the provider's stream of that continuation seen as the stream of the whole reply,
//! so the loop, the events and the transcript hold one assistant message that begins with the prefill.

use futures::StreamExt;

use super::harness::ReplyTrace;
use super::hooks::AgentLoopConfig;
use crate::provider::{
    AssistantMessage, CompletionRequest, ContentBlock, Message, ProviderEvent, ProviderStream,
};

/// Sets `request` up for the reply: continued from `prefill` (when given) and traced with the alternatives
/// `config`'s revision asks for (when the provider reports them).
pub(super) fn prepare(
    request: &mut CompletionRequest,
    prefill: Option<&str>,
    config: &AgentLoopConfig,
) {
    if let Some(text) = prefill {
        request.messages.push(Message::Assistant(AssistantMessage {
            content: vec![ContentBlock::Text { text: text.into() }],
        }));
        request.continue_final_message = true;
        // The engine starts a `response_format` grammar at the first generated token, as if the reply began
        // there: a whole-reply grammar would misread a continuation, so a prefilled reply goes unconstrained.
        request.response_format = crate::schema::ResponseFormat::Text;
    }
    let logprobs = config.harness.as_ref().map_or(0, |h| h.logprobs());
    if logprobs > 0 && config.provider.supports_logprobs() {
        request.logprobs = Some(logprobs);
    }
}

/// A new trace for a reply that starts with `prefill` (its text is the turn's, filled in when the turn ends).
pub(super) fn trace(prefill: Option<&str>) -> ReplyTrace {
    ReplyTrace {
        generated_from: prefill.map_or(0, str::len),
        ..ReplyTrace::default()
    }
}

/// The stream of the whole reply from the stream of `prefill`'s continuation: the prefill is the first text
/// delta (right after `start`), and the final (or partial) message begins with it.
pub(super) fn whole_reply(stream: ProviderStream, prefill: String) -> ProviderStream {
    Box::pin(stream.flat_map(move |mut ev| {
        let mut events = Vec::with_capacity(2);
        match &mut ev {
            ProviderEvent::Done { message, .. }
            | ProviderEvent::Error {
                partial: message, ..
            } => prepend(message, &prefill),
            _ => {}
        }
        let start = matches!(ev, ProviderEvent::Start { .. });
        events.push(ev);
        if start {
            events.push(ProviderEvent::TextDelta {
                delta: prefill.clone(),
            });
        }
        futures::stream::iter(events)
    }))
}

fn prepend(message: &mut AssistantMessage, prefill: &str) {
    match message.content.first_mut() {
        Some(ContentBlock::Text { text }) => text.insert_str(0, prefill),
        _ => message.content.insert(
            0,
            ContentBlock::Text {
                text: prefill.to_string(),
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{StopReason, Usage};

    #[test]
    fn a_prefilled_reply_drops_the_whole_reply_format() {
        let config = AgentLoopConfig::new(std::sync::Arc::new(
            crate::provider::ScriptedProvider::new(Vec::new()),
        ));
        let grammar = crate::schema::ResponseFormat::Grammar {
            lark: "start: /x*/\n".into(),
        };
        let mut request = CompletionRequest {
            response_format: grammar.clone(),
            ..CompletionRequest::default()
        };
        prepare(&mut request, None, &config);
        assert_eq!(request.response_format, grammar);
        prepare(&mut request, Some("calc.py\n```\n"), &config);
        assert!(request.continue_final_message);
        assert_eq!(request.response_format, crate::schema::ResponseFormat::Text);
    }

    #[tokio::test]
    async fn the_prefill_leads_the_deltas_and_the_final_message() {
        let events = vec![
            ProviderEvent::Start { model: "m".into() },
            ProviderEvent::TextDelta {
                delta: " b)".into(),
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop,
                usage: Usage::default(),
                message: AssistantMessage {
                    content: vec![ContentBlock::Text { text: " b)".into() }],
                },
            },
        ];
        let got: Vec<ProviderEvent> =
            whole_reply(Box::pin(futures::stream::iter(events)), "f(a +".into())
                .collect()
                .await;
        let deltas: String = got
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::TextDelta { delta } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, "f(a + b)");
        match got.last() {
            Some(ProviderEvent::Done { message, .. }) => assert_eq!(
                message.content,
                vec![ContentBlock::Text {
                    text: "f(a + b)".into()
                }]
            ),
            other => panic!("{other:?}"),
        }
    }
}
