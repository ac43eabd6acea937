//! Which commands check the work, decided from the task's structure and the repository's files: commands the
//! task writes in code (backticks, fenced blocks) or plainly as a runner and an existing file, then the test files
//! it names, and only when it names neither, the repository's own test command. Every command is one simple
//! program call whose paths are among the listed files: nothing that deletes, redirects, pipes, chains or
//! substitutes, and no inline code (`python3 -c`, `node -e`).

use std::collections::BTreeSet;

/// A command to run before saying the work is done, and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckCommand {
    pub command: String,
    pub why: String,
}

/// Programs a check command may start with (besides `./script` of a listed file).
const RUNNERS: [&str; 11] = [
    "python", "python3", "pytest", "node", "npm", "npx", "cargo", "go", "make", "bash", "sh",
];
/// Runners that, given nothing to run, read stdin or only print their help.
const NEED_ARGUMENT: [&str; 9] = [
    "python", "python3", "node", "npm", "npx", "cargo", "go", "bash", "sh",
];
/// The subcommands of package managers that check rather than install, publish or clean.
const SUBCOMMANDS: [(&str, &[&str]); 3] = [
    ("npm", &["test", "t", "run", "run-script"]),
    (
        "cargo",
        &["test", "run", "build", "check", "clippy", "bench"],
    ),
    ("go", &["test", "run", "build", "vet"]),
];
/// Programs whose [`INLINE_CODE`] flags run code written on the command line.
const INTERPRETERS: [&str; 5] = ["python", "python3", "node", "bash", "sh"];
/// Flags that pass the program's code inline instead of a file.
const INLINE_CODE: [&str; 5] = ["-c", "-e", "--eval", "-p", "--print"];
/// Programs that destroy or escalate, anywhere in a command.
const DESTRUCTIVE: [&str; 10] = [
    "rm", "rmdir", "sudo", "dd", "mkfs", "shred", "kill", "pkill", "killall", "shutdown",
];
/// Characters that make a command more than one simple call (redirects, pipes, chains, substitutions).
const SHELL_SYNTAX: [char; 8] = ['>', '<', '|', ';', '&', '`', '$', '\n'];
/// Runners a task may write in plain text, followed by the file they run.
const PLAIN_RUNNERS: [&str; 6] = ["python", "python3", "pytest", "node", "bash", "sh"];

/// The commands that check the work of `task` in a workspace of `files` (relative paths), read through `read`.
pub fn check_commands(
    task: &str,
    files: &[String],
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<CheckCommand> {
    let listed: BTreeSet<&str> = files
        .iter()
        .map(String::as_str)
        .filter(|f| plain_path(f))
        .collect();
    let mut out = Commands::default();
    let mut named: Vec<(usize, String)> = code_spans(task)
        .into_iter()
        .filter_map(|(at, span)| Some((at, safe_command(span, &listed)?)))
        .collect();
    named.extend(plain_commands(task, &listed));
    named.sort_by_key(|(at, _)| *at);
    for (_, command) in named {
        out.push(command, "the task names it");
    }
    let mentioned = mentioned_files(task, &listed);
    for file in mentioned.iter().filter(|f| is_test_file(f)) {
        if !out.runs(file) {
            out.push(test_command(file, read), "the task names this test file");
        }
    }
    if out.list.is_empty() {
        repository_commands(&mentioned, &listed, read, &mut out);
    }
    out.list
}

#[derive(Default)]
struct Commands {
    list: Vec<CheckCommand>,
}

impl Commands {
    fn push(&mut self, command: String, why: &str) {
        if !self.list.iter().any(|c| c.command == command) {
            self.list.push(CheckCommand {
                command,
                why: why.into(),
            });
        }
    }

    /// Whether a command already runs `file`.
    fn runs(&self, file: &str) -> bool {
        self.list.iter().any(|c| {
            c.command
                .split_whitespace()
                .any(|w| normal(w.split("::").next().unwrap_or(w)) == file)
        })
    }
}

/// A path made only of characters that need no quoting in a shell.
pub fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
}

