//! The checks against real parsers where they are installed (a missing `python3`, `node` or `rustc` skips its
//! asserts), and against realistic tasks and workspaces.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::*;

fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
}

fn broken(path: &str, text: &str) -> String {
    match parse_verdict(Path::new(path), text) {
        Verdict::Broken(why) => why,
        other => panic!("{path}: expected Broken, got {other:?}"),
    }
}

#[test]
fn json_and_toml_are_parsed_here() {
    assert_eq!(
        parse_verdict(Path::new("a.json"), "{\"a\": [1, 2]}"),
        Verdict::Parses
    );
    let why = broken("a.json", "{\n  \"a\": 1,\n}");
    assert!(why.contains("line 3"), "{why}");
    assert_eq!(
        parse_verdict(Path::new("Cargo.toml"), "[package]\nname = \"x\"\n"),
        Verdict::Parses
    );
    let why = broken("Cargo.toml", "[package]\nname = \"x\nversion = 1\n");
    assert!(why.contains("line 2"), "{why}");
    assert_eq!(parse_verdict(Path::new("notes.txt"), "{"), Verdict::Unknown);
    assert_eq!(parse_verdict(Path::new("Makefile"), "x"), Verdict::Unknown);
}

#[test]
fn python_indentation_and_syntax() {
    if !have("python3") {
        return;
    }
    let p = Path::new("shapes.py");
    assert_eq!(
        parse_verdict(p, "def area(r):\n    return 3.14 * r * r\n"),
        Verdict::Parses
    );
    let why = broken("shapes.py", "def area(r):\nreturn 3.14 * r * r\n");
    assert!(
        why.contains("IndentationError") && why.contains("line 2"),
        "{why}"
    );
    let why = broken("shapes.py", "x = (1,\n");
    assert!(why.contains("SyntaxError"), "{why}");
    // Non-ASCII text reaches the parser intact.
    assert_eq!(parse_verdict(p, "NAME = 'café ☕'\n"), Verdict::Parses);
}

#[test]
fn javascript_through_node() {
    if !have("node") {
        return;
    }
    let p = Path::new("math.js");
    assert_eq!(
        parse_verdict(p, "function clamp(x, a, b) {\n  return Math.min(Math.max(x, a), b);\n}\nmodule.exports = { clamp };\n"),
        Verdict::Parses
    );
    let why = broken(
        "math.js",
        "function clamp(x, a, b) {\n  return Math.min(Math.max(x, a), b;\n}\n",
    );
    assert!(
        why.starts_with("SyntaxError") && why.contains("line 2"),
        "{why}"
    );
    // An ES module in a plain `.js` file parses.
    assert_eq!(
        parse_verdict(p, "import fs from 'fs';\nexport const a = 1;\n"),
        Verdict::Parses
    );
    assert_eq!(
        parse_verdict(Path::new("m.mjs"), "export default 3;\n"),
        Verdict::Parses
    );
    assert!(broken("m.cjs", "const = 3;\n").contains("SyntaxError"));
    // TypeScript has no parser here.
    assert_eq!(
        parse_verdict(Path::new("a.ts"), "let x: number = 1;\n"),
        Verdict::Unknown
    );
}

#[test]
fn rust_through_rustc() {
    if !have("rustc") {
        return;
    }
    let p = Path::new("src/lib.rs");
    let good = "use std::fmt;\n\npub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";
    assert_eq!(parse_verdict(p, good), Verdict::Parses);
    let missing_brace = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n\npub fn sub() {}\n";
    let why = broken("src/lib.rs", missing_brace);
    assert!(why.contains("unclosed delimiter"), "{why}");
    // A module of a crate, read alone, still parses: its unresolved paths, derives and included files are not
    // syntax errors.
    let alone =
        "#[derive(Serialize)]\npub struct S;\nconst DATA: &str = include_str!(\"data.txt\");\n";
    assert_eq!(parse_verdict(p, alone), Verdict::Parses);
    let module =
        "mod util;\nuse crate::util::helper;\n\npub fn run() -> Config { helper(); todo!() }\n";
    assert_eq!(parse_verdict(p, module), Verdict::Parses);
    assert!(breaks(p, module, missing_brace).is_some());
    assert!(breaks(p, module, good).is_none());
}

