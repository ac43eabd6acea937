//! Workspace-aware argument grammars with both real tokenizers: a path must be one that exists, an `edit`'s
//! `old_text` must be a substring of the file its `path` names (one grammar branching on the path), escapes
//! round-trip, text from another file or from an error message is impossible, and a 50 KB file compiles.

use agentd::engine::ConstraintSpec;
use agentd::schema::ToolChoice;
use agentd::schema::ToolSpec;
use agentd::text::call_format::ToolCallFormat;
use serde_json::{json, Value};

use super::constraint::{accepts, qwen, smol, Model};

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";
const NOTES: &str = "Say \"hi\" to C:\\temp\\x and\ttab — naïve café ✓\nsecond line\n";

/// The edit tool's plain schema.
fn edit_parameters() -> Value {
    json!({"type": "object", "properties": {
        "path": {"type": "string"},
        "edits": {"type": "array", "items": {"type": "object", "properties": {
            "old_text": {"type": "string"}, "new_text": {"type": "string"}},
            "required": ["old_text", "new_text"]}}},
        "required": ["path", "edits"]})
}

/// One branch per file: that path, and old_text a substring of that file's text.
fn edit_grammar(files: &[(&str, &str)]) -> Value {
    let branches: Vec<Value> = files
        .iter()
        .map(|(path, text)| {
            json!({"type": "object", "properties": {
                "path": {"const": path},
                "edits": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                    "old_text": {"type": "string", "x-agentd-substring-of": text},
                    "new_text": {"type": "string"}},
                    "required": ["old_text", "new_text"]}}},
                "required": ["path", "edits"]})
        })
        .collect();
    json!({"anyOf": branches})
}

fn spec_with(tool: ToolSpec) -> ConstraintSpec {
    ConstraintSpec {
        tools: vec![tool],
        tool_choice: ToolChoice::Required,
        parallel_tool_calls: false,
        ..ConstraintSpec::default()
    }
}

fn call(name: &str, args: &Value) -> String {
    format!(
        "<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {}}}\n</tool_call>",
        compact(args)
    )
}

