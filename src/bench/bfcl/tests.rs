//! The conversion of BFCL functions and the scoring, on a small inline sample (no model, no server).

use serde_json::json;

use super::data::{convert_function, convert_schema, openai_name, parse_category};
use super::score::{looks_like_call, score, summarize, Choice};
use crate::bench::{CallRecord, RequestSample};
use crate::provider::check_tool_call;

/// Three entries in BFCL's shape: a dotted name with float, tuple, any and nested dict types; two functions of
/// which one is expected; a schema agentd refuses (an enum that contradicts its type).
const QUESTIONS: &str = r#"{"id": "simple_python_0", "question": [[{"role": "user", "content": "Hypotenuse of 4 and 5?"}]], "function": [{"name": "math.hypot", "description": "Euclidean norm.", "parameters": {"type": "dict", "properties": {"x": {"type": "float", "description": "x."}, "y": {"type": "integer", "description": "y.", "default": 0}, "point": {"type": "tuple", "items": {"type": "float"}}, "extra": {"type": "any"}, "opts": {"type": "dict", "properties": {"mode": {"type": "string", "enum": ["fast", "exact"]}}}}, "required": ["x", "y"]}}]}
{"id": "multiple_1", "question": [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Area of a circle of radius 2?"}]], "function": [{"name": "geometry.circle_area", "description": "Circle area.", "parameters": {"type": "dict", "properties": {"radius": {"type": "float"}}, "required": ["radius"]}}, {"name": "geometry.square_area", "description": "Square area.", "parameters": {"type": "dict", "properties": {"side": {"type": "integer"}}, "required": ["side"]}}]}
{"id": "simple_python_2", "question": [[{"role": "user", "content": "Pick a colour."}]], "function": [{"name": "pick", "description": "Pick.", "parameters": {"type": "dict", "properties": {"n": {"type": "integer", "enum": ["red", "blue"]}}, "required": ["n"]}}]}
"#;

const ANSWERS: &str = r#"{"id": "simple_python_0", "ground_truth": [{"math.hypot": {"x": [4.0], "y": [5]}}]}
{"id": "multiple_1", "ground_truth": [{"geometry.circle_area": {"radius": [2.0]}}]}
{"id": "simple_python_2", "ground_truth": [{"pick": {"n": ["red"]}}]}
"#;

#[test]
fn types_and_names_are_converted_as_bfcl_does() {
    assert_eq!(openai_name("math.hypot"), "math_hypot");
    assert_eq!(openai_name("a.b.c_d-e"), "a_b_c_d-e");

    let mut schema = json!({"type": "dict", "properties": {
        "f": {"type": "float", "description": "kept"},
        "t": {"type": "tuple", "items": {"type": "float"}},
        "a": {"type": "any", "description": "anything"},
        "l": {"type": "list", "items": {"type": "dict", "properties": {"b": {"type": "bool"}}}},
        "s": {"type": "String", "enum": ["x"], "default": "x"}
    }, "required": ["f"]});
    convert_schema(&mut schema);
    assert_eq!(
        schema,
        json!({"type": "object", "properties": {
            "f": {"type": "number", "description": "kept"},
            "t": {"type": "array", "items": {"type": "number"}},
            "a": {"description": "anything"},
            "l": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "boolean"}}}},
            "s": {"type": "string", "enum": ["x"], "default": "x"}
        }, "required": ["f"]})
    );

    let spec = convert_function(&json!({"name": "math.hypot", "description": "d",
        "parameters": {"type": "dict", "properties": {"x": {"type": "float"}, "any": {"type": "any"}},
                       "required": ["x"]}}))
    .unwrap();
    assert_eq!(spec.name, "math_hypot");
    assert_eq!(spec.description, "d");
    // `any` takes a number as well as a string; `float` takes an integer.
    assert!(spec.validate_arguments(&json!({"x": 4, "any": 1})).is_ok());
    assert!(spec
        .validate_arguments(&json!({"x": 4, "any": "s"}))
        .is_ok());
    assert!(spec.validate_arguments(&json!({"x": "4"})).is_err());
    assert!(spec.validate_arguments(&json!({})).is_err());
}

