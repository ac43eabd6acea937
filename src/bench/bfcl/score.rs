//! Scoring one answer and summing a run, free of I/O so tests can check it on known samples.
//!
//! Per question: **answered with a call** (≥ 1 tool call in the reply); each call **schema-valid** (its arguments
//! are JSON and validate against the named tool's schema, an unknown tool counting as invalid:
//! [`crate::provider::check_tool_call`]); **right function** (the first call names one of the ground-truth
//! functions; a question answered without a call is wrong); **cut by length** (`finish_reason: length`); and
//! **call as text**: no tool call, but the content carries what looks like one (a JSON object naming an offered
//! tool, fenced or bare, or a `<tool_call>` tag), the usual failure of a small model under `tool_choice: auto`.

use serde::Serialize;
use serde_json::Value;

use crate::bench::{Distribution, RequestSample};
use crate::schema::ToolChoice;

use super::data::Question;

/// The `tool_choice` of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Auto,
    Required,
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Required => "required",
        }
    }

    pub fn tool_choice(self) -> ToolChoice {
        match self {
            Choice::Auto => ToolChoice::Auto,
            Choice::Required => ToolChoice::Required,
        }
    }
}

/// One question's answer, judged.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionResult {
    pub id: String,
    pub category: String,
    pub tool_choice: Choice,
    pub expected: Vec<String>,
    /// At least one tool call.
    pub answered: bool,
    pub calls: usize,
    pub valid_calls: usize,
    /// The first call names an expected function; `None` when the category has no ground truth.
    pub right_function: Option<bool>,
    pub cut_by_length: bool,
    /// No tool call, but the content looks like one (see the module docs).
    pub call_in_text: bool,
    /// The content is (or holds) a Markdown code fence.
    pub fenced_text: bool,
    /// The whole exchange as the client saw it (text, calls with their problems, finish reason, timings).
    pub sample: RequestSample,
}

impl QuestionResult {
    pub fn failed(&self) -> bool {
        self.sample.is_error()
    }
}

/// Judges `sample`, the answer to `question` under `choice`.
pub fn score(
    category: &str,
    question: &Question,
    choice: Choice,
    has_answers: bool,
    sample: RequestSample,
) -> QuestionResult {
    let calls = sample.calls.len();
    let valid_calls = sample.calls.iter().filter(|c| c.valid).count();
    let right_function = has_answers.then(|| {
        sample
            .calls
            .first()
            .is_some_and(|c| question.expected.contains(&c.name))
    });
    let names: Vec<&str> = question.tools.iter().map(|t| t.name.as_str()).collect();
    QuestionResult {
        id: question.id.clone(),
        category: category.to_string(),
        tool_choice: choice,
        expected: question.expected.clone(),
        answered: calls > 0,
        calls,
        valid_calls,
        right_function,
        cut_by_length: sample.finish_reason.as_deref() == Some("length"),
        call_in_text: calls == 0 && looks_like_call(&sample.text, &names),
        fenced_text: sample.text.contains("```"),
        sample,
    }
}

/// Whether `text` carries a tool call written as text: a `<tool_call>` tag, or a JSON object (anywhere, fenced
/// or not) whose `name` (or `function`, or `function.name`) is one of `tools`, or whose only key is one of them.
pub fn looks_like_call(text: &str, tools: &[&str]) -> bool {
    if text.contains("<tool_call>") {
        return true;
    }
    let names_tool = |v: &Value| -> bool {
        let Value::Object(map) = v else {
            return false;
        };
        let named = [
            map.get("name"),
            map.get("function"),
            v.pointer("/function/name"),
        ]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|n| tools.contains(&n));
        named || (map.len() == 1 && map.keys().any(|k| tools.contains(&k.as_str())))
    };
    text.char_indices()
        .filter(|&(_, c)| c == '{' || c == '[')
        .any(|(i, _)| {
            let mut values = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            match values.next() {
                Some(Ok(Value::Array(items))) => items.iter().any(names_tool),
                Some(Ok(v)) => names_tool(&v),
                _ => false,
            }
        })
}

/// One line of the table: a category under one `tool_choice`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub category: String,
    pub tool_choice: Choice,
    /// Questions asked (skipped entries not included).
    pub questions: usize,
    /// Requests that failed (HTTP error, broken stream); they count as unanswered.
    pub failed: usize,
    pub answered: usize,
    pub calls: usize,
    pub valid_calls: usize,
    /// Questions whose first call names an expected function; `None` without ground truth.
    pub right_function: Option<usize>,
    pub cut_by_length: usize,
    pub call_in_text: usize,
    pub fenced_text: usize,
    /// Request latency (ms, send to end of stream) over the requests that did not fail.
    pub latency_ms: Option<Distribution>,
}

impl Row {
    pub fn answered_share(&self) -> Option<f64> {
        share(self.answered, self.questions)
    }

    pub fn valid_share(&self) -> Option<f64> {
        share(self.valid_calls, self.calls)
    }

    pub fn right_share(&self) -> Option<f64> {
        share(self.right_function?, self.questions)
    }
}

fn share(n: usize, of: usize) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

/// The row of `results` (one category, one `tool_choice`); `has_answers`: the category has ground truth.
pub fn summarize(
    category: &str,
    choice: Choice,
    has_answers: bool,
    results: &[QuestionResult],
) -> Row {
    let count = |f: fn(&QuestionResult) -> bool| results.iter().filter(|r| f(r)).count();
    let latencies: Vec<f64> = results
        .iter()
        .filter(|r| !r.failed())
        .map(|r| r.sample.total_ms)
        .collect();
    Row {
        category: category.to_string(),
        tool_choice: choice,
        questions: results.len(),
        failed: count(QuestionResult::failed),
        answered: count(|r| r.answered),
        calls: results.iter().map(|r| r.calls).sum(),
        valid_calls: results.iter().map(|r| r.valid_calls).sum(),
        right_function: has_answers.then(|| count(|r| r.right_function == Some(true))),
        cut_by_length: count(|r| r.cut_by_length),
        call_in_text: count(|r| r.call_in_text),
        fenced_text: count(|r| r.fenced_text),
        latency_ms: Distribution::of(&latencies),
    }
}
