//! The JSON Schema validity suite over `../shared/schemas/` (542 JSONSchemaBench schemas): every schema is either
//! rejected up front with a clear error, or (a) its grammar accepts the valid test documents and rejects the
//! invalid ones — on all 542 — and (b) a greedy SmolLM2 generation under `response_format: json_schema` that
//! finishes validates — on a deterministic subset of ~60 compiled schemas (the full run is
//! `agentd bench schemas`).

use std::path::PathBuf;

use agentd::bench::schema_suite::{self as suite, CaseReport, Generation, SuiteSummary};

use crate::suite::common;

fn cases() -> Vec<suite::SchemaCase> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/schemas");
    suite::load_dir(&dir).unwrap()
}

fn admitted_and_checked() -> Vec<CaseReport> {
    let engine = common::engine();
    let factory = engine.grammar_factory().unwrap();
    cases()
        .iter()
        .map(|c| suite::check_documents(&factory, engine.tokenizer(), c))
        .collect()
}

#[test]
fn every_schema_is_rejected_clearly_or_enforced_exactly() {
    let reports = admitted_and_checked();
    let summary = SuiteSummary::of(&reports);
    eprintln!("{}", summary.table());
    assert_eq!(summary.schemas, 542);
    let wrong: Vec<&CaseReport> = reports.iter().filter(|r| r.invalid_accepted > 0).collect();
    assert!(
        wrong.is_empty(),
        "grammar accepts invalid documents: {wrong:#?}"
    );
    assert_eq!(summary.valid_docs_rejected, 0, "{reports:#?}");
    for r in &reports {
        if let Some(kind) = &r.rejected {
            let message = r.reject_message.as_deref().unwrap_or("");
            assert!(!kind.is_empty() && !message.is_empty(), "{r:?}");
            // A grammar error must never be the reason: every rejection names a keyword, a location or emptiness.
            assert_ne!(kind, "grammar error", "{r:?}");
        }
    }
    // Regression guard: most schemas compile.
    assert!(summary.compiled >= 350, "{}", summary.table());
}

#[test]
fn constrained_generations_validate() {
    let engine = common::engine();
    let factory = engine.grammar_factory().unwrap();
    let compiled: Vec<suite::SchemaCase> = cases()
        .into_iter()
        .filter(|c| {
            suite::check_documents(&factory, engine.tokenizer(), c)
                .rejected
                .is_none()
        })
        .collect();
    let every = (compiled.len() / 60).max(1);
    let mut reports = Vec::new();
    for case in compiled.iter().step_by(every) {
        reports.push(CaseReport {
            name: case.name.clone(),
            generation: Some(suite::generate_one(
                engine,
                case,
                &suite::suite_sampling(),
                256,
            )),
            ..CaseReport::default()
        });
    }
    let summary = SuiteSummary::of(&reports);
    eprintln!("{}", summary.table());
    let bad: Vec<&CaseReport> = reports
        .iter()
        .filter(|r| {
            matches!(
                r.generation,
                Some(Generation::Invalid { .. } | Generation::Error { .. })
            )
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(summary.generated >= 55, "{}", summary.table());
    // Most finish within 256 tokens; the rest are reported as truncated, never as invalid.
    assert!(
        summary.generated_complete * 2 >= summary.generated,
        "{}",
        summary.table()
    );
}
