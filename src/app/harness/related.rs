//! The files a task is about beyond those it names by path (rule `related_files`, file blocks): the workspace
//! modules a named file imports (a failing test's code under test), the files of a folder it names
//! (`packages/core`), and the files where a code name the task writes (`load_cfg`, `slugify()`, `` `parseArgs` ``)
//! is defined or used. A small model shown only the test file, or no file at all, edits the wrong one or answers
//! without a change; Aider keeps such files in its chat for the same reason. Read through the workspace's confinement; small text files only, a few at most.

use std::path::Path;

use crate::app::mentions::{prompt_word, NAMED_FILE_MAX_BYTES};
use crate::tools::support::workspace::WorkspaceState;

/// Files added beyond those the task names.
const MAX_RELATED: usize = 3;
/// Files searched for a code name.
const MAX_SEARCHED: usize = 300;

/// The related files of `task`, whose named files are `named` (path, text), each with its text, in the order
/// found: imports of the named files first, then the files of the task's code names (those defining one first).
/// Each counts as seen.
pub fn related_files(
    task: &str,
    named: &[(String, String)],
    state: &WorkspaceState,
) -> Vec<(String, String)> {
    let files = state.listing().files;
    let read = |rel: &str| -> Option<String> {
        let text = state.scope().read_text(rel, NAMED_FILE_MAX_BYTES)?;
        (!text.contains('\0')).then_some(text)
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let known = |out: &Vec<(String, String)>, rel: &str| {
        named.iter().chain(out.iter()).any(|(r, _)| r == rel)
    };
    for (rel, text) in named {
        for module in local_imports(rel, text, &files) {
            if out.len() < MAX_RELATED && !known(&out, &module) {
                if let Some(t) = read(&module) {
                    out.push((module, t));
                }
            }
        }
    }
    for dir in named_folders(task, &files) {
        let mut inside: Vec<&String> = files
            .iter()
            .filter(|f| f.starts_with(&format!("{dir}/")))
            .collect();
        // The folder's own files before its subfolders' (a manifest before the modules).
        inside.sort_by_key(|f| (f.matches('/').count(), f.as_str()));
        for rel in inside {
            if out.len() < MAX_RELATED && !known(&out, rel) {
                if let Some(t) = read(rel) {
                    out.push((rel.clone(), t));
                }
            }
        }
    }
    for name in code_names(task) {
        let mut hits: Vec<(bool, String, String)> = files
            .iter()
            .take(MAX_SEARCHED)
            .filter(|rel| !known(&out, rel))
            .filter_map(|rel| {
                let text = read(rel)?;
                crate::tools::support::rename_follow::uses_word(&text, &name)
                    .then(|| (!defines(&text, &name), rel.clone(), text))
            })
            .collect();
        hits.sort_by_key(|(uses_only, _, _)| *uses_only);
        for (_, rel, text) in hits {
            if out.len() < MAX_RELATED && !known(&out, &rel) {
                out.push((rel, text));
            }
        }
    }
    for (rel, _) in &out {
        state.saw(Path::new(rel));
    }
    out
}

/// The workspace folders `task` names by their relative path (`packages/core`, `src/`).
fn named_folders(task: &str, files: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in task.split_whitespace() {
        let word = prompt_word(word)
            .trim_start_matches("./")
            .trim_end_matches('/');
        if word.is_empty() || word.contains("..") || out.iter().any(|d| d == word) {
            continue;
        }
        if files.iter().any(|f| f.starts_with(&format!("{word}/"))) {
            out.push(word.to_string());
        }
    }
    out
}

/// The code names `task` writes: identifiers with an underscore or an inner capital, or written as a call
/// (`name()`) or in backticks; not file names.
fn code_names(task: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for word in task.split_whitespace() {
        let quoted = word.starts_with('`');
        // `prompt_word` takes a call's closing parenthesis for punctuation: `slugify()` → `slugify(`.
        let w = prompt_word(word);
        let call = w.ends_with('(');
        let w = w.trim_end_matches('(');
        let ident = w.len() >= 3
            && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !w.starts_with(|c: char| c.is_ascii_digit());
        let code = w.contains('_') || w.chars().skip(1).any(|c| c.is_ascii_uppercase());
        if ident && (code || call || quoted) && !names.iter().any(|n| n == w) {
            names.push(w.to_string());
        }
    }
    names
}

/// Whether `text` defines `name` (a `def`, `class`, `function`, `fn` or an assignment at a line's start).
fn defines(text: &str, name: &str) -> bool {
    text.lines().any(|line| {
        let t = line.trim_start();
        let t = t.strip_prefix("export ").unwrap_or(t);
        let t = t.strip_prefix("pub ").unwrap_or(t);
        [
            "def ",
            "class ",
            "function ",
            "fn ",
            "const ",
            "let ",
            "var ",
            "async def ",
        ]
        .iter()
        .any(|k| t.strip_prefix(k).is_some_and(|r| starts_with_word(r, name)))
            || starts_with_word(t, name) && t[name.len()..].trim_start().starts_with('=')
    })
}

fn starts_with_word(text: &str, word: &str) -> bool {
    text.starts_with(word)
        && !text[word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The workspace files a Python or JavaScript file imports (`from pkg.mod import x`, `import mod`,
/// `require('./x')`, `from './x'`), relative to the workspace root or to the file's folder.
fn local_imports(rel: &str, text: &str, files: &[String]) -> Vec<String> {
    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let candidates: Vec<String> = if let Some(rest) = line.strip_prefix("from ") {
            let module = rest.split_whitespace().next().unwrap_or("");
            match module.strip_prefix(['\'', '"']) {
                Some(js) => js_paths(dir, js.trim_end_matches(['\'', '"', ';'])),
                None => py_paths(dir, module),
            }
        } else if let Some(rest) = line.strip_prefix("import ") {
            match rest.split(" from ").nth(1) {
                Some(js) => js_paths(dir, js.trim().trim_matches(['\'', '"', ';'])),
                None => rest
                    .split(',')
                    .flat_map(|m| py_paths(dir, m.split_whitespace().next().unwrap_or("")))
                    .collect(),
            }
        } else if let Some(at) = line.find("require(") {
            let arg = line[at + 8..].split(')').next().unwrap_or("");
            js_paths(dir, arg.trim_matches(['\'', '"']))
        } else {
            continue;
        };
        for c in candidates {
            if files.contains(&c) && c != rel && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

fn join(dir: &str, path: &str) -> String {
    if dir.is_empty() {
        path.to_string()
    } else {
        format!("{dir}/{path}")
    }
}

fn py_paths(dir: &str, module: &str) -> Vec<String> {
    if module.is_empty() || module.starts_with('.') {
        return Vec::new();
    }
    let path = module.replace('.', "/");
    let mut out = Vec::new();
    for base in [format!("{path}.py"), format!("{path}/__init__.py")] {
        out.push(base.clone());
        out.push(join(dir, &base));
    }
    out
}

fn js_paths(dir: &str, spec: &str) -> Vec<String> {
    let Some(rest) = spec.strip_prefix("./") else {
        return Vec::new();
    };
    let base = join(dir, rest);
    ["", ".js", ".mjs", ".cjs", ".ts", "/index.js"]
        .iter()
        .map(|ext| format!("{base}{ext}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_imports_and_definitions() {
        assert_eq!(
            code_names("Rename the function load_cfg to load_config, and fix slugify() and `run`."),
            ["load_cfg", "load_config", "slugify", "run"]
        );
        assert!(code_names("Fix the bug in calc.py so it works.").is_empty());
        let files: Vec<String> = ["shop/pricing.py", "util.js", "tests/helper.py"]
            .map(String::from)
            .to_vec();
        let test =
            "from shop.pricing import apply_discount\nimport os\nconst u = require('./util');\n";
        assert_eq!(
            local_imports("test_x.py", test, &files),
            ["shop/pricing.py", "util.js"]
        );
        assert_eq!(
            local_imports("tests/t.py", "import helper\n", &files),
            ["tests/helper.py"]
        );
        assert!(defines("def load_cfg(path):\n", "load_cfg"));
        assert!(defines("LIMIT = 3\n", "LIMIT"));
        assert!(!defines("cfg = load_cfg(p)\n", "load_cfg"));
    }

    #[test]
    fn related_files_come_from_imports_and_code_names() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        };
        w(
            "test_pricing.py",
            "from shop.pricing import total\nassert total([1]) == 1\n",
        );
        w("shop/pricing.py", "def total(xs):\n    return sum(xs)\n");
        w(
            "app.py",
            "from config import load_cfg\ncfg = load_cfg('a')\n",
        );
        w("config.py", "def load_cfg(path):\n    return {}\n");
        w("other.py", "print(1)\n");
        let state = WorkspaceState::new(dir.path());
        let named = vec![(
            "test_pricing.py".to_string(),
            "from shop.pricing import total\n".to_string(),
        )];
        let got = related_files("The test fails; fix it.", &named, &state);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "shop/pricing.py");
        let got = related_files("Rename load_cfg to load_config.", &[], &state);
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["config.py", "app.py"]);
        // A named folder: its own files first, then its subfolders'.
        w(
            "pkg/core/pyproject.toml",
            "[project]\nversion = \"1.2.0\"\n",
        );
        w("pkg/core/lib/a.py", "A = 1\n");
        w("pkg/web/pyproject.toml", "[project]\n");
        let state = WorkspaceState::new(dir.path());
        let got = related_files("Bump the version of pkg/core.", &[], &state);
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["pkg/core/pyproject.toml", "pkg/core/lib/a.py"]);
    }
}
