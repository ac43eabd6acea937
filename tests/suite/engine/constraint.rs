//! Grammars without a model: every request shape compiled with the real tokenizers (SmolLM2: text delimiters;
//! Qwen2.5: `<tool_call>` special tokens) and fed tokenized strings; the bad inputs of issue item 10; the output
//! assembler on streamed text.

use std::sync::OnceLock;

use agentd::engine::{
    ConstraintSpec, EngineError, FinishReason, GgufFile, GrammarFactory, OutputAssembler,
    OutputDelta,
};
use agentd::schema::SchemaError;
use agentd::schema::ToolSpec;
use agentd::schema::{ResponseFormat, ToolChoice};
use agentd::text::call_format::ToolCallFormat;
use agentd::text::tokenizer::Tokenizer;
use serde_json::{json, Value};

use crate::suite::common;

pub struct Model {
    pub tokenizer: Tokenizer,
    pub factory: GrammarFactory,
}

fn load(path: std::path::PathBuf, n_vocab: usize) -> Model {
    let gguf = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
    let factory = GrammarFactory::new(&tokenizer, n_vocab.max(tokenizer.vocab_size())).unwrap();
    Model { tokenizer, factory }
}

pub fn smol() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| load(common::smollm2_path(), 0))
}

pub fn qwen() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    // Qwen2.5's logits are wider than its vocabulary.
    M.get_or_init(|| load(common::qwen_path(), 151_936))
}

/// Three tools: the set the end-to-end tests use too.
pub fn three_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Current weather in a city",
            json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city"]}),
        )
        .unwrap(),
        ToolSpec::new(
            "read_file",
            "Read a text file",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "minLength": 1},
                "offset": {"type": "integer", "minimum": 1}},
                "required": ["path"], "additionalProperties": false}),
        )
        .unwrap(),
        ToolSpec::new(
            "add",
            "Add two numbers",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"], "additionalProperties": false}),
        )
        .unwrap(),
    ]
}

pub fn spec(choice: ToolChoice) -> ConstraintSpec {
    ConstraintSpec {
        tools: three_tools(),
        tool_choice: choice,
        ..ConstraintSpec::default()
    }
}

/// Whether the request's grammar accepts `text` (tokenized as the model would write it) as a complete output.
pub fn accepts(m: &Model, spec: &ConstraintSpec, format: ToolCallFormat, text: &str) -> bool {
    let mut c = m.factory.compile(spec, format).unwrap().expect("a grammar");
    let ids = m.tokenizer.encode(text, true).unwrap();
    c.accepts_tokens(&ids).unwrap()
}

const WEATHER: &str = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
const ADD: &str = r#"{"name": "add", "arguments": {"a": 1, "b": 2.5}}"#;

fn hermes(body: &str) -> String {
    format!("<tool_call>\n{body}\n</tool_call>")
}

#[test]
fn factory_knows_every_end_token_and_the_special_delimiters() {
    let s = smol();
    let im_end = s.tokenizer.token_id("<|im_end|>").unwrap();
    assert!(s.factory.eos_ids().contains(&im_end));
    assert!(!s.factory.special_delimiters(ToolCallFormat::HERMES));
    let q = qwen();
    assert!(q
        .factory
        .eos_ids()
        .contains(&q.tokenizer.token_id("<|im_end|>").unwrap()));
    assert!(q.factory.special_delimiters(ToolCallFormat::HERMES));
    assert_eq!(
        q.tokenizer.encode("<tool_call>", false).unwrap(),
        vec![151657]
    );
    eprintln!(
        "parser factory build: smollm2 {:.3} s, qwen2.5 {:.3} s",
        s.factory.build_secs(),
        q.factory.build_secs()
    );
}

