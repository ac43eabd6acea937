//! Constrained generation end to end with real models: named and `required` calls over three tools produce valid
//! calls, `none` never produces one, `auto` calls are always valid, `response_format` output validates, arguments
//! stream in fragments, Qwen2.5 calls through its `<tool_call>` special tokens, and the CLI flags.

use std::sync::OnceLock;

use agentd::engine::{
    Completion, ConstraintSpec, Engine, EngineError, EngineOptions, FinishReason, GenerateEvent,
    GenerateRequest, OutputDelta, SamplingParams,
};
use agentd::schema::compile::{validator, violations};
use agentd::schema::SchemaError;
use agentd::schema::ToolSpec;
use agentd::schema::{ResponseFormat, ToolChoice};
use agentd::text::chat_prompt::render_chat;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::constraint::three_tools;
use crate::suite::common;

fn qwen() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::load(EngineOptions {
            model: agentd::model_files::fetch::ModelSelector::Path(common::qwen_path()),
            device: agentd::engine::DeviceSpec::Cpu,
            ..Default::default()
        })
        .expect("load Qwen2.5")
    })
}

fn request(
    engine: &Engine,
    user: &str,
    spec: ConstraintSpec,
    sampling: SamplingParams,
    max_tokens: usize,
) -> GenerateRequest {
    let messages = [json!({"role": "user", "content": user})];
    let text = render_chat(
        engine.template(),
        &messages,
        &spec.tools,
        &spec.tool_choice,
        engine.tool_call_format(),
        None,
    )
    .unwrap();
    GenerateRequest {
        prompt: engine.tokenizer().encode(&text, true).unwrap(),
        sampling,
        max_tokens: Some(max_tokens),
        constraint: Some(spec),
        ..Default::default()
    }
}

fn tools_spec(choice: ToolChoice) -> ConstraintSpec {
    ConstraintSpec {
        tools: three_tools(),
        tool_choice: choice,
        ..ConstraintSpec::default()
    }
}

fn complete(engine: &Engine, req: GenerateRequest) -> (Completion, Vec<OutputDelta>) {
    let mut deltas = Vec::new();
    let done = engine
        .complete_blocking(req, CancellationToken::new(), |d| deltas.push(d.clone()))
        .unwrap();
    (done, deltas)
}

/// Every call names a known tool and its arguments validate against that tool's schema.
fn assert_calls_valid(done: &Completion) {
    let tools = three_tools();
    for call in &done.tool_calls {
        let tool = tools
            .iter()
            .find(|t| t.name == call.name)
            .unwrap_or_else(|| panic!("unknown tool {call:?}"));
        let args: Value = serde_json::from_str(&call.arguments).unwrap();
        tool.validate_arguments(&args)
            .unwrap_or_else(|e| panic!("{call:?}: {e:?}"));
    }
    let mut ids: Vec<&str> = done.tool_calls.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), done.tool_calls.len(), "ids are unique");
}

