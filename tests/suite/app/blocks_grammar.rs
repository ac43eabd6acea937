//! The file-blocks grammar (`app::harness::blocks_grammar`) compiled with llguidance over Qwen2.5-Coder's real
//! tokenizer: realistic replies are accepted and read by `parse_blocks` as written, bad ones (a `..` path, a
//! fence with no path, an unclosed fence, a two-line bash block) are not; and Qwen2.5-Coder-0.5B decoding under
//! it through the local provider writes only what the grammar allows.

use agentd::app::harness::blocks::{self as edit_format, parse_blocks, Block};
use agentd::app::harness::blocks_grammar::blocks_grammar;
use agentd::engine::ConstraintSpec;
use agentd::provider::{
    collect, CompletionRequest, LocalProvider, Message, Provider, ResponseFormat, Sampling,
    StopReason,
};
use agentd::text::call_format::ToolCallFormat;
use tokio_util::sync::CancellationToken;

use crate::suite::common;
use crate::suite::engine::constraint::{accepts, qwen};

fn files() -> Vec<String> {
    ["calc.py", "Makefile", "docs/notes.md", "README.md"]
        .map(String::from)
        .to_vec()
}

fn spec(bash: bool) -> ConstraintSpec {
    ConstraintSpec {
        response_format: ResponseFormat::Grammar {
            lark: blocks_grammar(&files(), bash),
        },
        ..ConstraintSpec::default()
    }
}

fn ok(text: &str) -> bool {
    accepts(qwen(), &spec(true), ToolCallFormat::HERMES, text)
}

const FIX: &str = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n";

#[test]
fn realistic_replies_are_accepted_and_parse_as_written() {
    let cases: [(&str, String, usize); 8] = [
        (
            "one block, prose around",
            format!("Here is the fix:\n\n{FIX}\nThe function now adds."),
            1,
        ),
        (
            "two blocks",
            format!("{FIX}\nMakefile\n```\ntest:\n\tpython3 -m pytest\n```\n"),
            2,
        ),
        (
            "a bash block",
            "Let me run it.\n```bash\npython3 calc.py\n```\n".into(),
            1,
        ),
        (
            "a new file",
            "src/util.py\n```python\ndef double(x):\n    return 2 * x\n```".into(),
            1,
        ),
        (
            "no blocks",
            "The task is done: add() returns a + b.".into(),
            0,
        ),
        ("empty", String::new(), 0),
        (
            "a body with an inner fence line and a blank line",
            "docs/notes.md\n```markdown\n# Notes\n\n```python\nx = 1\n  ``` not a close\n```\n"
                .into(),
            1,
        ),
        (
            "a new all-caps file",
            "VERSION\n```\n1.2.3\n```\nDone.\n".into(),
            1,
        ),
    ];
    for (what, text, blocks) in cases {
        assert!(ok(&text), "{what}: {text:?}");
        let parsed = parse_blocks(&text, &files(), true);
        assert_eq!(parsed.len(), blocks, "{what}: {parsed:?}");
    }
    let parsed = parse_blocks(&format!("Here is the fix:\n\n{FIX}\nDone."), &files(), true);
    assert_eq!(
        parsed,
        vec![Block::File {
            path: "calc.py".into(),
            content: "def add(a, b):\n    return a + b\n".into()
        }]
    );
}

#[test]
fn bad_replies_are_rejected() {
    let cases = [
        ("a path with ..", "../calc.py\n```python\nx = 1\n```\n"),
        ("an absolute path", "/etc/passwd\n```\nx\n```\n"),
        ("a fence with no path", "Fixed:\n```python\nx = 1\n```\n"),
        ("a fence first", "```python\nx = 1\n```\n"),
        ("an unclosed fence", "calc.py\n```python\nx = 1\n"),
        ("an unclosed fence, no newline", "calc.py\n```python\nx = 1"),
        (
            "a bash block with two commands",
            "```bash\ncd src\npython3 calc.py\n```\n",
        ),
        ("an empty bash block", "```bash\n```\n"),
        ("a decorated path", "**calc.py**\n```python\nx = 1\n```\n"),
        (
            "a path in the info string",
            "calc.py\n```calc.py\nx = 1\n```\n",
        ),
        ("text right after the close", "calc.py\n```\nx\n```done\n"),
        ("a path with a space", "my file.py\n```\nx\n```\n"),
    ];
    for (what, text) in cases {
        assert!(!ok(text), "{what}: {text:?}");
    }
    // Without bash blocks even a one-line bash block is a fence with no path.
    let no_bash = spec(false);
    let bash = "```bash\nls\n```\n";
    assert!(!accepts(qwen(), &no_bash, ToolCallFormat::HERMES, bash));
    assert!(ok(bash));
}

#[test]
fn workspace_files_without_an_extension_need_their_literal() {
    let text = "Makefile\n```\nall:\n\ttrue\n```\n";
    assert!(ok(text));
    let without = ConstraintSpec {
        response_format: ResponseFormat::Grammar {
            lark: blocks_grammar(&[], true),
        },
        ..ConstraintSpec::default()
    };
    assert!(!accepts(qwen(), &without, ToolCallFormat::HERMES, text));
}

/// Qwen2.5-Coder-0.5B asked for a small change under the grammar (greedy, under a hundred tokens): every token it
/// wrote is one the grammar allows, and what it wrote reads as blocks with paths (or none).
#[tokio::test]
async fn qwen_decodes_within_the_grammar() {
    let engine = tokio::task::spawn_blocking(|| common::qwen_engine().clone())
        .await
        .unwrap();
    let provider = LocalProvider::new(engine);
    let listed = vec!["calc.py".to_string()];
    let lark = blocks_grammar(&listed, true);
    let mut messages = edit_format::examples();
    messages.push(Message::user(edit_format::prompt_with_files(
        "add(a, b) in calc.py should return a + b. Fix it.",
        &[(
            "calc.py".into(),
            "def add(a, b):\n    return a - b\n".into(),
        )],
    )));
    let request = CompletionRequest {
        system: Some(edit_format::instructions(true)),
        messages,
        sampling: Sampling::greedy(),
        // Above the engine's closing window (the last 64 tokens of the budget), whose search for a short way
        // out is made for JSON and ends a blocks reply at its last complete point instead.
        max_tokens: Some(96),
        response_format: ResponseFormat::Grammar { lark: lark.clone() },
        ..CompletionRequest::default()
    };
    let done = collect(provider.stream(request, CancellationToken::new())).await;
    assert_eq!(done.error, None);
    let text = done.message.text();
    eprintln!("{:?} {:?}: {text:?}", done.stop_reason, done.usage);
    let m = qwen();
    let spec = ConstraintSpec {
        response_format: ResponseFormat::Grammar { lark },
        ..ConstraintSpec::default()
    };
    let mut c = m
        .factory
        .compile(&spec, ToolCallFormat::HERMES)
        .unwrap()
        .unwrap();
    let ids = m.tokenizer.encode(&text, false).unwrap();
    assert_eq!(c.valid_prefix(&ids).unwrap(), ids.len(), "{text:?}");
    if done.stop_reason == StopReason::Stop {
        assert!(accepts(m, &spec, ToolCallFormat::HERMES, &text), "{text:?}");
    }
    let blocks = parse_blocks(&text, &listed, true);
    assert!(!blocks.is_empty(), "{text:?}");
    // Greedy, the model's first line is the file's path (the examples' shape).
    assert!(text.starts_with("calc.py\n"), "{text:?}");
}
