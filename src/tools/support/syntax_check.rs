//! The syntax guard of `edit` (SWE-agent's lesson: refuse an edit that breaks the file's syntax and say why):
//! JSON files are parsed here, Python files by `python3`'s own parser when one is installed. A file that did not
//! parse before the edit is not judged, and an unknown kind of file passes.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Why `new` would break the syntax that `old` had, or `None` when it does not (or cannot be told).
pub fn breaks_syntax(path: &Path, old: &str, new: &str) -> Option<String> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let check: fn(&str) -> Result<(), Option<String>> = match ext.as_str() {
        "json" => json_error,
        "py" => python_error,
        _ => return None,
    };
    // The original must parse: judging an edit of a broken file would block its repair.
    match check(old) {
        Ok(()) => {}
        Err(_) => return None,
    }
    check(new).err().flatten()
}

/// `Err(Some(why))` when `text` is not JSON.
pub(crate) fn json_error(text: &str) -> Result<(), Option<String>> {
    serde_json::from_str::<serde_json::Value>(text)
        .map(|_| ())
        .map_err(|e| Some(format!("invalid JSON: {e}")))
}

/// The Python program that parses its stdin: exit 1 with `Kind: message (line N)` on stdout when it does not parse.
pub(crate) const PYTHON_PARSE: &str = "import ast,sys\ntry:\n ast.parse(sys.stdin.read())\nexcept SyntaxError as e:\n print(f'{type(e).__name__}: {e.msg} (line {e.lineno})')\n sys.exit(1)\n";

/// `Err(None)` when there is no Python to ask (nothing is judged then).
fn python_error(text: &str) -> Result<(), Option<String>> {
    let mut child = Command::new("python3")
        .args(["-c", PYTHON_PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|_| None)?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().map_err(|_| None)?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) => Err(Some(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )),
        _ => Err(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_python_breakage_is_told() {
        let p = Path::new("c.json");
        assert!(breaks_syntax(p, "{\"a\": 1}", "{\"a\": 2}").is_none());
        assert!(breaks_syntax(p, "{\"a\": 1}", "{\"a\": }")
            .unwrap()
            .contains("invalid JSON"));
        // A file broken before is not judged.
        assert!(breaks_syntax(p, "{", "{{").is_none());
        assert!(breaks_syntax(Path::new("notes.txt"), "a", "{").is_none());
        if Command::new("python3").arg("-V").output().is_ok() {
            let py = Path::new("m.py");
            let why = breaks_syntax(
                py,
                "def f():\n    return 1\n",
                "def g(): return 2\n    return 1\n",
            )
            .unwrap();
            assert!(
                why.contains("IndentationError") && why.contains("line 2"),
                "{why}"
            );
            assert!(breaks_syntax(py, "x = 1\n", "x = 2\n").is_none());
        }
    }
}
