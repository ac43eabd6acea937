//! Tool calls under `tool_choice: "auto"` without a model: the triggered grammar (markers, fenced and bare JSON
//! calls of offered tools, JSON that is not a call) fed tokenized strings of both real tokenizers, the output
//! assembler on the same strings, every format of the table, and the shortest close of a cut call.

use agentd::engine::{ConstraintSpec, FinishReason, OutputAssembler, OutputDelta};
use agentd::schema::ToolChoice;
use agentd::text::call_format::ToolCallFormat;
use serde_json::Value;

use super::constraint::{accepts, qwen, smol, spec, three_tools, Model};

const NAMES: [&str; 3] = ["get_weather", "read_file", "add"];

fn assemble(format: ToolCallFormat, text: &str, step: usize) -> (String, Vec<(String, Value)>) {
    let mut a = OutputAssembler::new(format, true).with_tools(NAMES.map(String::from).to_vec());
    let chars: Vec<char> = text.chars().collect();
    let mut deltas = Vec::new();
    for piece in chars.chunks(step) {
        deltas.extend(a.push(&piece.iter().collect::<String>()).unwrap());
    }
    deltas.extend(a.finish(FinishReason::Eos).unwrap());
    let mut content = String::new();
    let mut calls = Vec::new();
    for d in deltas {
        match d {
            OutputDelta::Content { text } => content.push_str(&text),
            OutputDelta::ToolCallEnd { call, .. } => {
                calls.push((call.name, serde_json::from_str(&call.arguments).unwrap()))
            }
            _ => {}
        }
    }
    (content, calls)
}

const FENCED: &str = "I will read it.\n```json\n{\n  \"name\": \"read_file\", \"arguments\": {\"path\": \"calc.py\"}}\n```";

#[test]
fn fenced_and_bare_json_calls_are_constrained_calls() {
    let auto = spec(ToolChoice::Auto);
    for m in [smol(), qwen()] {
        let f = ToolCallFormat::HERMES;
        assert!(accepts(m, &auto, f, FENCED));
        assert!(accepts(
            m,
            &auto,
            f,
            r#"{"name": "add", "arguments": {"a": 1, "b": 2}}"#
        ));
        assert!(accepts(
            m,
            &auto,
            f,
            "First:\n{\"name\":\"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```\n"
        ));
        // After a call only more calls: no narrated result.
        assert!(!accepts(
            m,
            &auto,
            f,
            &format!("{FENCED}\nThe file says 1 + 1 = 3.")
        ));
        // Once the object names a tool, the rest must be a valid call of that tool.
        assert!(!accepts(
            m,
            &auto,
            f,
            r#"{"name": "add", "arguments": {"a": 1}}"#
        ));
        assert!(!accepts(
            m,
            &auto,
            f,
            r#"{"name": "read_file", "arguments": [{"path": "x"}]}"#
        ));
        assert!(!accepts(
            m,
            &auto,
            f,
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"\"}}\n```"
        ));
    }
}

#[test]
fn json_that_is_not_a_call_stays_text() {
    let auto = spec(ToolChoice::Auto);
    let texts = [
        "Use a dict like {\"x\": 1} here.",
        "```json\n{\"x\": 1, \"name\": \"add\"}\n```",
        "A person looks like {\"name\": \"Ada\", \"age\": 36} in JSON.",
        "```python\nd = {\"name\": \"reader\"}\nusers = [\n    {\"name\": \"Ada\"},\n]\n```",
    ];
    for m in [smol(), qwen()] {
        for t in texts {
            assert!(accepts(m, &auto, ToolCallFormat::HERMES, t), "{t}");
            let (content, calls) = assemble(ToolCallFormat::HERMES, t, 3);
            assert_eq!((content.as_str(), calls.len()), (t, 0));
        }
        // The rule's other side: an object that begins a line with the key "name" is a call, so its name must
        // be an offered tool.
        assert!(!accepts(
            m,
            &auto,
            ToolCallFormat::HERMES,
            "```json\n{\"name\": \"Ada\", \"age\": 36}\n```"
        ));
        assert!(!accepts(
            m,
            &auto,
            ToolCallFormat::HERMES,
            "{\"name\": \"multiply\", \"arguments\": {}}"
        ));
    }
}