/// `./a/b.py` → `a/b.py`.
fn normal(path: &str) -> &str {
    path.trim_start_matches("./")
}

/// The code the task writes: each line of a fenced block and each inline span, with where it starts.
fn code_spans(task: &str) -> Vec<(usize, &str)> {
    let mut spans = Vec::new();
    let mut rest = 0;
    while let Some(open) = task[rest..].find('`').map(|i| i + rest) {
        if task[open..].starts_with("```") {
            // A fenced block: its first line is the language tag, the others are commands.
            let body = task[open + 3..]
                .find('\n')
                .map_or(task.len(), |i| open + 3 + i + 1);
            let end = task[body..].find("```").map_or(task.len(), |i| body + i);
            let mut at = body;
            for line in task[body..end].split_inclusive('\n') {
                let command = line.trim();
                let command = command.strip_prefix("$ ").unwrap_or(command);
                if !command.is_empty() {
                    spans.push((at, command));
                }
                at += line.len();
            }
            rest = (end + 3).min(task.len());
        } else {
            let Some(close) = task[open + 1..].find('`').map(|i| open + 1 + i) else {
                break;
            };
            spans.push((open, task[open + 1..close].trim()));
            rest = close + 1;
        }
    }
    spans
}

/// `task` with its code spans blanked out, so that plain text is read without them.
fn plain_text(task: &str) -> String {
    let mut bytes = task.as_bytes().to_vec();
    let mut inside = false;
    for b in bytes.iter_mut() {
        if *b == b'`' {
            inside = !inside;
            *b = b' ';
        } else if inside && *b != b'\n' {
            *b = b' ';
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `command` when it is one simple call of a known runner whose paths are listed files.
fn safe_command(command: &str, listed: &BTreeSet<&str>) -> Option<String> {
    let command = command.trim();
    if command.contains(SHELL_SYNTAX) || (command.contains("..") && !go_pattern_only(command)) {
        return None;
    }
    let words = shell_words(command)?;
    let (program, args) = words.split_first()?;
    if words.iter().any(|w| DESTRUCTIVE.contains(&w.as_str())) {
        return None;
    }
    if let Some(script) = program.strip_prefix("./") {
        if !listed.contains(script) {
            return None;
        }
        // A source file written alone (`./cli.py`) is more likely named than run; a script or a test is run.
        let name = basename(script);
        let runnable = !name.contains('.') || name.ends_with(".sh") || is_test_file(script);
        if args.is_empty() && !runnable {
            return None;
        }
    } else if !RUNNERS.contains(&program.as_str()) {
        return None;
    }
    if NEED_ARGUMENT.contains(&program.as_str()) && args.is_empty() {
        return None;
    }
    if let Some((_, allowed)) = SUBCOMMANDS.iter().find(|(p, _)| p == program) {
        if !allowed.contains(&args.first()?.as_str()) {
            return None;
        }
    }
    let mut module_next = false;
    for arg in args {
        if INLINE_CODE.contains(&arg.as_str()) && INTERPRETERS.contains(&program.as_str()) {
            return None;
        }
        if std::mem::replace(&mut module_next, arg == "-m") || arg.starts_with('-') {
            continue;
        }
        if path_like(arg) && !listed_path(arg, listed) {
            return None;
        }
    }
    // As written: its quoting is kept (`pytest -k "a and b"`).
    Some(command.to_string())
}

/// Whether every `..` in `command` is part of Go's `./...` package pattern.
fn go_pattern_only(command: &str) -> bool {
    command.split_whitespace().all(|w| {
        !w.contains("..")
            || w == "./..."
            || (w.ends_with("/...") && !w[..w.len() - 4].contains(".."))
    })
}

/// Words of a command, with `'…'` and `"…"` quoting; `None` when a quote is left open.
fn shell_words(command: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in command.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                started = true;
            }
            None if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            None => {
                word.push(c);
                started = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if started {
        words.push(word);
    }
    Some(words)
}

/// Whether a word names a file or folder: it has a `/` or ends in an extension (`a.py`, not `3.14`).
fn path_like(word: &str) -> bool {
    let word = word.split("::").next().unwrap_or(word);
    word.contains('/')
        || word.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && !ext.is_empty()
                && ext.len() <= 5
                && ext.chars().all(|c| c.is_ascii_alphabetic())
        })
}

/// Whether `word` (a pytest node id's file part, `./`-prefixed or not) is a listed file, a folder holding
/// one, or a Go pattern over such a folder.
fn listed_path(word: &str, listed: &BTreeSet<&str>) -> bool {
    let word = word.split("::").next().unwrap_or(word);
    if word.starts_with('/') || word.starts_with('~') || word.split('/').any(|c| c == "..") {
        return false;
    }
    let path = normal(word);
    let dir = path
        .strip_suffix("...")
        .unwrap_or(path)
        .trim_end_matches('/');
    if dir.is_empty() || dir == "." {
        return true;
    }
    listed.contains(path)
        || listed
            .iter()
            .any(|f| f.strip_prefix(dir).is_some_and(|r| r.starts_with('/')))
}

/// `runner FILE` written in plain text, FILE a listed file: "Run python3 test_x.py and fix it".
fn plain_commands(task: &str, listed: &BTreeSet<&str>) -> Vec<(usize, String)> {
    let text = plain_text(task);
    let words: Vec<(usize, &str)> = words_at(&text).collect();
    words
        .windows(2)
        .filter_map(|pair| {
            let (at, runner) = pair[0];
            let file = normal(trim_punctuation(pair[1].1));
            (PLAIN_RUNNERS.contains(&trim_punctuation(runner)) && listed.contains(file))
                .then(|| (at, format!("{} {file}", trim_punctuation(runner))))
        })
        .collect()
}

/// The whitespace-separated words of `text`, with where each starts.
fn words_at(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_whitespace()
        .map(move |w| (w.as_ptr() as usize - text.as_ptr() as usize, w))
}

/// A word without the quotes, brackets and sentence punctuation around it.
fn trim_punctuation(word: &str) -> &str {
    word.trim_start_matches(['(', '[', '"', '\'', '`', '*'])
        .trim_end_matches(['.', ',', ':', ';', '!', '?', ')', ']', '"', '\'', '`', '*'])
}

/// The listed files the task names, in the order it first names them: a full path, or a file name that only
/// one listed file has.
fn mentioned_files(task: &str, listed: &BTreeSet<&str>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for word in
        task.split(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '(' | ')' | ','))
    {
        let word = trim_punctuation(word);
        // `tests/test_a.py::test_b`, `src/a.py:12`.
        let word = word.split("::").next().unwrap_or(word);
        let word = match word.rsplit_once(':') {
            Some((file, line)) if line.chars().all(|c| c.is_ascii_digit()) => file,
            _ => word,
        };
        let word = normal(word);
        if word.is_empty() {
            continue;
        }
        let file = if listed.contains(word) {
            Some(word.to_string())
        } else if !word.contains('/') {
            let mut same = listed.iter().filter(|f| basename(f) == word);
            match (same.next(), same.next()) {
                (Some(one), None) => Some(one.to_string()),
                _ => None,
            }
        } else {
            None
        };
        if let Some(file) = file.filter(|f| !found.contains(f)) {
            found.push(file);
        }
    }
    found
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `test_*.py`, `*_test.py`, `*.test.js`, `test*.js` (and `.mjs`/`.cjs`).
pub fn is_test_file(path: &str) -> bool {
    let name = basename(path);
    if let Some(stem) = name.strip_suffix(".py") {
        return stem.starts_with("test_") || stem.ends_with("_test");
    }
    [".js", ".mjs", ".cjs"].iter().any(|ext| {
        name.strip_suffix(ext)
            .is_some_and(|stem| stem.ends_with(".test") || stem.starts_with("test"))
    })
}

/// How a test file runs: pytest for a Python file that imports it, or has test functions and no
/// `__main__`/`unittest.main` of its own; `python3 FILE` for one that runs itself or is a script of asserts;
/// `node FILE` for JavaScript.
fn test_command(file: &str, read: &dyn Fn(&str) -> Option<String>) -> String {
    if !file.ends_with(".py") {
        return format!("node {file}");
    }
    let text = read(file).unwrap_or_default();
    let imports_pytest = text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("import pytest") || l.starts_with("from pytest")
    });
    let runs_itself =
        text.contains("unittest.main") || (text.contains("__name__") && text.contains("__main__"));
    // A script of top-level asserts, with no test functions or classes, runs as it is.
    let has_tests = text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("def test") || l.starts_with("class Test") || l.starts_with("async def test")
    });
    if imports_pytest || (has_tests && !runs_itself) {
        format!("python3 -m pytest -q {file}")
    } else {
        format!("python3 {file}")
    }
}

