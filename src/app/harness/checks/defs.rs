//! The top-level names a file defines or exports, per language, and the ones an edit lost: a model asked to
//! change one function that rewrites the file and drops another leaves the file parsing but its callers broken.
//! Names are read from the file's text with comments and strings blanked ([`super::blank`]), at brace (or, for
//! Python, indentation) depth zero, so methods and nested functions are not top-level.

use std::collections::BTreeSet;
use std::path::Path;

use super::blank::blank;
use super::lang::Lang;
use crate::tools::support::rename_follow::uses_word;

/// What a file offers its importers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    /// Top-level definitions (functions, classes, variables, types, modules).
    pub defined: BTreeSet<String>,
    /// Names exported by an explicit form: `export …`, `module.exports`, Rust's `pub`.
    pub exported: BTreeSet<String>,
}

/// The top-level names of `text`, read as the kind of file `path` names (empty for kinds not read).
pub fn top_level_names(path: &Path, text: &str) -> Names {
    let lang = Lang::of(path);
    let mut names = Names::default();
    let read: fn(&Line, &mut Names) = match lang {
        Lang::Python => python_line,
        Lang::JavaScript | Lang::JsLike => js_line,
        Lang::Rust => rust_line,
        _ => return names,
    };
    let blanked = blank(lang, text);
    let mut depth: usize = 0;
    let mut start = 0;
    for code in blanked.split_inclusive('\n') {
        if depth == 0 {
            read(
                &Line {
                    code,
                    text,
                    blanked: &blanked,
                    at: start,
                },
                &mut names,
            );
        }
        for c in code.chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        start += code.len();
    }
    names
}

/// The top-level names `before` defined or exported that `after` no longer does, sorted.
pub fn lost_definitions(path: &Path, before: &str, after: &str) -> Vec<String> {
    let (was, is) = (top_level_names(path, before), top_level_names(path, after));
    let lost: BTreeSet<&String> = was
        .defined
        .difference(&is.defined)
        .chain(was.exported.difference(&is.exported))
        .collect();
    lost.into_iter().cloned().collect()
}

/// [`lost_definitions`] less the names `task` mentions as a whole word (the task may have asked for them to go).
pub fn lost_unless_named(path: &Path, before: &str, after: &str, task: &str) -> Vec<String> {
    let mut lost = lost_definitions(path, before, after);
    lost.retain(|name| !uses_word(task, name));
    lost
}

/// One line at depth zero, with the whole text around it (forms such as `export { … }` span lines).
struct Line<'a> {
    /// The line, blanked.
    code: &'a str,
    /// The whole original text.
    text: &'a str,
    /// The whole blanked text.
    blanked: &'a str,
    /// Where the line starts in both.
    at: usize,
}