#[test]
fn the_assembler_turns_every_shape_into_calls() {
    for step in [1, 2, 7, 1000] {
        let (content, calls) = assemble(ToolCallFormat::HERMES, FENCED, step);
        assert_eq!(content, "I will read it.", "step {step}");
        assert_eq!(
            calls,
            vec![(
                "read_file".to_string(),
                serde_json::json!({"path": "calc.py"})
            )]
        );
        let two = "Hi.\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n";
        let (content, calls) = assemble(ToolCallFormat::HERMES, two, step);
        assert_eq!(content, "Hi.");
        assert_eq!(calls.len(), 2);
        let l3 = "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}";
        let (content, calls) = assemble(ToolCallFormat::LLAMA3_JSON, l3, step);
        assert_eq!((content.as_str(), calls.len()), ("", 1));
        let mistral = ToolCallFormat::from_name("mistral").unwrap();
        let m = "Sure. [TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}]";
        let (content, calls) = assemble(mistral, m, step);
        assert_eq!(content, "Sure.");
        assert_eq!(
            calls.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["add", "read_file"]
        );
    }
}

#[test]
fn every_format_of_the_table_compiles_and_round_trips_its_own_calls() {
    for f in ToolCallFormat::all() {
        for m in [smol(), qwen()] {
            let rendered = f.render_calls([
                ("add", r#"{"a": 1, "b": 2}"#),
                ("get_weather", r#"{"city": "Oslo"}"#),
            ]);
            for choice in [ToolChoice::Auto, ToolChoice::Required] {
                assert!(
                    accepts(m, &spec(choice.clone()), f, &rendered),
                    "{f} {choice:?}: {rendered}"
                );
            }
            let (content, calls) = assemble(f, &rendered, 5);
            assert_eq!((content.as_str(), calls.len()), ("", 2), "{f}: {rendered}");
        }
    }
}

#[test]
fn parallel_false_allows_one_call_only() {
    let one = ConstraintSpec {
        parallel_tool_calls: false,
        ..spec(ToolChoice::Auto)
    };
    let call = r#"{"name": "add", "arguments": {"a": 1, "b": 2}}"#;
    assert!(accepts(
        smol(),
        &one,
        ToolCallFormat::HERMES,
        &format!("x {call}\n")
    ));
    assert!(!accepts(
        smol(),
        &one,
        ToolCallFormat::HERMES,
        &format!("{call}\n{call}")
    ));
}

/// Feeds `prefix`, asks for the shortest close, applies it: the text must then parse as a complete call.
fn close_after(m: &Model, spec: &ConstraintSpec, prefix: &str) -> (String, usize) {
    let mut c = m
        .factory
        .compile(spec, ToolCallFormat::HERMES)
        .unwrap()
        .unwrap();
    let ids = m.tokenizer.encode(prefix, true).unwrap();
    c.force(&ids).unwrap();
    assert!(c.in_call().unwrap());
    let close = c
        .shortest_close(64)
        .unwrap()
        .expect("a close within 64 tokens");
    assert!(c.in_call().unwrap(), "probing changed nothing");
    c.force(&close).unwrap();
    assert!(!c.in_call().unwrap());
    let mut all = ids.clone();
    all.extend(&close);
    (m.tokenizer.decode(&all, false).unwrap(), close.len())
}

#[test]
fn a_cut_call_closes_in_a_few_tokens_as_valid_json() {
    for m in [smol(), qwen()] {
        // An endless string inside a required call.
        let required = spec(ToolChoice::Required);
        let (text, n) = close_after(m, &required, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris is a very long na");
        let body = text
            .trim_start_matches("<tool_call>\n")
            .trim_end_matches("\n</tool_call>");
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert_eq!(v["arguments"]["city"], "Paris is a very long na");
        assert!(n <= 8, "{n} tokens: {text:?}");
        // A missing required key is filled with the shortest value the schema allows.
        let (text, _) = close_after(
            m,
            &required,
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1",
        );
        let body = text
            .trim_start_matches("<tool_call>\n")
            .trim_end_matches("\n</tool_call>");
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(
            three_tools()[2].validate_arguments(&v["arguments"]).is_ok(),
            "{text}"
        );
        // A fenced JSON call under auto.
        let auto = spec(ToolChoice::Auto);
        let (text, _) = close_after(
            m,
            &auto,
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/ma",
        );
        assert!(text.ends_with("\"src/ma\"}}"), "{text:?}");
    }
}

mod with_the_model {
    use agentd::provider::Provider;
    use agentd::provider::{
        collect, CompletionRequest, ContentBlock, InvalidToolCallKind, LocalProvider, Sampling,
        StopReason, ToolChoice, ToolSpec,
    };
    use serde_json::{json, Value};
    use tokio_util::sync::CancellationToken;

    use crate::suite::common;

    fn note_tool() -> ToolSpec {
        ToolSpec::new(
            "note",
            "Save a note",
            json!({"type": "object", "properties": {"text": {"type": "string"}, "tags": {"type": "array",
                "items": {"type": "string"}, "minItems": 1}}, "required": ["text", "tags"],
                "additionalProperties": false}),
        )
        .unwrap()
    }

    /// A call cut by `max_tokens`: closed early with valid JSON when the budget allows, always marked truncated,
    /// `finish_reason` length — or, where no call closes within the budget, not started at all; the rates over a
    /// sweep of budgets are printed (and none may be zero).
    #[tokio::test]
    async fn a_call_cut_by_max_tokens_is_reported_and_closed_when_it_can_be() {
        let p = LocalProvider::new(common::engine().clone());
        let (mut rescued, mut cut, mut not_started) = (0, 0, 0);
        for max_tokens in (10..=40).step_by(2) {
            let req = CompletionRequest {
                tools: vec![note_tool()],
                tool_choice: ToolChoice::Required,
                sampling: Sampling::greedy(),
                max_tokens: Some(max_tokens),
                ..CompletionRequest::user(
                    "Write a long, detailed note about the history of the city of Rome, with many tags.",
                )
            };
            let c = collect(p.stream(req, CancellationToken::new())).await;
            let calls: Vec<_> = c
                .message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolCall(t) => Some(t.clone()),
                    _ => None,
                })
                .collect();
            if calls.is_empty() {
                // Not started: no call of this schema closes within the budget.
                assert_eq!(
                    c.stop_reason,
                    StopReason::Length,
                    "{max_tokens}: {:?}",
                    c.message
                );
                not_started += 1;
                continue;
            }
            assert_eq!(calls.len(), 1, "{max_tokens}: {:?}", c.message);
            let call = &calls[0];
            if c.stop_reason != StopReason::Length {
                assert!(call.invalid.is_none(), "{call:?}");
                continue;
            }
            cut += 1;
            let invalid = call.invalid.as_ref().expect("a cut call is marked");
            assert_eq!(invalid.kind, InvalidToolCallKind::Truncated, "{call:?}");
            // Arguments are JSON either way: closed early by the grammar, or (left open) closed by the provider.
            assert_ne!(call.arguments, Value::Null, "{max_tokens}: {call:?}");
            if invalid.message.contains("closed early") {
                // Closed early by the grammar: the arguments also satisfy the schema.
                note_tool()
                    .validate_arguments(&call.arguments)
                    .unwrap_or_else(|e| panic!("{max_tokens}: {e:?} {call:?}"));
                rescued += 1;
            }
        }
        eprintln!(
            "max_tokens sweep: {not_started} calls not started, {cut} cut, {rescued} closed early as valid JSON"
        );
        assert!(
            cut > 0 && rescued > 0 && not_started > 0,
            "{not_started} not started, {cut} cut, {rescued} rescued"
        );
    }
}

#[test]
fn a_json_reply_starting_with_name_is_not_taken_for_a_call() {
    use agentd::schema::ResponseFormat;
    let spec = ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "person".into(),
            schema: serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            strict: false,
        },
        ..spec(ToolChoice::Auto)
    };
    let doc = r#"{"name": "Bob"}"#;
    assert!(accepts(smol(), &spec, ToolCallFormat::HERMES, doc));
    let mut a = OutputAssembler::for_request(&spec, ToolCallFormat::HERMES);
    let mut deltas = a.push(doc).unwrap();
    deltas.extend(a.finish(FinishReason::Eos).unwrap());
    assert_eq!(deltas, vec![OutputDelta::Content { text: doc.into() }]);
}