fn sample(calls: &[(&str, &str)], text: &str, finish: &str, ms: f64) -> RequestSample {
    RequestSample {
        total_ms: ms,
        finish_reason: Some(finish.into()),
        text: text.into(),
        calls: calls
            .iter()
            .map(|(name, args)| CallRecord {
                name: name.to_string(),
                arguments: args.to_string(),
                valid: false,
                problem: None,
            })
            .collect(),
        ..RequestSample::default()
    }
}

#[test]
fn an_inline_sample_is_loaded_and_scored() {
    let cat = parse_category("mixed", QUESTIONS, Some(ANSWERS), None, "inline").unwrap();
    assert!(cat.has_answers);
    assert_eq!(cat.questions.len(), 2);
    assert_eq!(cat.skipped.len(), 1);
    assert_eq!(cat.skipped[0].id, "simple_python_2");
    assert!(
        cat.skipped[0].reason.contains("pick"),
        "{}",
        cat.skipped[0].reason
    );
    let (q0, q1) = (&cat.questions[0], &cat.questions[1]);
    assert_eq!(q0.expected, ["math_hypot"]);
    assert_eq!(q0.system, None);
    assert_eq!(q1.expected, ["geometry_circle_area"]);
    assert_eq!(q1.system.as_deref(), Some("Be brief."));
    assert_eq!(q1.tools.len(), 2);
    assert_eq!(
        parse_category("mixed", QUESTIONS, Some(ANSWERS), Some(1), "inline")
            .unwrap()
            .questions
            .len(),
        1
    );

    // What the bench client does with every streamed call: check it against the question's tools.
    let checked = |q: &super::Question, mut s: RequestSample| {
        for c in &mut s.calls {
            c.valid = check_tool_call(&q.tools, "id", &c.name, &c.arguments)
                .invalid
                .is_none();
        }
        s
    };
    // q0: a valid call of the right function.
    let r0 = score(
        "mixed",
        q0,
        Choice::Required,
        true,
        checked(
            q0,
            sample(
                &[("math_hypot", r#"{"x": 4, "y": 5}"#)],
                "",
                "tool_calls",
                100.0,
            ),
        ),
    );
    assert!(r0.answered && r0.right_function == Some(true) && !r0.cut_by_length);
    assert_eq!((r0.calls, r0.valid_calls), (1, 1));
    // q1: the wrong function first, then the right one with arguments cut off; cut by length.
    let r1 = score(
        "mixed",
        q1,
        Choice::Required,
        true,
        checked(
            q1,
            sample(
                &[
                    ("geometry_square_area", r#"{"side": 2}"#),
                    ("geometry_circle_area", r#"{"radius": "#),
                ],
                "",
                "length",
                300.0,
            ),
        ),
    );
    assert!(r1.answered && r1.right_function == Some(false) && r1.cut_by_length);
    assert_eq!((r1.calls, r1.valid_calls), (2, 1));
    // q1 under auto: the call written as fenced JSON in the content.
    let text = "```json\n{\"name\": \"geometry_circle_area\", \"arguments\": {\"radius\": 2}}\n```";
    let r2 = score(
        "mixed",
        q1,
        Choice::Auto,
        true,
        checked(q1, sample(&[], text, "stop", 200.0)),
    );
    assert!(!r2.answered && r2.call_in_text && r2.fenced_text);
    assert_eq!(r2.right_function, Some(false));

    let row = summarize("mixed", Choice::Required, true, &[r0, r1]);
    assert_eq!(
        (row.questions, row.answered, row.calls, row.valid_calls),
        (2, 2, 3, 2)
    );
    assert_eq!(row.right_function, Some(1));
    assert_eq!(row.cut_by_length, 1);
    assert_eq!(row.answered_share(), Some(1.0));
    assert_eq!(row.right_share(), Some(0.5));
    let latency = row.latency_ms.unwrap();
    assert_eq!((latency.mean, latency.p50), (200.0, 200.0));
}

#[test]
fn calls_written_as_text_are_recognised() {
    let tools = ["get_weather", "math_hypot"];
    assert!(looks_like_call(
        r#"Sure: {"name": "get_weather", "arguments": {"city": "Paris"}}"#,
        &tools
    ));
    assert!(looks_like_call(r#"[{"math_hypot": {"x": 1}}]"#, &tools));
    assert!(looks_like_call("<tool_call>\n{\"name\": \"x\"}", &tools));
    assert!(!looks_like_call(r#"{"name": "Paris"} and {"#, &tools));
    assert!(!looks_like_call("The hypotenuse is 6.4.", &tools));
}