#[test]
fn auto_allows_text_and_constrains_every_call() {
    for m in [smol(), qwen()] {
        let auto = spec(ToolChoice::Auto);
        let f = ToolCallFormat::HERMES;
        assert!(accepts(m, &auto, f, "Hello! How can I help?"));
        assert!(accepts(m, &auto, f, ""));
        assert!(accepts(m, &auto, f, &hermes(WEATHER)));
        assert!(accepts(
            m,
            &auto,
            f,
            &format!("Let me check.\n{}", hermes(WEATHER))
        ));
        assert!(accepts(
            m,
            &auto,
            f,
            &format!("{}\n{}", hermes(WEATHER), hermes(ADD))
        ));
        // A call after text is still a call: unknown tools, bad arguments and loose JSON are rejected.
        let bad = [
            r#"{"name": "rm_rf", "arguments": {}}"#,
            r#"{"name": "add", "arguments": {"a": "1", "b": 2}}"#,
            r#"{"name": "add", "arguments": {"a": 1}}"#,
            r#"{"name": "read_file", "arguments": {"path": "a", "mode": "w"}}"#,
            r#"{"name":"add","arguments":{"a":1,"b":2}}"#,
        ];
        for body in bad {
            assert!(!accepts(m, &auto, f, &hermes(body)), "{body}");
            assert!(
                !accepts(m, &auto, f, &format!("Sure: {}", hermes(body))),
                "{body}"
            );
        }
        // Text after the calls is not a reply shape any template renders.
        assert!(!accepts(
            m,
            &auto,
            f,
            &format!("{} and more", hermes(WEATHER))
        ));
    }
}

#[test]
fn required_named_and_parallel() {
    let f = ToolCallFormat::HERMES;
    for m in [smol(), qwen()] {
        let required = spec(ToolChoice::Required);
        assert!(!accepts(m, &required, f, "No."));
        assert!(!accepts(m, &required, f, ""));
        assert!(accepts(m, &required, f, &hermes(ADD)));
        assert!(accepts(
            m,
            &required,
            f,
            &format!("{}\n{}", hermes(ADD), hermes(WEATHER))
        ));
        let mut single = spec(ToolChoice::Required);
        single.parallel_tool_calls = false;
        assert!(accepts(m, &single, f, &hermes(ADD)));
        assert!(!accepts(
            m,
            &single,
            f,
            &format!("{}\n{}", hermes(ADD), hermes(WEATHER))
        ));
        let named = spec(ToolChoice::Tool { name: "add".into() });
        assert!(accepts(m, &named, f, &hermes(ADD)));
        assert!(!accepts(m, &named, f, &hermes(WEATHER)));
        assert!(!accepts(
            m,
            &named,
            f,
            &format!("{}\n{}", hermes(ADD), hermes(ADD))
        ));
    }
}

/// A reasoning model thinks first: the grammar lets a think block precede the constrained part (optional, or
/// required when the prompt opened it), and constrains the calls after it as before.
#[test]
fn think_block_before_the_constrained_part() {
    use agentd::text::reasoning::{ThinkMarkers, ThinkStart};
    let f = ToolCallFormat::HERMES;
    let markers = ThinkMarkers::detect("<think></think>").unwrap();
    let thinking = |choice: ToolChoice, start: ThinkStart| ConstraintSpec {
        reasoning: Some(markers.block(start)),
        ..spec(choice)
    };
    let thought = "<think>\nThe user wants a sum; I will call add.\n</think>\n\n";
    for m in [smol(), qwen()] {
        let plain = spec(ToolChoice::Required);
        assert!(!accepts(m, &plain, f, &format!("{thought}{}", hermes(ADD))));
        for choice in [
            ToolChoice::Required,
            ToolChoice::Tool { name: "add".into() },
        ] {
            let optional = thinking(choice.clone(), ThinkStart::Optional);
            assert!(accepts(
                m,
                &optional,
                f,
                &format!("{thought}{}", hermes(ADD))
            ));
            assert!(accepts(m, &optional, f, &hermes(ADD)));
            assert!(!accepts(m, &optional, f, thought));
            // After the block the call is constrained as ever.
            let bad = r#"{"name": "add", "arguments": {"a": "1", "b": 2}}"#;
            assert!(!accepts(
                m,
                &optional,
                f,
                &format!("{thought}{}", hermes(bad))
            ));
            // Prose is no call.
            assert!(!accepts(m, &optional, f, &format!("{thought}Sure.")));
            let inside = thinking(choice, ThinkStart::Inside);
            let rest = thought.trim_start_matches("<think>");
            assert!(accepts(m, &inside, f, &format!("{rest}{}", hermes(ADD))));
            assert!(!accepts(m, &inside, f, &hermes(ADD)));
        }
        let auto = thinking(ToolChoice::Auto, ThinkStart::Optional);
        assert!(accepts(m, &auto, f, &format!("{thought}It is 3.5.")));
        assert!(accepts(
            m,
            &auto,
            f,
            &format!("{thought}{}", hermes(WEATHER))
        ));
        // A JSON reply after thinking.
        let doc = ConstraintSpec {
            reasoning: Some(markers.block(ThinkStart::Optional)),
            response_format: ResponseFormat::JsonObject,
            ..ConstraintSpec::default()
        };
        assert!(accepts(m, &doc, f, &format!("{thought}{{\"a\": 1}}")));
        assert!(!accepts(m, &doc, f, &format!("{thought}no")));
    }
}