/// A number's digits end: a call whose integer runs on past JavaScript's safe range (Qwen2.5-Coder-0.5B wrote
/// `"yield_time_ms": 1000…` until `max_tokens` in a Codex session) is not in the grammar, while ordinary numbers,
/// negative ones and fractions are.
#[test]
fn numbers_in_calls_have_bounded_digits() {
    let call = |offset: &str| {
        format!("<tool_call>\n{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"a.txt\", \"offset\": {offset}}}}}\n</tool_call>")
    };
    let add = |a: &str| {
        format!("<tool_call>\n{{\"name\": \"add\", \"arguments\": {{\"a\": {a}, \"b\": 2}}}}\n</tool_call>")
    };
    for m in [smol(), qwen()] {
        let auto = spec(ToolChoice::Auto);
        let f = ToolCallFormat::HERMES;
        assert!(accepts(m, &auto, f, &call("12")));
        assert!(accepts(m, &auto, f, &call("9007199254740991")));
        assert!(!accepts(m, &auto, f, &call("9007199254740992")));
        assert!(!accepts(
            m,
            &auto,
            f,
            &call(&format!("1{}", "0".repeat(40)))
        ));
        assert!(accepts(m, &auto, f, &add("-3.25")));
        assert!(accepts(m, &auto, f, &add("999999999999999")));
        assert!(!accepts(m, &auto, f, &add(&format!("1{}", "0".repeat(30)))));
    }
}