/// `value` in the grammar's compact JSON (`", "` and `": "`).
fn compact(value: &Value) -> String {
    match value {
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), compact(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(compact).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    json!({"path": path, "edits": [{"old_text": old, "new_text": new}]})
}

fn both() -> [&'static Model; 2] {
    [smol(), qwen()]
}

#[test]
fn old_text_must_come_from_the_file_the_path_names() {
    let tool = ToolSpec::new("edit", "Edit a file", edit_parameters())
        .unwrap()
        .with_grammar(edit_grammar(&[("calc.py", CALC), ("notes.txt", NOTES)]))
        .unwrap();
    let spec = spec_with(tool);
    let f = ToolCallFormat::HERMES;
    for m in both() {
        // Real substrings, whole lines and parts of lines, starting inside indentation.
        for old in [
            "return a - b",
            "def add(a, b):\n    return a - b",
            "    return a - b\n\n\ndef sub",
            "a",
        ] {
            assert!(
                accepts(m, &spec, f, &call("edit", &edit("calc.py", old, "x"))),
                "{old:?}"
            );
        }
        // Escapes round-trip: quotes, backslashes, a tab, non-ASCII, a newline.
        for old in [
            "Say \"hi\" to C:\\temp\\x",
            "\ttab — naïve café ✓\nsecond",
            "✓",
        ] {
            assert!(
                accepts(m, &spec, f, &call("edit", &edit("notes.txt", old, "y"))),
                "{old:?}"
            );
        }
        let impossible = [
            // Not in the file.
            edit("calc.py", "return a + b", "x"),
            // From the other file.
            edit("calc.py", "second line", "x"),
            // From an error message the model saw.
            edit("calc.py", "Could not find the exact text", "x"),
            // Empty.
            edit("calc.py", "", "x"),
            // Inside a word.
            edit("calc.py", "eturn a", "x"),
            // A file that is not offered, and a directory.
            edit("missing.py", "return a - b", "x"),
            edit("src/", "return a - b", "x"),
        ];
        for args in &impossible {
            assert!(!accepts(m, &spec, f, &call("edit", args)), "{args}");
        }
        // A non-canonical escape of a real character is refused (a restriction, not a hole).
        let text = call("edit", &edit("notes.txt", "x", "y"))
            .replace("\"old_text\": \"x\"", "\"old_text\": \"\\u00e9\"");
        assert!(!accepts(m, &spec, f, &text));
    }
}

#[test]
fn paths_must_exist_and_new_files_stay_inside() {
    let read = ToolSpec::new(
        "read",
        "Read a file",
        json!({"type": "object", "properties": {"path": {"type": "string",
            "x-agentd-enum": ["calc.py", "src/lib.rs", "src/"]}, "offset": {"type": "integer"}},
            "required": ["path"]}),
    )
    .unwrap();
    // The extension is kept for the grammar and out of what the model sees.
    assert_eq!(
        read.parameters["properties"]["path"],
        json!({"type": "string"})
    );
    let spec = spec_with(read);
    let f = ToolCallFormat::HERMES;
    for m in both() {
        assert!(accepts(
            m,
            &spec,
            f,
            &call("read", &json!({"path": "src/lib.rs"}))
        ));
        assert!(accepts(
            m,
            &spec,
            f,
            &call("read", &json!({"path": "calc.py", "offset": 3}))
        ));
        for bad in ["/abs/calc.py", "calc.pyx", "src/main.rs", ""] {
            assert!(
                !accepts(m, &spec, f, &call("read", &json!({"path": bad}))),
                "{bad}"
            );
        }
    }
    let write = ToolSpec::new(
        "write",
        "Write a file",
        json!({"type": "object", "properties": {"path": {"type": "string",
            "x-agentd-pattern": agentd::tools::support::workspace::RELATIVE_PATH_PATTERN}, "content": {"type": "string"}},
            "required": ["path", "content"]}),
    )
    .unwrap();
    let spec = spec_with(write);
    for m in both() {
        for good in [
            "hello.txt",
            "src/new_mod.rs",
            ".env",
            "a/.hidden/b.txt",
            "VERSION",
        ] {
            assert!(
                accepts(
                    m,
                    &spec,
                    f,
                    &call("write", &json!({"path": good, "content": "x"}))
                ),
                "{good}"
            );
        }
        for bad in [
            "/etc/passwd",
            "../up.txt",
            "a/../../b",
            ".",
            "a//b",
            "x/",
            "",
            "..",
            "a\\b",
        ] {
            assert!(
                !accepts(
                    m,
                    &spec,
                    f,
                    &call("write", &json!({"path": bad, "content": "x"}))
                ),
                "{bad}"
            );
        }
    }
}

#[test]
fn a_50_kb_file_compiles_within_the_limits() {
    // Real code, ~50 KB: this repository's own engine sources.
    let mut text = String::new();
    for f in [
        "src/engine/runtime/sequence.rs",
        "src/engine/constraint/grammar.rs",
        "src/engine/tool_calls/assembler.rs",
    ] {
        text.push_str(
            &std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f))
                .unwrap(),
        );
    }
    let mut cut = 50_000.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    let tool = ToolSpec::new("edit", "Edit a file", edit_parameters())
        .unwrap()
        .with_grammar(edit_grammar(&[("big.rs", &text)]))
        .unwrap();
    let spec = spec_with(tool);
    for m in both() {
        let started = std::time::Instant::now();
        // Three whole lines from the middle of the file.
        let mid = text.len() / 2;
        let from = mid + text[mid..].find('\n').unwrap() + 1;
        let lines: String = text[from..].split_inclusive('\n').take(3).collect();
        let old = lines.trim_end_matches('\n');
        assert!(accepts(
            m,
            &spec,
            ToolCallFormat::HERMES,
            &call("edit", &edit("big.rs", old, "x"))
        ));
        eprintln!(
            "50 KB substring grammar: compiled and checked in {:.0} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// The built-in tools' own grammars over a real temp workspace: `read`'s path is an existing file and its line
/// numbers are bounded; `edit`'s `old_text` is whole lines of the file its path names.
#[test]
fn the_built_in_tools_grammars_in_a_real_workspace() {
    use agentd::tools::tool::Tool;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/notes.txt"), NOTES).unwrap();
    let ws = agentd::tools::support::workspace::WorkspaceState::new(dir.path());
    let read = agentd::tools::read::ReadTool::new();
    let read_spec = read
        .spec()
        .clone()
        .with_grammar(read.argument_grammar(&ws).unwrap())
        .unwrap();
    let edit_tool = agentd::tools::edit::EditTool::new();
    let edit_spec = edit_tool
        .spec()
        .clone()
        .with_grammar(edit_tool.argument_grammar(&ws).unwrap())
        .unwrap();
    let f = ToolCallFormat::HERMES;
    for m in both() {
        let spec = spec_with(read_spec.clone());
        assert!(accepts(
            m,
            &spec,
            f,
            &call("read", &json!({"path": "src/notes.txt"}))
        ));
        assert!(accepts(
            m,
            &spec,
            f,
            &call("read", &json!({"path": "calc.py", "offset": 3}))
        ));
        for bad in [
            json!({"path": "src"}),
            json!({"path": "notes.txt"}),
            json!({"path": "calc.py", "offset": 99_999_999_999u64}),
        ] {
            assert!(!accepts(m, &spec, f, &call("read", &bad)), "{bad}");
        }
        let spec = spec_with(edit_spec.clone());
        for old in [
            "    return a - b",
            "def add(a, b):\n    return a - b\n",
            "second line",
        ] {
            let path = if old == "second line" {
                "src/notes.txt"
            } else {
                "calc.py"
            };
            assert!(
                accepts(m, &spec, f, &call("edit", &edit(path, old, "x"))),
                "{old:?}"
            );
        }
        // Part of a line, text of the other file, a folder.
        for (path, old) in [
            ("calc.py", "a - b"),
            ("calc.py", "second line"),
            ("src", "second line"),
        ] {
            assert!(
                !accepts(m, &spec, f, &call("edit", &edit(path, old, "x"))),
                "{path} {old:?}"
            );
        }
    }
}