impl Line<'_> {
    /// The blanked text from `offset` into this line to the end of the `{…}` that starts there, and where
    /// that is in the whole text.
    fn braced(&self, offset: usize) -> Option<(usize, usize)> {
        let from = self.at + offset;
        let mut depth = 0usize;
        for (i, c) in self.blanked[from..].char_indices() {
            match c {
                '{' | '(' | '[' => depth += 1,
                '}' | ')' | ']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return Some((from + 1, from + i));
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// The identifier `s` starts with.
fn ident(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(s.len());
    let name = &s[..end];
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

/// `s` without the word `word` it starts with (and the spaces after it).
fn strip_word<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(word)?;
    (ident(rest).is_none() && !rest.starts_with('!')).then(|| rest.trim_start())
}

const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

fn python_line(line: &Line, names: &mut Names) {
    let code = line.code.trim_end();
    // Top-level statements start in column zero; an indented line is a block's body or a continuation.
    if code.is_empty() || code.starts_with(char::is_whitespace) {
        return;
    }
    let rest = strip_word(code, "async").unwrap_or(code);
    for definer in ["def", "class"] {
        if let Some(name) = strip_word(rest, definer).and_then(ident) {
            names.defined.insert(name.to_string());
            return;
        }
    }
    // `a = …`, `a, b = …`, `A: int = …`; not `a == …`, `a += …`, `a.b = …`.
    let mut targets = Vec::new();
    let mut rest = code;
    loop {
        let Some(name) = ident(rest) else { return };
        if PYTHON_KEYWORDS.contains(&name) {
            return;
        }
        targets.push(name);
        rest = rest[name.len()..].trim_start();
        match rest.strip_prefix(',') {
            Some(more) => rest = more.trim_start(),
            None => break,
        }
    }
    if let Some(typed) = rest.strip_prefix(':') {
        match typed.find('=') {
            Some(eq) if targets.len() == 1 => rest = &typed[eq..],
            _ => return,
        }
    }
    if rest.starts_with('=') && !rest.starts_with("==") {
        names
            .defined
            .extend(targets.into_iter().map(str::to_string));
    }
}

fn js_line(line: &Line, names: &mut Names) {
    let code = line.code.trim();
    let lead = line.code.len() - line.code.trim_start().len();
    let mut rest = code;
    let exported = match strip_word(rest, "export") {
        Some(r) => {
            rest = r;
            true
        }
        None => false,
    };
    let default = match strip_word(rest, "default") {
        Some(r) => {
            rest = r;
            true
        }
        None => false,
    };
    for modifier in ["declare", "abstract", "async"] {
        rest = strip_word(rest, modifier).unwrap_or(rest);
    }
    rest = strip_word(rest, "const")
        .filter(|r| r.starts_with("enum"))
        .unwrap_or(rest);
    let add = |name: &str, names: &mut Names| {
        names.defined.insert(name.to_string());
        if exported {
            names.exported.insert(name.to_string());
        }
    };
    if let Some(after) = rest.strip_prefix("function") {
        let after = after.trim_start().trim_start_matches('*').trim_start();
        match ident(after) {
            Some(name) if ident(rest) == Some("function") => add(name, names),
            _ if default => {
                names.exported.insert("default".into());
            }
            _ => {}
        }
        return;
    }
    for definer in [
        "class",
        "const",
        "let",
        "var",
        "interface",
        "type",
        "enum",
        "namespace",
    ] {
        if let Some(name) = strip_word(rest, definer).and_then(ident) {
            add(name, names);
            return;
        }
    }
    if default {
        names.exported.insert("default".into());
        return;
    }
    if exported {
        // `export { a, b as c } [from '…']`, `export * as ns from '…'`.
        if rest.starts_with('{') {
            let offset = lead + (code.len() - rest.len());
            if let Some((from, to)) = line.braced(offset) {
                for item in line.blanked[from..to].split(',') {
                    let mut words = item.split_whitespace();
                    let (first, second, third) = (words.next(), words.next(), words.next());
                    match (first, second, third) {
                        (Some(_), Some("as"), Some(alias)) => names.exported.insert(alias.into()),
                        (Some(name), None, _) => names.exported.insert(name.into()),
                        _ => false,
                    };
                }
            }
        } else if let Some(alias) = rest
            .strip_prefix('*')
            .and_then(|r| strip_word(r.trim_start(), "as"))
            .and_then(ident)
        {
            names.exported.insert(alias.into());
        }
        return;
    }
    // `exports.x = …`, `module.exports.x = …`, `module.exports = { a, b: c, d() {} }`.
    let target = rest.strip_prefix("module.").unwrap_or(rest);
    let Some(after) = target.strip_prefix("exports") else {
        return;
    };
    if let Some(prop) = after.strip_prefix('.') {
        if let Some(name) = ident(prop) {
            if prop[name.len()..].trim_start().starts_with('=') {
                names.exported.insert(name.into());
            }
        }
    } else if let Some(value) = after.trim_start().strip_prefix('=') {
        let value = value.trim_start();
        if value.starts_with('{') {
            let offset = lead + (code.len() - value.len());
            if let Some((from, to)) = line.braced(offset) {
                names.exported.extend(object_keys(line, from, to));
            }
        }
    }
}

/// The keys of the object literal whose inside is `from..to` of the text.
fn object_keys(line: &Line, from: usize, to: usize) -> Vec<String> {
    let mut keys = Vec::new();
    let mut depth = 0usize;
    let mut start = from;
    let body = &line.blanked[from..to];
    let mut entries = Vec::new();
    for (i, c) in body.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                entries.push((start, from + i));
                start = from + i + 1;
            }
            _ => {}
        }
    }
    entries.push((start, to));
    for (s, e) in entries {
        let code = &line.blanked[s..e];
        let lead = code.len() - code.trim_start().len();
        let mut entry = code.trim();
        for prefix in ["async", "get", "set"] {
            if let Some(r) = strip_word(entry, prefix).filter(|r| ident(r).is_some()) {
                entry = r;
            }
        }
        entry = entry.trim_start_matches('*').trim_start();
        if let Some(name) = ident(entry) {
            keys.push(name.to_string());
        } else if entry.starts_with(['"', '\'']) {
            // A quoted key: its text is blanked here, so it is read from the original.
            let at = s + lead + (code.trim().len() - entry.len()) + 1;
            if let Some(len) = line.blanked[at..e].find(['"', '\'']) {
                keys.push(line.text[at..at + len].to_string());
            }
        }
    }
    keys
}