#[test]
fn yaml_through_pyyaml_when_installed() {
    let has_yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .output()
        .is_ok_and(|o| o.status.success());
    let p = Path::new("ci.yml");
    if !has_yaml {
        assert_eq!(parse_verdict(p, "a: 1\n"), Verdict::Unknown);
        return;
    }
    assert_eq!(
        parse_verdict(p, "jobs:\n  test:\n    run: make test\n"),
        Verdict::Parses
    );
    assert_eq!(parse_verdict(p, "ref: !Ref Bucket\n"), Verdict::Parses);
    let why = broken("ci.yaml", "jobs:\n  test: [a, b\n  other: 1\n");
    assert!(
        why.starts_with("invalid YAML") && why.contains("line"),
        "{why}"
    );
}

#[test]
fn breaks_needs_the_file_to_have_parsed_before() {
    let p = Path::new("a.json");
    assert_eq!(breaks(p, "{\"a\": 1}", "{\"a\": 2}"), None);
    assert!(breaks(p, "{\"a\": 1}", "{\"a\": }").is_some_and(|w| w.contains("invalid JSON")));
    assert_eq!(breaks(p, "{", "{{"), None);
    assert_eq!(breaks(Path::new("a.txt"), "a", "{"), None);
}

#[test]
fn lost_exports_of_javascript() {
    let p = Path::new("math.js");
    let before = "function clamp(x, a, b) { return x; }\nfunction lerp(a, b, t) { return a; }\nmodule.exports = { clamp, lerp };\n";
    let after = "function clamp(x, a, b) { return x; }\nfunction lerp(a, b, t) { return a; }\nmodule.exports = { lerp };\n";
    assert_eq!(lost_definitions(p, before, after), ["clamp"]);
    let after = "function lerp(a, b, t) { return a; }\nmodule.exports = {\n  lerp,\n  clamp: (x) => x,\n};\n";
    assert_eq!(lost_definitions(p, before, after), ["clamp"]);
    let names = top_level_names(
        p,
        "export function a() {\n  function inner() {}\n}\nexport default class {}\nexport { b as c, d };\nexport const E = 1, F = 2;\nlet g = `\nfunction notHere() {}\n`;\n// function commented() {}\nexports.h = 1;\nmodule.exports.i = 2;\nmodule.exports = { 'j-k': 1, l() {}, async m() {}, ...rest };\nclass N { method() {} }\n",
    );
    let list = |s: &std::collections::BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
    assert_eq!(list(&names.defined), ["E", "N", "a", "g"]);
    assert_eq!(
        list(&names.exported),
        ["E", "a", "c", "d", "default", "h", "i", "j-k", "l", "m"]
    );
    // A regex literal's quote opens no string: what follows is still read.
    let names = top_level_names(
        p,
        "const QUOTE = /'/g;\nconst clean = (s) => s.replace(/[\"/]/g, '');\nfunction after() {}\n",
    );
    assert_eq!(list(&names.defined), ["QUOTE", "after", "clean"]);
    let ts = top_level_names(
        Path::new("t.ts"),
        "export interface Shape {}\nexport type Id = string;\nexport enum Color { Red }\n",
    );
    assert_eq!(list(&ts.exported), ["Color", "Id", "Shape"]);
}

#[test]
fn lost_definitions_of_python() {
    let p = Path::new("shapes.py");
    let stub = "import math\n\nPI = 3.14\nLIMIT: int = 3\n\n\ndef area():\n    raise NotImplementedError\n\n\nclass Shape:\n    def name(self):\n        return 'x'\n";
    let done = "import math\n\nPI = 3.14\nLIMIT: int = 3\n\n\ndef area():\n    return PI * 2\n\n\nclass Shape:\n    def name(self):\n        return 'x'\n";
    assert!(lost_definitions(p, stub, done).is_empty());
    let names = top_level_names(p, stub);
    assert_eq!(
        names.defined.iter().collect::<Vec<_>>(),
        ["LIMIT", "PI", "Shape", "area"]
    );
    // A rewrite that dropped a class and a constant; a method is not top-level.
    let dropped = "import math\n\nLIMIT = 3\n\n\nasync def area():\n    return 1\n";
    assert_eq!(lost_definitions(p, stub, dropped), ["PI", "Shape"]);
    let text = "a, b = 1, 2\nif a == 1:\n    c = 3\nd += 1\nx.y = 2\nDOC = '''\nnot_me = 1\n'''\nCONFIG = dict(\nkey=1)\n@decorator\ndef f(): pass\n";
    let defined: Vec<String> = top_level_names(p, text).defined.into_iter().collect();
    assert_eq!(defined, ["CONFIG", "DOC", "a", "b", "f"]);
}

