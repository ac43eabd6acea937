//! `agentd bench bfcl`: how well a model calls tools on the Berkeley Function Calling Leaderboard's functions,
//! against any OpenAI-compatible endpoint. The data is BFCL's own (the `bfcl-eval` wheel's `bfcl_eval/data/`):
//! [`data`] reads a category and converts its functions as BFCL does for OpenAI-style models; each question's
//! first turn is sent once per `tool_choice` (`auto`, `required`), greedy, one request at a time, streamed
//! through the bench's [`ChatClient`]; [`score`] judges every answer (a call at all, schema-valid calls, the
//! right function, cut by length, a call written as text) and sums the rows of the report.
//!
//! This is not BFCL's score: arguments are checked against the schema, not against the ground-truth values,
//! and only the first turn of each entry is asked.

pub mod data;
pub mod score;

#[cfg(test)]
mod tests;

use std::time::Instant;

use serde::Serialize;

pub use data::{load_category, parse_category, Category, Question, Skipped};
pub use score::{looks_like_call, summarize, Choice, QuestionResult, Row};

use super::{request_body, ChatClient};
use crate::provider::{CompletionRequest, Sampling};

/// What a run asks.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub choices: Vec<Choice>,
    /// Most tokens per reply.
    pub max_tokens: u32,
}

/// How the run went, for the report's header.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub url: String,
    pub model: String,
    pub max_tokens: u32,
    /// `--limit`: the first N entries of each category file.
    pub limit: Option<usize>,
    pub wall_s: f64,
}

/// The skipped entries of one category.
#[derive(Debug, Clone, Serialize)]
pub struct CategorySkips {
    pub category: String,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub run: RunInfo,
    /// One row per category and `tool_choice`, in the order asked.
    pub rows: Vec<Row>,
    pub skipped: Vec<CategorySkips>,
    /// Every answer, judged.
    pub results: Vec<QuestionResult>,
}

/// The request for `question` under `choice`: its system and user messages, its tools, greedy decoding.
pub fn request(question: &Question, choice: Choice, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        system: question.system.clone(),
        messages: question.messages.clone(),
        tools: question.tools.clone(),
        tool_choice: choice.tool_choice(),
        sampling: Sampling::greedy(),
        max_tokens: Some(max_tokens),
        ..CompletionRequest::default()
    }
}

/// Asks every question of `categories` under every choice of `plan`, one request at a time (for each category,
/// all questions under the first choice, then under the next). `on_answer` is called after every request.
/// Never fails: a failed request is recorded in its result.
pub async fn run(
    client: &ChatClient,
    model: &str,
    categories: &[Category],
    plan: &RunPlan,
    limit: Option<usize>,
    on_answer: &(dyn Fn(&QuestionResult) + Sync),
) -> Report {
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for category in categories {
        for &choice in &plan.choices {
            let mut these = Vec::new();
            for question in &category.questions {
                let req = request(question, choice, plan.max_tokens);
                let body = request_body(&req, model, None);
                let sample = client.stream_chat(&body, &req.tools).await;
                let result = score::score(
                    &category.name,
                    question,
                    choice,
                    category.has_answers,
                    sample,
                );
                on_answer(&result);
                these.push(result);
            }
            rows.push(summarize(
                &category.name,
                choice,
                category.has_answers,
                &these,
            ));
            results.extend(these);
        }
    }
    Report {
        run: RunInfo {
            url: client.base_url().to_string(),
            model: model.to_string(),
            max_tokens: plan.max_tokens,
            limit,
            wall_s: started.elapsed().as_secs_f64(),
        },
        rows,
        skipped: categories
            .iter()
            .map(|c| CategorySkips {
                category: c.name.clone(),
                skipped: c.skipped.clone(),
            })
            .collect(),
        results,
    }
}