#[test]
fn none_never_allows_a_call() {
    let f = ToolCallFormat::HERMES;
    for m in [smol(), qwen()] {
        let none = spec(ToolChoice::None);
        assert!(accepts(m, &none, f, "Plain answer."));
        assert!(!accepts(m, &none, f, &hermes(WEATHER)));
        assert!(!accepts(m, &none, f, &format!("text {}", hermes(WEATHER))));
    }
    // No tools and no format: nothing to constrain.
    let plain = ConstraintSpec::default();
    assert!(smol().factory.compile(&plain, f).unwrap().is_none());
}

#[test]
fn llama3_json_format() {
    let f = ToolCallFormat::LLAMA3_JSON;
    let m = smol();
    let call = |name: &str, args: &str| format!("{{\"name\": \"{name}\", \"parameters\": {args}}}");
    let auto = spec(ToolChoice::Auto);
    assert!(accepts(m, &auto, f, "It is sunny."));
    assert!(accepts(
        m,
        &auto,
        f,
        &call("get_weather", r#"{"city": "Oslo"}"#)
    ));
    assert!(accepts(
        m,
        &auto,
        f,
        &format!(
            "{}; {}",
            call("add", r#"{"a": 1, "b": 2}"#),
            call("get_weather", r#"{"city": "Oslo"}"#)
        )
    ));
    // An object starting with the key "name" is a call and must be valid; other JSON is text.
    assert!(!accepts(m, &auto, f, &call("nope", "{}")));
    assert!(!accepts(m, &auto, f, &call("add", r#"{"a": 1}"#)));
    assert!(accepts(m, &auto, f, r#"  {"not": "a call"}"#));
    assert!(accepts(
        m,
        &auto,
        f,
        &format!("<|python_tag|>{}", call("add", r#"{"a": 1, "b": 2}"#))
    ));
    let named = spec(ToolChoice::Tool { name: "add".into() });
    assert!(!accepts(m, &named, f, "text"));
    assert!(accepts(m, &named, f, &call("add", r#"{"a": 1, "b": 2}"#)));
}

#[test]
fn response_formats() {
    let m = smol();
    let f = ToolCallFormat::HERMES;
    let object = ConstraintSpec {
        response_format: ResponseFormat::JsonObject,
        ..ConstraintSpec::default()
    };
    assert!(accepts(m, &object, f, r#"{"a": [1, 2], "b": {"c": null}}"#));
    assert!(!accepts(m, &object, f, "[1, 2]"));
    assert!(!accepts(m, &object, f, "Sure! {}"));
    let schema = ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "person".into(),
            schema: json!({"type": "object", "properties": {
                "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
                "required": ["name", "age"], "additionalProperties": false}),
            strict: true,
        },
        ..ConstraintSpec::default()
    };
    assert!(accepts(m, &schema, f, r#"{"name": "Ada", "age": 36}"#));
    assert!(!accepts(m, &schema, f, r#"{"name": "Ada", "age": -1}"#));
    assert!(!accepts(m, &schema, f, r#"{"name": "Ada"}"#));
    assert!(!accepts(
        m,
        &schema,
        f,
        r#"{"name": "Ada", "age": 3, "x": 1}"#
    ));
    // With tools and `auto`: the document or calls, never free text.
    let mut both = schema.clone();
    both.tools = three_tools();
    assert!(accepts(m, &both, f, r#"{"name": "Ada", "age": 36}"#));
    assert!(accepts(m, &both, f, &hermes(ADD)));
    assert!(!accepts(m, &both, f, "Ada is 36."));
}

fn compile_err(spec: &ConstraintSpec) -> EngineError {
    match smol().factory.compile(spec, ToolCallFormat::HERMES) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {spec:?}"),
    }
}

fn schema_format(schema: Value) -> ConstraintSpec {
    ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "r".into(),
            schema,
            strict: true,
        },
        ..ConstraintSpec::default()
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    // An invalid JSON Schema names the location.
    let e = compile_err(&schema_format(
        json!({"type": "object", "properties": {"a": {"minimum": "x"}}}),
    ));
    assert!(
        matches!(&e, EngineError::Schema(SchemaError::InvalidSchema { location, .. }) if location.contains("/properties/a")),
        "{e}"
    );
    // An unsupported keyword is named.
    let e = compile_err(&schema_format(
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
    ));
    assert!(
        matches!(&e, EngineError::Schema(SchemaError::UnsupportedSchemaKeyword { keyword, location }) if keyword == "uniqueItems" && location == "/uniqueItems"),
        "{e}"
    );
    // tool_choice naming a tool that is not there.
    let e = compile_err(&spec(ToolChoice::Tool {
        name: "delete".into(),
    }));
    assert!(
        matches!(&e, EngineError::Schema(SchemaError::InvalidToolChoice(m)) if m.contains("delete")),
        "{e}"
    );
    // Duplicate names.
    let mut dup = spec(ToolChoice::Auto);
    dup.tools.push(dup.tools[0].clone());
    assert!(
        matches!(compile_err(&dup), EngineError::Schema(SchemaError::DuplicateToolName(n)) if n == "get_weather")
    );
    // `required` with no tools.
    let required = ConstraintSpec {
        tool_choice: ToolChoice::Required,
        ..ConstraintSpec::default()
    };
    assert!(matches!(
        compile_err(&required),
        EngineError::Schema(SchemaError::InvalidToolChoice(_))
    ));
    // Empty languages.
    for schema in [
        json!(false),
        json!({"enum": []}),
        json!({"type": "object", "properties": {"a": false}, "required": ["a"]}),
        json!({"type": "string", "minLength": 5, "maxLength": 2}),
        json!({"type": "integer", "minimum": 5, "maximum": 2}),
    ] {
        let e = compile_err(&schema_format(schema.clone()));
        assert!(
            matches!(e, EngineError::Schema(SchemaError::EmptyLanguage { .. })),
            "{schema}: {e}"
        );
    }
    // Invalid tools from the OpenAI shape.
    assert!(
        ToolSpec::from_openai(&json!({"type": "function", "function": {"name": "x y"}})).is_err()
    );
    assert!(ToolChoice::from_openai(&json!("sometimes")).is_err());
    assert!(ResponseFormat::from_openai(&json!({"type": "yaml"})).is_err());
}

/// Feeds `text` in pieces of `step` characters.
fn assemble(
    format: ToolCallFormat,
    text: &str,
    step: usize,
    finish: FinishReason,
) -> Vec<OutputDelta> {
    let names = ["get_weather", "add", "read_file"]
        .map(String::from)
        .to_vec();
    let mut a = OutputAssembler::new(format, true).with_tools(names);
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    for piece in chars.chunks(step) {
        out.extend(a.push(&piece.iter().collect::<String>()).unwrap());
    }
    out.extend(a.finish(finish).unwrap());
    out
}

fn summarize(deltas: &[OutputDelta]) -> (String, Vec<(String, String)>, usize) {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut fragments = 0;
    let mut streamed: Vec<String> = Vec::new();
    for d in deltas {
        match d {
            OutputDelta::Content { text } => content.push_str(text),
            OutputDelta::ToolCallStart { index, .. } => {
                assert_eq!(*index, streamed.len());
                streamed.push(String::new());
            }
            OutputDelta::ToolCallArguments { index, fragment } => {
                streamed[*index].push_str(fragment);
                fragments += 1;
            }
            OutputDelta::ToolCallEnd { index, call } => {
                assert_eq!(
                    streamed[*index], call.arguments,
                    "fragments add up to the arguments"
                );
                calls.push((call.name.clone(), call.arguments.clone()));
            }
            OutputDelta::ToolCallIncomplete { .. } => panic!("incomplete"),
        }
    }
    (content, calls, fragments)
}

#[test]
fn assembler_streams_argument_fragments() {
    let text = format!("Checking both.\n{}\n{}", hermes(WEATHER), hermes(ADD));
    for step in [1, 2, 3, 7, 1000] {
        let deltas = assemble(ToolCallFormat::HERMES, &text, step, FinishReason::Eos);
        let (content, calls, fragments) = summarize(&deltas);
        assert_eq!(content, "Checking both.");
        assert_eq!(
            calls,
            vec![
                (
                    "get_weather".to_string(),
                    r#"{"city": "Paris"}"#.to_string()
                ),
                ("add".to_string(), r#"{"a": 1, "b": 2.5}"#.to_string())
            ]
        );
        if step == 1 {
            assert!(fragments > 10, "one fragment per character: {fragments}");
        }
    }
    let ids: Vec<String> = assemble(ToolCallFormat::HERMES, &text, 5, FinishReason::Eos)
        .into_iter()
        .filter_map(|d| match d {
            OutputDelta::ToolCallEnd { call, .. } => Some(call.id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert!(ids
        .iter()
        .all(|id| id.starts_with("call_") && id.len() == 29));
}

#[test]
fn assembler_edge_cases() {
    // A `<` that does not open a call is content; so is a string containing the closer inside arguments.
    let tricky = format!(
        "a < b <tool\n{}",
        hermes(r#"{"name": "read_file", "arguments": {"path": "</tool_call>}"}}"#)
    );
    let (content, calls, _) = summarize(&assemble(
        ToolCallFormat::HERMES,
        &tricky,
        1,
        FinishReason::Eos,
    ));
    assert_eq!(content, "a < b <tool");
    assert_eq!(calls[0].1, r#"{"path": "</tool_call>}"}"#);
    // Without tools nothing is parsed.
    let mut plain = OutputAssembler::new(ToolCallFormat::HERMES, false);
    let d = plain.push(&hermes(WEATHER)).unwrap();
    assert!(matches!(&d[..], [OutputDelta::Content { .. }]));
    // llama3_json.
    let l3 = r#"{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}"#;
    let (content, calls, _) = summarize(&assemble(
        ToolCallFormat::LLAMA3_JSON,
        l3,
        2,
        FinishReason::Eos,
    ));
    assert_eq!(content, "");
    assert_eq!(calls.len(), 2);
    let (content, calls, _) = summarize(&assemble(
        ToolCallFormat::LLAMA3_JSON,
        "No call {here}",
        2,
        FinishReason::Eos,
    ));
    assert_eq!((content.as_str(), calls.len()), ("No call {here}", 0));
    // Cut short by max_tokens: reported as incomplete, not dropped.
    let cut = &hermes(WEATHER)[..30];
    let mut a = OutputAssembler::new(ToolCallFormat::HERMES, true);
    a.push(cut).unwrap();
    let end = a.finish(FinishReason::Length).unwrap();
    assert!(
        matches!(&end[..], [OutputDelta::ToolCallIncomplete { index: 0, .. }]),
        "{end:?}"
    );
    // Ended by the grammar inside a call, or a call that does not parse: internal errors.
    let mut a = OutputAssembler::new(ToolCallFormat::HERMES, true);
    a.push(cut).unwrap();
    assert!(matches!(
        a.finish(FinishReason::Eos),
        Err(EngineError::Internal(_))
    ));
    let mut a = OutputAssembler::new(ToolCallFormat::HERMES, true);
    assert!(matches!(
        a.push("<tool_call>\n{\"nom\": 1}\n</tool_call>"),
        Err(EngineError::Internal(_))
    ));
}

#[test]
fn call_arguments_get_no_undeclared_keys() {
    // `get_weather` does not forbid other keys, so such arguments validate; the grammar still never writes them.
    let extra = r#"{"name": "get_weather", "arguments": {"city": "Oslo", "note": "x"}}"#;
    let args = json!({"city": "Oslo", "note": "x"});
    assert!(three_tools()[0].validate_arguments(&args).is_ok());
    assert!(!accepts(
        smol(),
        &spec(ToolChoice::Auto),
        ToolCallFormat::HERMES,
        &hermes(extra)
    ));
    // A response_format schema is enforced as written: undeclared keys stay allowed there.
    let open = ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "open".into(),
            schema: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
            strict: false,
        },
        ..ConstraintSpec::default()
    };
    assert!(accepts(
        smol(),
        &open,
        ToolCallFormat::HERMES,
        r#"{"a": 1, "b": [true]}"#
    ));
}

#[test]
fn openai_request_fields_parse() {
    assert_eq!(
        ToolChoice::from_openai(&json!("required")).unwrap(),
        ToolChoice::Required
    );
    assert_eq!(
        ToolChoice::from_openai(&json!({"type": "function", "function": {"name": "add"}})).unwrap(),
        ToolChoice::Tool { name: "add".into() }
    );
    assert_eq!(
        ResponseFormat::from_openai(&json!({"type": "json_schema",
            "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": true}}))
        .unwrap(),
        ResponseFormat::JsonSchema {
            name: "p".into(),
            schema: json!({"type": "object"}),
            strict: true
        }
    );
    let tools = ToolSpec::list_from_openai(&json!([
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "b"}}
    ]))
    .unwrap();
    assert_eq!(
        tools[1].parameters,
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn llama3_json_refuses_auto_tools_with_a_json_reply() {
    let mut spec = ConstraintSpec {
        tools: three_tools(),
        response_format: ResponseFormat::JsonObject,
        format: Some(ToolCallFormat::LLAMA3_JSON),
        ..ConstraintSpec::default()
    };
    assert!(matches!(
        smol().factory.compile(&spec, ToolCallFormat::HERMES),
        Err(EngineError::Schema(SchemaError::InvalidResponseFormat(_)))
    ));
    spec.tool_choice = ToolChoice::Required;
    let call = r#"{"name": "add", "parameters": {"a": 1, "b": 2}}"#;
    assert!(accepts(smol(), &spec, ToolCallFormat::HERMES, call));
    spec.tool_choice = ToolChoice::None;
    assert!(accepts(
        smol(),
        &spec,
        ToolCallFormat::HERMES,
        r#"{"answer": 42}"#
    ));
}

/// A SentencePiece vocabulary (Phi-3's, from llama.cpp's test files): the token trie gets `▁` as a space and byte
/// tokens as bytes, so tool-call grammars constrain these models as they do byte-level ones.
#[test]
fn sentencepiece_vocabularies_constrain_calls() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/vocab/ggml-vocab-phi-3.gguf");
    let m = load(path, 0);
    let f = ToolCallFormat::HERMES;
    // The text as a model writes it mid-output: without the space SentencePiece puts before a prompt's start.
    let accepts = |spec: &ConstraintSpec, text: &str| {
        let mut ids = m.tokenizer.encode(&format!("a{text}"), false).unwrap();
        assert_eq!(m.tokenizer.token_id("▁a"), Some(ids.remove(0)));
        let mut c = m.factory.compile(spec, f).unwrap().expect("a grammar");
        c.accepts_tokens(&ids).unwrap()
    };
    let auto = spec(ToolChoice::Auto);
    assert!(accepts(&auto, "Sure, the weather: é ✓"));
    assert!(accepts(&auto, &hermes(WEATHER)));
    let required = spec(ToolChoice::Required);
    assert!(accepts(&required, &hermes(ADD)));
    assert!(!accepts(
        &required,
        &hermes(r#"{"name": "add", "arguments": {"a": 1}}"#)
    ));
    assert!(!accepts(&required, "No."));
}
