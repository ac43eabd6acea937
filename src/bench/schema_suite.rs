//! The schema validity suite (JSONSchemaBench files in `../shared/schemas/`), shared by the test suite and
//! `agentd bench schemas` (which runs it with [`run`] and prints [`SuiteSummary::table`]).
//!
//! For each schema: either it is rejected up front with a clear error, or (a) the grammar accepts each valid test
//! document and rejects each invalid one (documents tokenized and fed to a matcher), and (b) a real generation
//! under `response_format: json_schema` that finishes validates against the schema with the `jsonschema` crate.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::{
    ConstraintSpec, Engine, EngineError, FinishReason, GenerateRequest, GrammarFactory, Result,
    SamplingParams, Tokenizer, ToolCallFormat,
};
use crate::schema::compile::{to_compact_string, validator, violations};
use crate::schema::SchemaError;
use crate::schema::{ResponseFormat, ToolChoice};

/// One schema file.
#[derive(Debug, Clone)]
pub struct SchemaCase {
    /// The file stem (`Github_easy---o10298`).
    pub name: String,
    pub schema: Value,
    /// `(valid, document)` pairs.
    pub tests: Vec<(bool, Value)>,
}

/// Every `*.json` in `dir`, sorted by name.
pub fn load_dir(dir: &Path) -> Result<Vec<SchemaCase>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| EngineError::io(format!("reading {}", dir.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| EngineError::io(format!("reading {}", path.display()), e))?;
        let file: Value = serde_json::from_str(&text)
            .map_err(|e| EngineError::Internal(format!("{} is not JSON: {e}", path.display())))?;
        let tests = file
            .get("tests")
            .and_then(Value::as_array)
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| Some((t.get("valid")?.as_bool()?, t.get("data")?.clone())))
                    .collect()
            })
            .unwrap_or_default();
        cases.push(SchemaCase {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            schema: file.get("schema").cloned().unwrap_or(Value::Bool(true)),
            tests,
        });
    }
    Ok(cases)
}

fn spec_for(case: &SchemaCase) -> ConstraintSpec {
    ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: case.name.clone(),
            schema: case.schema.clone(),
            strict: true,
        },
        ..ConstraintSpec::default()
    }
}

/// What happened to one schema.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaseReport {
    pub name: String,
    /// `None`: compiled. `Some(kind)`: rejected up front (`kind` is the keyword, or the error's kind).
    pub rejected: Option<String>,
    pub reject_message: Option<String>,
    pub valid_accepted: usize,
    /// Valid documents the grammar refuses (e.g. keys in another order than `properties`): a completeness gap,
    /// not a correctness one.
    pub valid_rejected: usize,
    pub invalid_rejected: usize,
    /// Invalid documents the grammar accepts: must be zero.
    pub invalid_accepted: usize,
    pub generation: Option<Generation>,
}

/// The outcome of one constrained generation.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Generation {
    /// Finished and valid.
    Valid { tokens: usize, secs: f64 },
    /// Finished but invalid: must never happen.
    Invalid { output: String, errors: Vec<String> },
    /// Cut by `max_tokens`.
    Truncated { tokens: usize },
    /// The engine failed.
    Error { message: String },
}

/// Admission and (a): compiles the schema as a request would, then feeds each test document.
pub fn check_documents(
    factory: &GrammarFactory,
    tokenizer: &Tokenizer,
    case: &SchemaCase,
) -> CaseReport {
    let mut report = CaseReport {
        name: case.name.clone(),
        ..CaseReport::default()
    };
    let spec = spec_for(case);
    if let Err(e) = factory.compile(&spec, ToolCallFormat::HERMES) {
        report.rejected = Some(rejection_kind(&e));
        report.reject_message = Some(e.to_string());
        return report;
    }
    for (valid, doc) in &case.tests {
        let accepted = document_accepted(factory, tokenizer, &spec, doc);
        match (valid, accepted) {
            (true, true) => report.valid_accepted += 1,
            (true, false) => report.valid_rejected += 1,
            (false, false) => report.invalid_rejected += 1,
            (false, true) => report.invalid_accepted += 1,
        }
    }
    report
}

