//! The examples a changed Python function's docstring gives (`>>> f(2)` and its output, or `f(2) == 4` in a
//! sentence), run against the file as it is now: a stub implemented wrongly, or a fix that breaks what its own
//! docstring promises, fails a check that no test file holds. Which functions changed is read here; the
//! examples are read and run by `examples.py` with the interpreter, through the caller's command runner (the
//! workspace's code runs only where commands run without asking).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::blank::blank;
use super::commands::plain_path;
use super::lang::Lang;
use std::path::Path;

/// The largest original text passed to the script (base64 grows it by a third; Linux caps one argument at 128 KiB).
const MAX_ORIGINAL_BYTES: usize = 64 * 1024;
/// The script that runs the examples (argv: the file, then the function names).
const SCRIPT: &str = include_str!("examples.py");

/// The functions (at any depth: methods too) whose text differs between `before` (`None`: a new file) and
/// `after`, or that `after` adds, in the order `after` defines them.
pub fn changed_functions(path: &str, before: Option<&str>, after: &str) -> Vec<String> {
    if Lang::of(Path::new(path)) != Lang::Python {
        return Vec::new();
    }
    let old = before.map(functions).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for (name, text) in functions(after) {
        let same = old.iter().any(|(n, t)| *n == name && *t == text);
        if !same && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The command that runs the docstring examples of `functions` in `path` (a relative path run from the
/// workspace), those of its text `before` the change where it had them, or `None` when there is nothing to run
/// or the path would need quoting.
pub fn examples_command(path: &str, before: Option<&str>, functions: &[String]) -> Option<String> {
    // No quoting needed, and not read as an option.
    let plain = |s: &str| plain_path(s) && !s.starts_with('-');
    if functions.is_empty() || !plain(path) || !functions.iter().all(|f| plain(f)) {
        return None;
    }
    // Past this, the examples come from the file as it is now (one argument has to fit the system's limit).
    let original = before
        .filter(|b| b.len() <= MAX_ORIGINAL_BYTES)
        .map_or_else(|| "-".to_string(), |b| STANDARD.encode(b));
    Some(format!(
        "python3 - {path} {original} {} <<'AGENTD_EXAMPLES'\n{SCRIPT}AGENTD_EXAMPLES",
        functions.join(" ")
    ))
}

/// Each `def` of a Python text with its whole block (the def line to the last line indented under it).
fn functions(text: &str) -> Vec<(String, String)> {
    let code = blank(Lang::Python, text);
    let code: Vec<&str> = code.lines().collect();
    let raw: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    for (i, line) in code.iter().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t
            .strip_prefix("def ")
            .or_else(|| t.strip_prefix("async def "))
        else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let level = indent(line);
        let end = (i + 1..code.len())
            .find(|&j| !code[j].trim().is_empty() && indent(code[j]) <= level)
            .unwrap_or(code.len());
        let block = raw.get(i..end).map(|b| b.join("\n")).unwrap_or_default();
        let block = block.trim_end().to_string();
        out.push((name, block));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "import re\n\n\ndef slug(t):\n    \"\"\"slug(\"A b\") == \"a-b\".\n\n    def not_a_function():\n    \"\"\"\n    raise NotImplementedError\n\n\nclass Q:\n    def peek(self):\n        return 1\n\n\ndef other():\n    return 2\n";

    #[test]
    fn the_functions_a_change_rewrote_or_added_are_the_changed_ones() {
        let after = BEFORE
            .replace("    raise NotImplementedError", "    return t.lower()")
            .replace("        return 1", "        return 0")
            + "\n\ndef added():\n    pass\n";
        assert_eq!(
            changed_functions("a.py", Some(BEFORE), &after),
            ["slug", "peek", "added"]
        );
        assert_eq!(
            changed_functions("a.py", None, BEFORE),
            ["slug", "peek", "other"]
        );
        assert!(changed_functions("a.py", Some(BEFORE), BEFORE).is_empty());
        assert!(changed_functions("a.js", None, "function f() {}").is_empty());
    }

    /// Runs the examples command for `text` as `m.py` in a temp dir; its exit success and output.
    fn run(text: &str, functions: &[&str]) -> (bool, String) {
        run_changed(None, text, functions)
    }

    /// As [`run`], for a change from `before`.
    fn run_changed(before: Option<&str>, text: &str, functions: &[&str]) -> (bool, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("m.py"), text).expect("write");
        let names: Vec<String> = functions.iter().map(|f| f.to_string()).collect();
        let command = examples_command("m.py", before, &names).expect("a command");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&command)
            .current_dir(dir.path())
            .output()
            .expect("bash runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn a_docstring_example_that_does_not_hold_fails_and_one_that_holds_passes() {
        let text = "import re\n\n\ndef slugify(title):\n    \"\"\"A slug: slugify(\"Hello, World!\") == \"hello-world\".\"\"\"\n    return title.lower().replace(\" \", \"-\")\n\n\ndef double(x):\n    \"\"\"\n    >>> double(2)\n    4\n    \"\"\"\n    return x * 2\n\n\nprint(\"the script's own work\")\nraise SystemExit(3)\n";
        let (ok, out) = run(text, &["slugify", "double"]);
        assert!(!ok, "{out}");
        assert!(
            out.contains(
                "slugify(\"Hello, World!\") == \"hello-world\", but it returns 'hello,-world!'"
            ),
            "{out}"
        );
        assert!(!out.contains("double"), "double's example holds: {out}");
        assert!(!out.contains("the script's own work"), "{out}");
        let fixed = text.replace(
            "return title.lower().replace(\" \", \"-\")",
            "return re.sub(r\"[^a-z0-9]+\", \"-\", title.lower()).strip(\"-\")",
        );
        assert_eq!(run(&fixed, &["slugify", "double"]), (true, String::new()));
        let broken = text.replace("return x * 2", "return x + 3");
        let (ok, out) = run(&broken, &["double"]);
        assert!(
            !ok && out.contains("Expected:") && out.contains("5"),
            "{out}"
        );
        // A function that raises, and an example whose arguments cannot be evaluated (not a failure).
        let raising = "def f(x):\n    \"\"\"f(1) == 2; f(undefined) == 3\"\"\"\n    raise NotImplementedError\n";
        let (ok, out) = run(raising, &["f"]);
        assert!(!ok, "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains("raises NotImplementedError"), "{out}");
    }

    #[test]
    fn a_change_that_rewrites_an_example_to_match_its_code_is_checked_against_the_example_it_had() {
        let before = "def inc(x):\n    \"\"\"inc(1) == 2\"\"\"\n    raise NotImplementedError\n";
        let cheat = "def inc(x):\n    \"\"\"inc(1) == 1\"\"\"\n    return x\n";
        let (ok, out) = run_changed(Some(before), cheat, &["inc"]);
        assert!(
            !ok && out.contains("inc(1) == 2, but it returns 1"),
            "{out}"
        );
        // Nor does dropping the docstring.
        let dropped = "def inc(x):\n    return x\n";
        let (ok, out) = run_changed(Some(before), dropped, &["inc"]);
        assert!(
            !ok && out.contains("inc(1) == 2, but it returns 1"),
            "{out}"
        );
        // A function the change adds is held to the examples it is written with.
        let added =
            format!("{before}\n\ndef dec(x):\n    \"\"\"dec(1) == 0\"\"\"\n    return x - 1\n");
        assert_eq!(
            run_changed(Some(before), &added, &["dec"]),
            (true, String::new())
        );
    }

    #[test]
    fn a_path_or_name_that_needs_quoting_gets_no_command() {
        let names = vec!["slug".to_string()];
        let command = examples_command("src/a.py", None, &names).expect("a plain path");
        assert!(command.starts_with("python3 - src/a.py - slug <<'AGENTD_EXAMPLES'\n"));
        let command = examples_command("a.py", Some("x = 1\n"), &names).expect("a plain path");
        assert!(command.starts_with("python3 - a.py eCA9IDEK slug <<'AGENTD_EXAMPLES'\n"));
        assert!(command.ends_with("\nAGENTD_EXAMPLES"));
        assert!(examples_command("a b.py", None, &names).is_none());
        assert!(examples_command("a.py;rm", None, &names).is_none());
        assert!(examples_command("-c", None, &names).is_none());
        assert!(examples_command("a.py", None, &[]).is_none());
    }
}