/// The repository's own test commands, when the task named no command and no test file.
fn repository_commands(
    mentioned: &[String],
    listed: &BTreeSet<&str>,
    read: &dyn Fn(&str) -> Option<String>,
    out: &mut Commands,
) {
    if listed.contains("package.json") {
        let script = read("package.json")
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|json| json.pointer("/scripts/test")?.as_str().map(str::to_string));
        // npm's generated placeholder fails by design: it is not a test.
        if script.is_some_and(|s| !s.contains("no test specified")) {
            out.push("npm test --silent".into(), "package.json has a test script");
        }
    }
    for makefile in ["Makefile", "makefile", "GNUmakefile"] {
        if !listed.contains(makefile) {
            continue;
        }
        let has_test = read(makefile).is_some_and(|text| {
            text.lines().any(|l| {
                l.strip_prefix("test")
                    .map(str::trim_start)
                    .is_some_and(|r| r.starts_with(':') && !r.starts_with(":="))
            })
        });
        if has_test {
            out.push("make test".into(), "the Makefile has a test target");
        }
    }
    if listed.contains("Cargo.toml") && mentioned.iter().any(|f| f.ends_with(".rs")) {
        out.push(
            "cargo test -q".into(),
            "the task names a Rust file of this crate",
        );
    }
    let modules: Vec<String> = mentioned
        .iter()
        .filter(|f| f.ends_with(".py") && !is_test_file(f))
        .filter_map(|f| f.strip_suffix(".py"))
        .flat_map(|stem| [stem.replace('/', "."), basename(stem).to_string()])
        .collect();
    if modules.is_empty() {
        return;
    }
    for test in listed
        .iter()
        .filter(|f| !f.contains('/') && f.ends_with(".py") && is_test_file(f))
    {
        let imports = read(test)
            .is_some_and(|text| python_imports(&text).iter().any(|m| modules.contains(m)));
        if imports {
            out.push(
                test_command(test, read),
                "this test file imports a file the task names",
            );
        }
    }
}

/// The modules a Python text imports (`import a.b` → `a.b`; `from a import b` → `a` and `a.b`).
fn python_imports(text: &str) -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if let Some(list) = line.strip_prefix("import ") {
            for part in list.split(',') {
                if let Some(m) = part.split_whitespace().next() {
                    modules.insert(m.to_string());
                }
            }
        } else if let Some((from, names)) = line
            .strip_prefix("from ")
            .and_then(|r| r.split_once(" import "))
        {
            // Relative imports name modules beside the test: `from .shapes import area`, `from . import shapes`.
            let from = from.trim().trim_start_matches('.');
            if !from.is_empty() {
                modules.insert(from.to_string());
            }
            for name in names.trim_matches(['(', ')', ' ']).split(',') {
                if let Some(n) = name.split_whitespace().next() {
                    modules.insert(if from.is_empty() {
                        n.to_string()
                    } else {
                        format!("{from}.{n}")
                    });
                }
            }
        }
    }
    modules
}