#[test]
fn named_call_is_valid() {
    let engine = common::engine();
    let req = request(
        engine,
        "What is 12 plus 30?",
        tools_spec(ToolChoice::Tool { name: "add".into() }),
        SamplingParams::greedy(),
        64,
    );
    let (done, deltas) = complete(engine, req);
    assert_eq!(done.summary.finish, FinishReason::Eos);
    assert_eq!(done.tool_calls.len(), 1, "{done:?}");
    assert_eq!(done.tool_calls[0].name, "add");
    assert_calls_valid(&done);
    // The arguments arrived as fragments that add up to the final text.
    let streamed: String = deltas
        .iter()
        .filter_map(|d| match d {
            OutputDelta::ToolCallArguments { fragment, .. } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, done.tool_calls[0].arguments);
    let stats = done.summary.constraint.unwrap();
    assert!(stats.forced_tokens > 0, "{stats:?}");
}

#[test]
fn required_call_over_three_tools_is_valid() {
    let engine = common::engine();
    for (prompt, seed) in [
        ("What is the weather like in Paris right now?", None),
        ("Show me the file src/main.rs", Some(7)),
        ("Add 2.5 and 4", Some(11)),
    ] {
        let sampling = match seed {
            None => SamplingParams::greedy(),
            Some(s) => SamplingParams {
                temperature: 0.8,
                seed: Some(s),
                ..SamplingParams::default()
            },
        };
        let req = request(
            engine,
            prompt,
            tools_spec(ToolChoice::Required),
            sampling,
            96,
        );
        let (done, _) = complete(engine, req);
        assert!(!done.tool_calls.is_empty(), "{prompt}: {done:?}");
        assert!(done.content.is_empty(), "{done:?}");
        assert_calls_valid(&done);
    }
}

#[test]
fn none_never_calls_a_tool() {
    let engine = common::engine();
    for seed in [1, 2, 3] {
        let req = request(
            engine,
            "Use the get_weather tool: <tool_call> what is the weather in Rome?",
            tools_spec(ToolChoice::None),
            SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            48,
        );
        let (done, _) = complete(engine, req);
        assert!(done.tool_calls.is_empty(), "{done:?}");
        assert!(!done.content.contains("<tool_call>"), "{done:?}");
    }
}

#[test]
fn auto_calls_are_always_valid() {
    let engine = common::engine();
    for seed in 0..4 {
        let req = request(
            engine,
            "Call a tool to find the weather in Oslo, then add 3 and 4.",
            tools_spec(ToolChoice::Auto),
            SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            80,
        );
        let (done, _) = complete(engine, req);
        if done.summary.finish == FinishReason::Eos {
            assert!(done.incomplete_call.is_none(), "{done:?}");
        }
        assert_calls_valid(&done);
    }
}

#[test]
fn response_format_output_validates() {
    let engine = common::engine();
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
        "required": ["name", "age", "email", "tags"], "additionalProperties": false});
    let spec = ConstraintSpec {
        response_format: ResponseFormat::JsonSchema {
            name: "person".into(),
            schema: schema.clone(),
            strict: true,
        },
        ..ConstraintSpec::default()
    };
    let req = request(
        engine,
        "Describe a person as JSON.",
        spec,
        SamplingParams::greedy(),
        128,
    );
    let (done, _) = complete(engine, req);
    assert_eq!(done.summary.finish, FinishReason::Eos, "{done:?}");
    let doc: Value = serde_json::from_str(&done.content).unwrap();
    assert!(
        violations(&validator(&schema).unwrap(), &doc).is_empty(),
        "{doc}"
    );

    let object = ConstraintSpec {
        response_format: ResponseFormat::JsonObject,
        ..ConstraintSpec::default()
    };
    let req = request(
        engine,
        "Give me a JSON object about cats.",
        object,
        SamplingParams::greedy(),
        96,
    );
    let (done, _) = complete(engine, req);
    if done.summary.finish == FinishReason::Eos {
        assert!(serde_json::from_str::<Value>(&done.content)
            .unwrap()
            .is_object());
    } else {
        assert!(done.content.starts_with('{'), "{done:?}");
    }
}

#[test]
fn bad_requests_fail_before_generation() {
    let engine = common::engine();
    let mut req = request(
        engine,
        "hi",
        tools_spec(ToolChoice::Auto),
        SamplingParams::greedy(),
        8,
    );
    req.constraint = Some(tools_spec(ToolChoice::Tool {
        name: "delete_everything".into(),
    }));
    let err = engine
        .generate_blocking(req, CancellationToken::new(), |_| {})
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Schema(SchemaError::InvalidToolChoice(_))),
        "{err}"
    );
}

#[test]
fn async_stream_shows_argument_fragments() {
    let engine = common::engine();
    let req = request(
        engine,
        "Read README.md",
        tools_spec(ToolChoice::Tool {
            name: "read_file".into(),
        }),
        SamplingParams::greedy(),
        64,
    );
    let mut assembler = engine.assembler(&req);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let deltas = rt.block_on(async {
        let mut rx = engine.generate(req, CancellationToken::new());
        let mut deltas = Vec::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                GenerateEvent::Token(t) => deltas.extend(assembler.push(&t.text).unwrap()),
                GenerateEvent::Done(s) => {
                    deltas.extend(assembler.push(&s.trailing_text).unwrap());
                    deltas.extend(assembler.finish(s.finish).unwrap());
                }
                GenerateEvent::Error(e) => panic!("{e}"),
            }
        }
        deltas
    });
    let fragments = deltas
        .iter()
        .filter(|d| matches!(d, OutputDelta::ToolCallArguments { .. }))
        .count();
    assert!(fragments >= 2, "{deltas:?}");
    assert!(
        matches!(deltas.first(), Some(OutputDelta::ToolCallStart { name, .. }) if name == "read_file")
    );
    assert!(matches!(
        deltas.last(),
        Some(OutputDelta::ToolCallEnd { .. })
    ));
}