fn document_accepted(
    factory: &GrammarFactory,
    tokenizer: &Tokenizer,
    spec: &ConstraintSpec,
    doc: &Value,
) -> bool {
    let Ok(Some(mut c)) = factory.compile(spec, ToolCallFormat::HERMES) else {
        return false;
    };
    let Ok(ids) = tokenizer.encode(&to_compact_string(doc), false) else {
        return false;
    };
    c.accepts_tokens(&ids).unwrap_or(false)
}

/// A short label for a rejection: the keyword, or the error's kind.
pub fn rejection_kind(e: &EngineError) -> String {
    match e {
        EngineError::Schema(SchemaError::UnsupportedSchemaKeyword { keyword, .. }) => {
            keyword.clone()
        }
        EngineError::Schema(SchemaError::InvalidSchema { .. }) => "invalid schema".into(),
        EngineError::Schema(SchemaError::EmptyLanguage { .. }) => "empty language".into(),
        EngineError::Schema(SchemaError::InvalidGrammar(_)) => "grammar error".into(),
        other => format!("{other}"),
    }
}

/// The system prompt of (b).
const SYSTEM: &str =
    "Reply with one JSON document that matches the schema the user gives. Keep it short: \
short strings, few array items, no optional fields unless needed.";

/// Schema text shown to the model, cut to keep prefill cheap (the grammar, not the prompt, enforces it).
const SCHEMA_PROMPT_BYTES: usize = 600;

/// The sampling (b) uses: greedy, with a mild repetition penalty so the small model loops less often.
pub fn suite_sampling() -> SamplingParams {
    SamplingParams {
        repetition_penalty: 1.1,
        ..SamplingParams::greedy()
    }
}

/// (b): one generation under the schema; `Invalid` is a bug.
pub fn generate_one(
    engine: &Engine,
    case: &SchemaCase,
    sampling: &SamplingParams,
    max_tokens: usize,
) -> Generation {
    let mut shown = to_compact_string(&case.schema);
    if shown.len() > SCHEMA_PROMPT_BYTES {
        let mut cut = SCHEMA_PROMPT_BYTES;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str(" …");
    }
    let messages = [
        serde_json::json!({"role": "system", "content": SYSTEM}),
        serde_json::json!({"role": "user", "content": format!("Schema: {shown}")}),
    ];
    let started = Instant::now();
    let outcome = (|| -> Result<Generation> {
        let req = GenerateRequest {
            prompt: engine.chat_prompt(&messages, &[], &ToolChoice::None, None)?,
            sampling: sampling.clone(),
            max_tokens: Some(max_tokens),
            constraint: Some(spec_for(case)),
            ..GenerateRequest::default()
        };
        let done = engine.complete_blocking(req, CancellationToken::new(), |_| {})?;
        let tokens = done.summary.completion_tokens;
        if done.summary.finish == FinishReason::Length {
            return Ok(Generation::Truncated { tokens });
        }
        let errors = match serde_json::from_str::<Value>(&done.content) {
            Err(e) => vec![format!("not JSON: {e}")],
            Ok(doc) => match validator(&case.schema) {
                Ok(v) => violations(&v, &doc),
                Err(e) => vec![format!("schema: {e}")],
            },
        };
        Ok(if errors.is_empty() {
            Generation::Valid {
                tokens,
                secs: started.elapsed().as_secs_f64(),
            }
        } else {
            Generation::Invalid {
                output: done.content,
                errors,
            }
        })
    })();
    outcome.unwrap_or_else(|e| Generation::Error {
        message: e.to_string(),
    })
}

/// How a whole run of the suite goes (`agentd bench schemas`).
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Generate for every `every`-th compiled schema only (1 = all; 0 counts as 1).
    pub every: usize,
    pub max_tokens: usize,
    /// The generations' sampling (usually [`suite_sampling`]).
    pub sampling: SamplingParams,
    /// `false`: only admission and test documents.
    pub generate: bool,
}