#[test]
fn a_name_the_task_mentions_is_not_reported() {
    let p = Path::new("util.py");
    let before =
        "def old_fn():\n    pass\n\n\ndef keep():\n    pass\n\n\ndef fmt_price():\n    pass\n";
    let after = "def keep():\n    pass\n";
    assert_eq!(lost_definitions(p, before, after), ["fmt_price", "old_fn"]);
    assert_eq!(
        lost_unless_named(p, before, after, "remove the unused helper `old_fn`"),
        ["fmt_price"]
    );
    // Whole words only: `old_fn2` does not name `old_fn`.
    assert_eq!(
        lost_unless_named(p, before, after, "rename old_fn2"),
        ["fmt_price", "old_fn"]
    );
    assert!(lost_definitions(Path::new("a.txt"), "def a(): pass", "").is_empty());
}

#[test]
fn lost_definitions_of_rust() {
    let p = Path::new("src/geo.rs");
    let before = "use std::fmt;\npub use crate::shapes::{Circle, Square as Sq};\n\n#[derive(Debug)] pub struct Point { x: i32 }\n\nimpl Point {\n    pub fn new() -> Self { Point { x: 0 } }\n}\n\npub(crate) const fn origin() -> i32 { 0 }\nconst LIMIT: u8 = 3;\nstatic mut COUNT: u32 = 0;\npub enum Dir { Up }\npub trait Shape {}\ntype Alias = u8;\nmod inner { pub fn hidden() {} }\nmacro_rules! twice { ($e:expr) => { $e }; }\nfn helper(c: char) -> bool { c == '{' }\nfn life<'a>(s: &'a str) -> &'a str { s }\n";
    let names = top_level_names(p, before);
    let defined: Vec<&String> = names.defined.iter().collect();
    assert_eq!(
        defined,
        [
            "Alias", "COUNT", "Dir", "LIMIT", "Point", "Shape", "helper", "inner", "life",
            "origin", "twice"
        ]
    );
    let exported: Vec<&String> = names.exported.iter().collect();
    assert_eq!(
        exported,
        ["Circle", "Dir", "Point", "Shape", "Sq", "origin"]
    );
    let after = before
        .replace("fn helper(c: char) -> bool { c == '{' }\n", "")
        .replace("pub trait Shape", "trait Shape");
    assert_eq!(lost_definitions(p, before, &after), ["Shape", "helper"]);
}

/// A workspace of files and their texts, read as the caller would through its confinement.
struct Workspace {
    files: BTreeMap<String, String>,
}

impl Workspace {
    fn new(files: &[(&str, &str)]) -> Self {
        Workspace {
            files: files
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
        }
    }

    fn commands(&self, task: &str) -> Vec<String> {
        let names: Vec<String> = self.files.keys().cloned().collect();
        let read = |p: &str| self.files.get(p).cloned();
        check_commands(task, &names, &read)
            .into_iter()
            .map(|c| c.command)
            .collect()
    }
}

#[test]
fn a_failing_test_the_task_runs() {
    let ws = Workspace::new(&[
        ("prices.py", "def total(items):\n    return 0\n"),
        ("test_prices.py", "import unittest\nfrom prices import total\n\nclass T(unittest.TestCase):\n    pass\n\nif __name__ == '__main__':\n    unittest.main()\n"),
    ]);
    assert_eq!(
        ws.commands(
            "Run `python3 test_prices.py`: it fails. Fix `total` in prices.py so that it passes."
        ),
        ["python3 test_prices.py"]
    );
    // Written plainly, and with its why.
    let names: Vec<String> = ws.files.keys().cloned().collect();
    let read = |p: &str| ws.files.get(p).cloned();
    let found = check_commands(
        "The check python3 test_prices.py fails; fix prices.py.",
        &names,
        &read,
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].command, "python3 test_prices.py");
    assert_eq!(found[0].why, "the task names it");
    // Named only as a file: it runs itself, so it is run directly.
    assert_eq!(
        ws.commands("Make test_prices.py pass."),
        ["python3 test_prices.py"]
    );
    // Named by neither: the test that imports the named file.
    assert_eq!(
        ws.commands("total() in prices.py returns 0; it should add the prices."),
        ["python3 test_prices.py"]
    );
    // A command for a file that is not there is not run.
    assert!(ws.commands("Run `python3 test_missing.py`.").is_empty());
}

