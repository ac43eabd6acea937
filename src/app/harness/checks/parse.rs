//! Whether a file still parses: [`parse_verdict`] asks the language's own parser (Python's `ast`, `node
//! --check`, `rustc`, PyYAML; JSON and TOML are parsed here), and [`breaks`] is what a caller acts on: an
//! edit that turned a parsing file into a broken one. Every outside program runs under [`bounded::TIMEOUT`];
//! a missing program or module, or one that runs too long, gives [`Verdict::Unknown`].

use std::path::Path;
use std::process::Command;

use super::bounded::{self, Ran};
use super::lang::Lang;
use crate::tools::support::syntax_check;

/// What a file's parser said of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Parses,
    /// Why not, short, with the line when the parser told it.
    Broken(String),
    /// No parser for this kind of file, or its program is missing (or did not answer in time).
    Unknown,
}

/// Parses `text` as the kind of file `path` names.
pub fn parse_verdict(path: &Path, text: &str) -> Verdict {
    match Lang::of(path) {
        Lang::Python => python(text),
        Lang::JavaScript => javascript(path, text),
        Lang::Json => match syntax_check::json_error(text) {
            Ok(()) => Verdict::Parses,
            Err(why) => Verdict::Broken(why.unwrap_or_else(|| "invalid JSON".into())),
        },
        Lang::Toml => toml_verdict(text),
        Lang::Yaml => yaml(text),
        Lang::Rust => rust(text),
        Lang::JsLike | Lang::Other => Verdict::Unknown,
    }
}

/// Why `after` broke a file that parsed as `before`; `None` when `before` did not parse (its repair is not
/// judged), when `after` parses, or when it cannot be told.
pub fn breaks(path: &Path, before: &str, after: &str) -> Option<String> {
    if parse_verdict(path, before) != Verdict::Parses {
        return None;
    }
    match parse_verdict(path, after) {
        Verdict::Broken(why) => Some(why),
        _ => None,
    }
}

/// A checker program given `text` on stdin (utf-8 whatever the locale).
fn python_run(script: &str, text: &str) -> Option<Ran> {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).env("PYTHONIOENCODING", "utf-8");
    bounded::run(cmd, Some(text), bounded::TIMEOUT)
}

fn python(text: &str) -> Verdict {
    let Some(ran) = python_run(syntax_check::PYTHON_PARSE, text) else {
        return Verdict::Unknown;
    };
    match ran.code {
        Some(0) => Verdict::Parses,
        Some(1) => {
            let said = ran.stdout.trim();
            if said.is_empty() {
                // Not a SyntaxError (a NUL byte makes `ast.parse` raise ValueError): the traceback's last line.
                Verdict::Broken(last_line(&ran.stderr).unwrap_or("does not parse").into())
            } else {
                Verdict::Broken(said.into())
            }
        }
        _ => Verdict::Unknown,
    }
}

/// Parses with PyYAML's composer (no tags are resolved: `!Ref` and the like are not errors); exit 3 when the
/// module is missing.
const YAML_PARSE: &str = "import sys\ntry:\n import yaml\nexcept ImportError:\n sys.exit(3)\ntry:\n for _ in yaml.compose_all(sys.stdin.read(), Loader=yaml.SafeLoader): pass\nexcept yaml.YAMLError as e:\n m = getattr(e, 'problem_mark', None)\n p = getattr(e, 'problem', None) or str(e).splitlines()[0]\n print(f'invalid YAML: {p}' + (f' (line {m.line + 1})' if m else ''))\n sys.exit(1)\n";

fn yaml(text: &str) -> Verdict {
    match python_run(YAML_PARSE, text) {
        Some(Ran { code: Some(0), .. }) => Verdict::Parses,
        Some(Ran {
            code: Some(1),
            stdout,
            ..
        }) if !stdout.trim().is_empty() => Verdict::Broken(stdout.trim().to_string()),
        _ => Verdict::Unknown,
    }
}