/// Runs the suite over `cases` in order: admission and test documents for each, a generation for every
/// `every`-th compiled one. `on_case` sees each report as it is finished (progress output).
pub fn run(
    engine: &Engine,
    factory: &GrammarFactory,
    cases: &[SchemaCase],
    opts: &SuiteOptions,
    mut on_case: impl FnMut(&SchemaCase, &CaseReport),
) -> Vec<CaseReport> {
    let every = opts.every.max(1);
    let mut reports = Vec::with_capacity(cases.len());
    let mut compiled_seen = 0usize;
    for case in cases {
        let mut report = check_documents(factory, engine.tokenizer(), case);
        if report.rejected.is_none() {
            if opts.generate && compiled_seen.is_multiple_of(every) {
                report.generation =
                    Some(generate_one(engine, case, &opts.sampling, opts.max_tokens));
            }
            compiled_seen += 1;
        }
        on_case(case, &report);
        reports.push(report);
    }
    reports
}

/// The reports that show a bug: an invalid test document accepted, or a generation that finished invalid or
/// failed.
pub fn problems(reports: &[CaseReport]) -> Vec<CaseReport> {
    reports
        .iter()
        .filter(|r| {
            r.invalid_accepted > 0
                || matches!(
                    r.generation,
                    Some(Generation::Invalid { .. } | Generation::Error { .. })
                )
        })
        .cloned()
        .collect()
}

/// The suite's table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SuiteSummary {
    pub schemas: usize,
    pub compiled: usize,
    pub rejected: usize,
    /// Rejections by keyword (or error kind).
    pub rejected_by: BTreeMap<String, usize>,
    pub valid_docs_accepted: usize,
    pub valid_docs_rejected: usize,
    pub invalid_docs_rejected: usize,
    /// Must be zero.
    pub invalid_docs_accepted: usize,
    pub generated: usize,
    pub generated_complete: usize,
    pub generated_valid: usize,
    /// Must be zero.
    pub generated_invalid: usize,
    pub truncated: usize,
    /// Must be zero.
    pub generation_errors: usize,
}

impl SuiteSummary {
    pub fn of(reports: &[CaseReport]) -> Self {
        let mut s = SuiteSummary {
            schemas: reports.len(),
            ..SuiteSummary::default()
        };
        for r in reports {
            match &r.rejected {
                Some(kind) => {
                    s.rejected += 1;
                    *s.rejected_by.entry(kind.clone()).or_default() += 1;
                }
                None => s.compiled += 1,
            }
            s.valid_docs_accepted += r.valid_accepted;
            s.valid_docs_rejected += r.valid_rejected;
            s.invalid_docs_rejected += r.invalid_rejected;
            s.invalid_docs_accepted += r.invalid_accepted;
            if let Some(g) = &r.generation {
                s.generated += 1;
                match g {
                    Generation::Valid { .. } => {
                        s.generated_complete += 1;
                        s.generated_valid += 1;
                    }
                    Generation::Invalid { .. } => {
                        s.generated_complete += 1;
                        s.generated_invalid += 1;
                    }
                    Generation::Truncated { .. } => s.truncated += 1,
                    Generation::Error { .. } => s.generation_errors += 1,
                }
            }
        }
        s
    }

    /// The table as text.
    pub fn table(&self) -> String {
        let mut t = format!(
            "schemas                 {:>5}\n\
             compiled                {:>5}\n\
             rejected up front       {:>5}\n",
            self.schemas, self.compiled, self.rejected
        );
        for (kind, n) in &self.rejected_by {
            t.push_str(&format!("  {kind:<22}{n:>5}\n"));
        }
        t.push_str(&format!(
            "test documents: valid accepted {}, valid rejected {}, invalid rejected {}, invalid ACCEPTED {}\n\
             generated               {:>5}\n\
             complete                {:>5}\n\
             valid                   {:>5}\n\
             INVALID                 {:>5}\n\
             truncated (max_tokens)  {:>5}\n\
             errors                  {:>5}\n",
            self.valid_docs_accepted,
            self.valid_docs_rejected,
            self.invalid_docs_rejected,
            self.invalid_docs_accepted,
            self.generated,
            self.generated_complete,
            self.generated_valid,
            self.generated_invalid,
            self.truncated,
            self.generation_errors
        ));
        t
    }
}