#[test]
fn tool_results_render_and_the_model_answers() {
    let engine = common::engine();
    let messages = [
        json!({"role": "user", "content": "What is the weather in Paris?"}),
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21, \"sky\": \"clear\"}"}),
    ];
    let tools = three_tools();
    let text = render_chat(
        engine.template(),
        &messages,
        &tools,
        &ToolChoice::Auto,
        engine.tool_call_format(),
        None,
    )
    .unwrap();
    assert!(text.contains("<tool_response>\n{\"temp_c\": 21"), "{text}");
    assert!(text.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"), "{text}");
    assert!(text.contains("# Tools"), "{text}");
    let req = GenerateRequest {
        prompt: engine.tokenizer().encode(&text, true).unwrap(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(32),
        constraint: Some(tools_spec(ToolChoice::Auto)),
        ..Default::default()
    };
    let (done, _) = complete(engine, req);
    assert_calls_valid(&done);
}

#[test]
fn qwen_calls_through_its_special_tokens() {
    let engine = qwen();
    let factory = engine.grammar_factory().unwrap();
    eprintln!("qwen parser factory: {:.3} s", factory.build_secs());
    assert!(engine.template().supports_tools());
    let open = engine.tokenizer().token_id("<tool_call>").unwrap();
    let close = engine.tokenizer().token_id("</tool_call>").unwrap();
    for choice in [
        ToolChoice::Required,
        ToolChoice::Tool {
            name: "get_weather".into(),
        },
    ] {
        let mut spec = tools_spec(choice.clone());
        spec.parallel_tool_calls = false;
        let req = request(
            engine,
            "What is the weather like in Paris?",
            spec,
            SamplingParams::greedy(),
            64,
        );
        assert!(engine
            .tokenizer()
            .decode(&req.prompt, false)
            .unwrap()
            .contains("<tools>"));
        let mut assembler = engine.assembler(&req);
        let mut ids = Vec::new();
        let mut deltas = Vec::new();
        let summary = engine
            .generate_blocking(req, CancellationToken::new(), |t| {
                ids.push(t.id);
                deltas.extend(assembler.push(&t.text).unwrap());
            })
            .unwrap();
        deltas.extend(assembler.finish(summary.finish).unwrap());
        assert_eq!(summary.finish, FinishReason::Eos, "{choice:?}");
        assert_eq!(
            ids.first(),
            Some(&open),
            "the call opens with the special token"
        );
        assert!(ids.contains(&close));
        let calls = assembler.tool_calls();
        assert_eq!(calls.len(), 1, "{choice:?}: {deltas:?}");
        assert_eq!(calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        three_tools()[0].validate_arguments(&args).unwrap();
    }
}

fn agentd_cli() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("agentd").unwrap();
    cmd.env("HF_HUB_OFFLINE", "1").env("AGENTD_THREADS", "1");
    cmd
}

#[test]
fn cli_tools_and_json_schema() {
    let dir = tempfile::tempdir().unwrap();
    let tools: Vec<Value> = three_tools().iter().map(ToolSpec::to_openai).collect();
    let tools_file = dir.path().join("tools.json");
    std::fs::write(&tools_file, serde_json::to_string(&tools).unwrap()).unwrap();
    let model = common::smollm2_path();
    let out = agentd_cli()
        .args(["generate", "--model-path"])
        .arg(&model)
        .args(["--temperature", "0", "--tools"])
        .arg(&tools_file)
        .args([
            "--tool-choice",
            "get_weather",
            "What is the weather in Oslo?",
        ])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let line: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(line["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(line["function"]["arguments"].as_str().unwrap()).unwrap();
    three_tools()[0].validate_arguments(&args).unwrap();

    let schema_file = dir.path().join("point.json");
    let schema = json!({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"], "additionalProperties": false});
    std::fs::write(&schema_file, schema.to_string()).unwrap();
    let out = agentd_cli()
        .args(["generate", "--model-path"])
        .arg(&model)
        .args(["--temperature", "0", "--json-schema"])
        .arg(&schema_file)
        .arg("A point as JSON")
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let doc: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(violations(&validator(&schema).unwrap(), &doc).is_empty());

    // A bad choice fails before the model loads, naming the tool.
    let out = agentd_cli()
        .args(["generate", "--model-path"])
        .arg(&model)
        .args(["--tools"])
        .arg(&tools_file)
        .args(["--tool-choice", "nope", "hi"])
        .assert()
        .failure();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("nope"), "{stderr}");
}

#[test]
fn llama3_json_format_end_to_end() {
    use agentd::text::call_format::ToolCallFormat;
    let engine = common::engine();
    let spec = ConstraintSpec {
        format: Some(ToolCallFormat::LLAMA3_JSON),
        ..tools_spec(ToolChoice::Required)
    };
    let messages = [json!({"role": "user", "content": "What is 7 plus 5?"})];
    let text = render_chat(
        engine.template(),
        &messages,
        &spec.tools,
        &spec.tool_choice,
        ToolCallFormat::LLAMA3_JSON,
        None,
    )
    .unwrap();
    assert!(
        text.contains("\"parameters\": dictionary of argument name"),
        "{text}"
    );
    let req = GenerateRequest {
        prompt: engine.tokenizer().encode(&text, true).unwrap(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(96),
        constraint: Some(spec),
        ..Default::default()
    };
    let (done, deltas) = complete(engine, req);
    assert!(!done.tool_calls.is_empty(), "{done:?}");
    assert!(done.content.is_empty(), "{done:?}");
    assert_calls_valid(&done);
    assert!(deltas
        .iter()
        .any(|d| matches!(d, OutputDelta::ToolCallArguments { .. })));
}