#[test]
fn an_argparse_flag_with_a_test_file() {
    let ws = Workspace::new(&[
        ("cli.py", "import argparse\n"),
        ("tests/test_cli.py", "import pytest\nfrom cli import main\n\ndef test_limit():\n    assert main(['--limit', '2'])\n"),
        ("README.md", "usage\n"),
    ]);
    assert_eq!(
        ws.commands("Add a `--limit N` flag to cli.py; tests/test_cli.py covers it."),
        ["python3 -m pytest -q tests/test_cli.py"]
    );
    // By file name alone, in a fenced block, or as a pytest node id.
    assert_eq!(
        ws.commands("Add `--limit`. See test_cli.py."),
        ["python3 -m pytest -q tests/test_cli.py"]
    );
    assert_eq!(
        ws.commands(
            "Add `--limit`.\n\n```sh\n$ python3 -m pytest -q tests/test_cli.py::test_limit\n```\n"
        ),
        ["python3 -m pytest -q tests/test_cli.py::test_limit"]
    );
    assert_eq!(
        ws.commands("Run `pytest tests/` after adding --limit."),
        ["pytest tests/"]
    );
}

#[test]
fn the_repository_test_command_when_the_task_names_none() {
    let pkg = Workspace::new(&[
        (
            "package.json",
            "{\"name\": \"m\", \"scripts\": {\"test\": \"node test/run.js\"}}",
        ),
        ("src/math.js", "module.exports = {};\n"),
        ("test/run.js", "require('../src/math');\n"),
    ]);
    assert_eq!(
        pkg.commands("clamp() in src/math.js ignores its upper bound."),
        ["npm test --silent"]
    );
    // The task's own command wins.
    assert_eq!(
        pkg.commands("Fix clamp; `node test/run.js` shows the bug."),
        ["node test/run.js"]
    );
    let placeholder = Workspace::new(&[
        (
            "package.json",
            "{\"scripts\": {\"test\": \"echo \\\"Error: no test specified\\\" && exit 1\"}}",
        ),
        ("index.js", "\n"),
        ("math.test.js", "\n"),
        ("Makefile", "CC := gcc\ntest: build\n\t./run\n"),
    ]);
    assert_eq!(placeholder.commands("Fix index.js."), ["make test"]);
    assert_eq!(
        placeholder.commands("math.test.js fails."),
        ["node math.test.js"]
    );
    let crate_ws = Workspace::new(&[("Cargo.toml", "[package]\n"), ("src/lib.rs", "\n")]);
    assert_eq!(
        crate_ws.commands("Fix the overflow in src/lib.rs."),
        ["cargo test -q"]
    );
    assert!(crate_ws.commands("Write a README.").is_empty());
}

#[test]
fn dangerous_and_outside_commands_are_ignored() {
    let ws = Workspace::new(&[
        ("app.py", "\n"),
        (
            "test_app.py",
            "from app import run\n\ndef test_run():\n    assert run()\n",
        ),
        ("run_tests.sh", "\n"),
        ("go.mod", "\n"),
        ("pkg/a.go", "\n"),
    ]);
    let task = "First `rm -rf build`, then `make clean && make`, `python3 test_app.py > out.txt`, \
                `cat test_app.py | python3`, `bash -c \"echo hi\"`, `python3 -c 'import os'`, \
                `python3 ../secret.py`, `node /etc/x.js`, `npm install left-pad`, `sudo make test`, \
                `echo $(whoami)`, `ls`. Then `./run_tests.sh` and `go test ./...`.";
    // The test file those commands named is still run, the way test files are.
    assert_eq!(
        ws.commands(task),
        [
            "./run_tests.sh",
            "go test ./...",
            "python3 -m pytest -q test_app.py"
        ]
    );
    assert_eq!(
        ws.commands("Run `pytest -k \"total and not slow\" test_app.py`"),
        ["pytest -k \"total and not slow\" test_app.py"]
    );
    // Only dangerous commands named: the test file that imports the named file instead.
    assert_eq!(
        ws.commands("Fix app.py, then `rm -rf /tmp/x; python3 test_app.py`."),
        ["python3 -m pytest -q test_app.py"]
    );
    assert_eq!(
        ws.commands("`python3 test_app.py` and `python3 test_app.py` again"),
        ["python3 test_app.py"]
    );
    // A source file written as `./app.py` is a mention, not a command; with arguments it is run.
    assert_eq!(
        ws.commands("The `./app.py` entry point; see `./run_tests.sh`."),
        ["./run_tests.sh"]
    );
    assert_eq!(ws.commands("Try `./app.py --help`."), ["./app.py --help"]);
}