fn rust_line(line: &Line, names: &mut Names) {
    let mut rest = line.code.trim();
    // Attributes on the item's own line: `#[derive(Debug)] pub struct S;`.
    while rest.starts_with("#[") || rest.starts_with("#![") {
        let Some(end) = balanced_end(rest) else {
            return;
        };
        rest = rest[end..].trim_start();
    }
    let mut exported = false;
    if let Some(r) = strip_word(rest, "pub") {
        exported = true;
        rest = r;
        if rest.starts_with('(') {
            let Some(end) = balanced_end(rest) else {
                return;
            };
            rest = rest[end..].trim_start();
        }
    }
    if let Some(tree) = strip_word(rest, "use") {
        if exported {
            names.exported.extend(use_leaves(tree));
        }
        return;
    }
    loop {
        let before = rest;
        for modifier in ["default", "async", "unsafe"] {
            rest = strip_word(rest, modifier).unwrap_or(rest);
        }
        if let Some(r) = strip_word(rest, "extern") {
            // The ABI string is blanked: `extern "  " fn`.
            rest = r
                .strip_prefix('"')
                .map_or(r, |s| s.find('"').map_or(s, |e| s[e + 1..].trim_start()));
        }
        if let Some(r) = strip_word(rest, "const").filter(|r| {
            ["fn", "unsafe", "async", "extern"]
                .iter()
                .any(|w| strip_word(r, w).is_some())
        }) {
            rest = r;
        }
        if rest == before {
            break;
        }
    }
    if let Some(name) = rest
        .strip_prefix("macro_rules!")
        .map(str::trim_start)
        .and_then(ident)
    {
        names.defined.insert(name.into());
        return;
    }
    for definer in [
        "fn", "struct", "enum", "trait", "type", "mod", "union", "const", "static",
    ] {
        let Some(mut after) = strip_word(rest, definer) else {
            continue;
        };
        if definer == "static" {
            after = strip_word(after, "mut").unwrap_or(after);
        }
        if let Some(name) = ident(after).filter(|n| *n != "_") {
            names.defined.insert(name.into());
            if exported {
                names.exported.insert(name.into());
            }
        }
        return;
    }
}

/// The end of the bracketed group `s` starts with (`#[…]`, `(crate)`), past its closing bracket.
fn balanced_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The names a `use` tree on one line brings in: `a::b` → `b`, `a::{b, c as d}` → `b`, `d`.
fn use_leaves(tree: &str) -> Vec<String> {
    let tree = tree.split(';').next().unwrap_or(tree);
    tree.split(['{', '}', ','])
        .filter_map(|part| {
            let part = part.trim();
            let leaf = match part.rsplit_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => part.rsplit("::").next().unwrap_or(part),
            };
            ident(leaf)
                .filter(|l| *l == leaf && !matches!(*l, "self" | "super" | "crate"))
                .map(str::to_string)
        })
        .collect()
}
