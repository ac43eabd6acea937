//! A file block that changed nothing, continued from the model's own second choice.
//!
//! Asked to fix a bug, a small model often writes the file back exactly as it was: greedy decoding follows the
//! text it was shown. Told so, it copies it again, and re-sampling at a higher temperature does not help either.
//! Yet the model is rarely sure everywhere: where the bug is, its second choice is close (` >` just behind ` <` in
//! `if x < best`, ` +` just behind in `range(1, n`).
//!
//! So the loop traces a blocks reply with the top alternatives of every token, and when a block's result is
//! "the same as the file" the next reply starts from that block as the model wrote it up to its least certain
//! token, with the runner-up there instead; the model continues from it (an assistant prefill). Only tokens
//! inside the unchanged block's text count, and only alternatives that are code: whitespace-only ones (a blank
//! line more) and fence backticks change nothing that matters, and one the chosen token merely extends would
//! let it write the same text again. The reply that changed nothing and its result stay in the transcript; the
//! continued reply is the model's next turn, checked and run like any other (a wrong change still fails the
//! task's check, and the loop rules still stop a run that repeats itself).

use super::{Cx, Rule};
use crate::agent::ReplyTrace;
use crate::app::harness::outcome::{Call, Outcome};
use crate::app::harness::profile::RuleId;
use crate::provider::TokenLogprob;

/// Alternatives traced per token.
pub const ALTERNATIVES: usize = 5;

/// See the module docs.
pub struct SecondChoice;

impl Rule for SecondChoice {
    fn id(&self) -> RuleId {
        RuleId::SecondChoice
    }

    /// The reply after a turn whose first block changed nothing (before any change landed): that block as the
    /// model wrote it up to its least certain token, then the runner-up there.
    fn next_prefill(
        &self,
        trace: &ReplyTrace,
        turn: &[(Call, Outcome)],
        cx: &Cx<'_>,
    ) -> Option<String> {
        if cx.task.landed() {
            return None;
        }
        turn.iter()
            .find_map(|(call, outcome)| match (call, outcome) {
                (Call::Block { content, .. }, Outcome::NoOp { .. }) => {
                    let start = trace.text.find(content.as_str())?;
                    flip(trace, start..start + content.len())
                }
                _ => None,
            })
    }
}

/// The reply up to its least certain generated token whose start lies in `span` (byte offsets), with that
/// token's best code alternative in its place.
fn flip(trace: &ReplyTrace, span: std::ops::Range<usize>) -> Option<String> {
    let text = trace.text.as_bytes();
    let mut at = trace.generated_from;
    let mut best: Option<(f32, usize, &str)> = None;
    for token in &trace.tokens {
        let start = at;
        at += token.bytes.len();
        if text.get(start..at) != Some(token.bytes.as_slice()) {
            // The tokens do not spell the reply (a split the provider made): no position can be trusted.
            return None;
        }
        if !span.contains(&start) || !trace.text.is_char_boundary(start) {
            continue;
        }
        if let Some((margin, alt)) = runner_up(token) {
            if best.is_none_or(|(m, _, _)| margin < m) {
                best = Some((margin, start, alt));
            }
        }
    }
    let (_, start, alt) = best?;
    Some(format!("{}{alt}", &trace.text[..start]))
}

/// The most likely alternative of `token` that is code, with how far behind it is (nats).
fn runner_up(token: &TokenLogprob) -> Option<(f32, &str)> {
    token
        .top
        .iter()
        .filter(|alt| alt.bytes != token.bytes)
        .find_map(|alt| {
            let text = std::str::from_utf8(&alt.bytes).ok()?;
            let code = !text.trim().is_empty()
                && !text.contains('`')
                && !token.bytes.starts_with(&alt.bytes);
            code.then_some((token.logprob - alt.logprob, text))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::harness::profile::{EditFormat, Profile};
    use crate::app::harness::rules::Task;
    use crate::provider::TopLogprob;
    use crate::tools::policy::FileScope;

    fn token(text: &str, logprob: f32, top: &[(&str, f32)]) -> TokenLogprob {
        TokenLogprob {
            id: None,
            token: text.into(),
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: top
                .iter()
                .map(|(t, l)| TopLogprob {
                    id: None,
                    token: t.to_string(),
                    bytes: t.as_bytes().to_vec(),
                    logprob: *l,
                })
                .collect(),
        }
    }

    fn reply(tokens: Vec<TokenLogprob>) -> ReplyTrace {
        ReplyTrace {
            text: tokens.iter().map(|t| t.token.as_str()).collect(),
            generated_from: 0,
            tokens,
        }
    }

    fn noop(content: &str) -> Vec<(Call, Outcome)> {
        vec![(
            Call::Block {
                path: "stats.py".into(),
                content: content.into(),
            },
            Outcome::NoOp {
                path: "stats.py".into(),
            },
        )]
    }

    fn prefill(trace: &ReplyTrace, turn: &[(Call, Outcome)], landed: bool) -> Option<String> {
        let mut task = Task::default();
        if landed {
            task.changed.push(("stats.py".into(), None));
        }
        let profile = Profile::small();
        let scope = FileScope::unconfined(".");
        SecondChoice.next_prefill(
            trace,
            turn,
            &Cx {
                task: &task,
                scope: &scope,
                profile: &profile,
                format: EditFormat::Blocks,
            },
        )
    }

    fn stats_reply() -> ReplyTrace {
        reply(vec![
            token(
                "stats.py\n```\n",
                -0.1,
                &[("stats.py\n```\n", -0.1), ("todo", -3.0)],
            ),
            token("if x", -0.1, &[("if x", -0.1)]),
            // Whitespace and fences are not code.
            token(" <", -0.3, &[(" <", -0.3), (" ", -0.5), (" >", -1.7)]),
            token(
                " best:\n",
                -0.2,
                &[(" best:\n", -0.2), ("```", -0.3), ("\n\n", -0.25)],
            ),
            token("```", -0.01, &[("```", -0.01), ("x", -0.2)]),
        ])
    }

    #[test]
    fn the_least_certain_code_token_of_the_unchanged_block_is_flipped() {
        let got = prefill(&stats_reply(), &noop("if x < best:\n"), false);
        assert_eq!(got.as_deref(), Some("stats.py\n```\nif x >"));
    }

    #[test]
    fn nothing_without_an_unchanged_block_or_when_tokens_do_not_spell_the_reply() {
        let turn = noop("if x < best:\n");
        // After a change landed, a block that changes nothing is the model saying it is done.
        assert_eq!(prefill(&stats_reply(), &turn, true), None);
        let changed = vec![(
            turn[0].0.clone(),
            Outcome::Changed {
                path: "stats.py".into(),
                before: "a".into(),
                after: "b".into(),
            },
        )];
        assert_eq!(prefill(&stats_reply(), &changed, false), None);
        let mut trace = stats_reply();
        trace.text.insert(0, '!');
        assert_eq!(prefill(&trace, &turn, false), None);
        // Tokens before `generated_from` were given (a prefill): only later ones are candidates.
        let mut trace = stats_reply();
        let given = trace.tokens.drain(..3).map(|t| t.token).collect::<String>();
        trace.generated_from = given.len();
        assert_eq!(prefill(&trace, &turn, false), None);
    }

    #[test]
    fn an_alternative_the_chosen_token_extends_is_no_change() {
        let t = token(" >=", -0.1, &[(" >=", -0.1), (" >", -0.2), (" <", -2.0)]);
        let (margin, alt) = runner_up(&t).unwrap();
        assert_eq!(alt, " <");
        assert!((margin - 1.9).abs() < 1e-5, "{margin}");
    }
}