fn toml_verdict(text: &str) -> Verdict {
    match toml::from_str::<toml::Table>(text) {
        Ok(_) => Verdict::Parses,
        Err(e) => {
            // The error's text draws the line with a caret; its first line places it and its last says what.
            let shown = e.to_string();
            let mut lines = shown.lines().map(str::trim).filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("invalid TOML");
            match lines.next_back() {
                Some(what) if !what.starts_with('|') && !what.starts_with('^') => {
                    Verdict::Broken(format!("{first}: {what}"))
                }
                _ => Verdict::Broken(first.to_string()),
            }
        }
    }
}

/// A scratch directory holding `text` as `check.<ext>`: checkers see the extension they decide by.
fn scratch(ext: &str, text: &str) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("agentd-check")
        .tempdir()
        .ok()?;
    let file = dir.path().join(format!("check.{ext}"));
    std::fs::write(&file, text).ok()?;
    Some((dir, file))
}

fn javascript(path: &Path, text: &str) -> Verdict {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("js")
        .to_ascii_lowercase();
    let verdict = node_check(&ext, text);
    // A plain `.js` file may be an ES module that an older node reads as CommonJS: ask again as a module.
    match &verdict {
        Verdict::Broken(why)
            if ext == "js" && (why.contains("import statement") || why.contains("'export'")) =>
        {
            node_check("mjs", text)
        }
        _ => verdict,
    }
}

fn node_check(ext: &str, text: &str) -> Verdict {
    let Some((_dir, file)) = scratch(ext, text) else {
        return Verdict::Unknown;
    };
    let mut cmd = Command::new("node");
    cmd.arg("--check").arg(&file);
    let Some(ran) = bounded::run(cmd, None, bounded::TIMEOUT) else {
        return Verdict::Unknown;
    };
    if ran.code == Some(0) {
        return Verdict::Parses;
    }
    // node prints `FILE:LINE`, the line, a caret, then `SyntaxError: …`.
    let Some(error) = ran.stderr.lines().find(|l| l.starts_with("SyntaxError")) else {
        return Verdict::Unknown;
    };
    let line = ran.stderr.lines().find_map(|l| {
        let (head, number) = l.rsplit_once(':')?;
        (head.ends_with(&format!("check.{ext}")) && !number.is_empty())
            .then(|| number.parse::<usize>().ok())
            .flatten()
    });
    Verdict::Broken(match line {
        Some(n) => format!("{} (line {n})", error.trim()),
        None => error.trim().to_string(),
    })
}

/// Errors of the resolver and the macro expander, not the parser: a file read alone cannot find its crate's
/// other modules, macros, included files or build environment, so these say nothing about its syntax.
const NOT_SYNTAX: [&str; 5] = [
    "cannot find",
    "cannot determine",
    "couldn't read",
    "environment variable",
    "failed to resolve",
];

fn rust(text: &str) -> Verdict {
    let Some((dir, file)) = scratch("rs", text) else {
        return Verdict::Unknown;
    };
    let mut cmd = Command::new("rustc");
    // `dep-info` stops after name resolution: parse errors are told without type-checking the file.
    cmd.args([
        "--edition",
        "2021",
        "--crate-type",
        "lib",
        "--error-format=short",
        "--emit=dep-info",
        "-o",
    ])
    .arg(dir.path().join("check.d"))
    .arg(&file);
    let Some(ran) = bounded::run(cmd, None, bounded::TIMEOUT) else {
        return Verdict::Unknown;
    };
    if ran.code == Some(0) {
        return Verdict::Parses;
    }
    // Short errors read `check.rs:LINE:COL: error: message`; those with a code (`error[E0432]`) come after
    // parsing, as do the resolver's.
    let syntax = ran.stderr.lines().find_map(|l| {
        let (place, message) = l.split_once(": error: ")?;
        let line = place.split(':').nth(1)?.parse::<usize>().ok()?;
        (!NOT_SYNTAX.iter().any(|p| message.starts_with(p))).then_some((line, message))
    });
    match syntax {
        Some((line, message)) => Verdict::Broken(format!("{message} (line {line})")),
        // Only errors of a file read without its crate: as far as the parser goes, it parses.
        None if ran.code == Some(1) && ran.stderr.contains("error") => Verdict::Parses,
        None => Verdict::Unknown,
    }
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).rfind(|l| !l.is_empty())
}