#[test]
fn a_test_script_of_asserts_runs_as_a_script() {
    let ws = Workspace::new(&[
        ("prices.py", "def total(x):\n    return x\n"),
        (
            "test_prices.py",
            "from prices import total\n\nassert total(2) == 2\nprint('ok')\n",
        ),
    ]);
    assert_eq!(
        ws.commands("The tests in test_prices.py fail. Fix prices.py."),
        ["python3 test_prices.py"]
    );
}

#[test]
fn settings_the_task_does_not_name_are_reported_when_it_names_one() {
    let before = "# Settings.\nTIMEOUT_SECONDS = 30\nMAX_RETRIES = 3\nUSER_AGENT = \"x/1.0\"\n";
    let after = "# Settings.\nTIMEOUT_SECONDS = 5\nMAX_RETRIES = 5\nUSER_AGENT = \"x/1.0\"\n";
    let task = "In settings.py, change MAX_RETRIES from 3 to 5.";
    assert_eq!(
        super::unasked_settings(before, after, task),
        [(
            "TIMEOUT_SECONDS".to_string(),
            "30".to_string(),
            "5".to_string()
        )]
    );
    // Only the named one changed, or both named: nothing to report.
    let right = before.replace("MAX_RETRIES = 3", "MAX_RETRIES = 5");
    assert!(super::unasked_settings(before, &right, task).is_empty());
    let both = "Set MAX_RETRIES to 5 and TIMEOUT_SECONDS to 5.";
    assert!(super::unasked_settings(before, after, both).is_empty());
    // A task that names no setting it changed ("make it faster") is not judged.
    assert!(super::unasked_settings(before, after, "Make the downloader faster.").is_empty());
    // .env and YAML lines; indented lines and code are not settings.
    let env = "PORT=8000\nDEBUG=false\n";
    assert_eq!(
        super::unasked_settings(env, "PORT=9000\nDEBUG=true\n", "Set PORT to 9000 in .env")[0].0,
        "DEBUG"
    );
    let yaml = "name: shop\nreplicas: 2\nimage:\n  tag: v1\n";
    let yaml_after = "name: shop\nreplicas: 3\nimage:\n  tag: v2\n";
    assert!(super::unasked_settings(yaml, yaml_after, "Scale replicas to 3.").is_empty());
    let code = "def f(x=1):\n    y = 2\n    return x == y\n";
    let code_after = "def f(x=2):\n    y = 3\n    return x == y\n";
    assert!(super::unasked_settings(code, code_after, "Change f's y.").is_empty());
}

#[test]
fn the_settings_the_task_does_not_name_are_put_back() {
    let before = "# Settings.\nTIMEOUT = 30\nMAX_RETRIES = 3\nAGENT = \"x\"\n";
    let after = "# Settings.\nTIMEOUT = 5\nMAX_RETRIES = 5\nAGENT = \"x\"\n";
    let (kept, keys) =
        super::keep_unasked_settings(before, after, "Change MAX_RETRIES from 3 to 5.").unwrap();
    assert_eq!(
        kept,
        "# Settings.\nTIMEOUT = 30\nMAX_RETRIES = 5\nAGENT = \"x\"\n"
    );
    assert_eq!(keys, ["TIMEOUT"]);
    assert!(
        super::keep_unasked_settings(before, &kept, "Change MAX_RETRIES from 3 to 5.").is_none()
    );
}
