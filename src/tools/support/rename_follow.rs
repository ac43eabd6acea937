//! A rename the model started and did not finish. When a change renames exactly one definition of a file
//! (`def calc_total` became `def total_price`, `class Usr` became `class User`, `TIMEOUT = 5` became
//! `TIMEOUT_SECONDS = 5`) and the old name is defined nowhere any more, every use of the old name left behind is a
//! broken reference. Small models leave them, call the task done, and ignore a hint that another file still uses
//! the old name.
//!
//! So, for `write_block` ([`crate::tools::write_block`]): the uses left in the file the block was written to are renamed
//! with it (that file's change was the approved call; the result says which lines), and for the other files of
//! the workspace that still use the old name the result shows their text with the new name, ready to be written
//! back as blocks (their own calls, approved as any other). Nothing happens when the old name is still defined
//! somewhere (another file's definition may be the one those uses mean), when the new name was already in the
//! file, or when the change renamed more than one definition.

use std::collections::BTreeSet;
use std::path::Path;

use super::workspace::WorkspaceState;

/// Words shorter than this are not followed (`i`, `x`, `df`: too likely to mean other things).
const MIN_NAME: usize = 3;
/// Files scanned for uses and definitions.
const MAX_FILES: usize = 500;
/// Files larger than this are not scanned.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Other files whose renamed text a result shows.
const MAX_SHOWN: usize = 3;

/// Keywords that define the name after them, at any indentation (methods and nested functions included).
const DEFINERS: [&str; 12] = [
    "def",
    "class",
    "function",
    "fn",
    "struct",
    "enum",
    "trait",
    "interface",
    "func",
    "type",
    "module",
    "macro_rules!",
];
/// Keywords that define the name after them only at the top level (a local `let x` is not followed).
const TOP_DEFINERS: [&str; 5] = ["const", "let", "var", "static", "val"];
/// Prefixes a definition line may carry.
const MODIFIERS: [&str; 6] = ["export", "pub", "async", "default", "public", "private"];

/// The names `text` defines (see [`DEFINERS`]; also `NAME = …` and `NAME: T = …` at the top level).
pub fn definitions(text: &str) -> BTreeSet<String> {
    text.lines().filter_map(defined_name).collect()
}

fn defined_name(line: &str) -> Option<String> {
    let top = !line.starts_with([' ', '\t']);
    let mut rest = line.trim_start();
    loop {
        let word = rest.split_whitespace().next()?;
        if MODIFIERS.contains(&word) || word.starts_with("pub(") {
            rest = rest[word.len()..].trim_start();
            continue;
        }
        if DEFINERS.contains(&word) || (top && TOP_DEFINERS.contains(&word)) {
            let after = rest[word.len()..].trim_start();
            return identifier_prefix(after.strip_prefix("mut ").unwrap_or(after));
        }
        break;
    }
    if !top {
        return None;
    }
    // `NAME = value` / `NAME: int = value`, not `NAME == value` or a call.
    let name = identifier_prefix(rest)?;
    let after = rest[name.len()..].trim_start();
    let after = match after.strip_prefix(':') {
        Some(typed) => &typed[typed.find('=')?..],
        None => after,
    };
    (after.starts_with('=') && !after.starts_with("==")).then_some(name)
}

/// The identifier `s` starts with (3+ characters, not starting with a digit).
fn identifier_prefix(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let name = &s[..end];
    (name.chars().count() >= MIN_NAME && name.starts_with(|c: char| c.is_alphabetic() || c == '_'))
        .then(|| name.to_string())
}

/// Whether `word` occurs in `text` as a whole word.
pub fn uses_word(text: &str, word: &str) -> bool {
    word_spans(text, word).next().is_some()
}

fn word_spans<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        (!before.is_some_and(is_word) && !after.is_some_and(is_word)).then_some(at)
    })
}

/// `text` with every whole-word `from` replaced by `to`, and the (1-based) lines that changed.
pub fn rename_word(text: &str, from: &str, to: &str) -> (String, Vec<usize>) {
    let spans: Vec<usize> = word_spans(text, from).collect();
    let mut out = String::with_capacity(text.len());
    let mut lines = Vec::new();
    let mut last = 0;
    for at in spans {
        out.push_str(&text[last..at]);
        out.push_str(to);
        last = at + from.len();
        let line = text[..at].matches('\n').count() + 1;
        if lines.last() != Some(&line) {
            lines.push(line);
        }
    }
    out.push_str(&text[last..]);
    (out, lines)
}

/// The one definition `old` → `new` renamed: `(old name, new name)`. `None` when no definition or more than one
/// was renamed, or when the new name was already used in `old`.
pub fn renamed_definition(old: &str, new: &str) -> Option<(String, String)> {
    let (before, after) = (definitions(old), definitions(new));
    let mut gone = before.difference(&after);
    let mut came = after.difference(&before);
    let (from, to) = (gone.next()?, came.next()?);
    if gone.next().is_some() || came.next().is_some() || uses_word(old, to) {
        return None;
    }
    Some((from.clone(), to.clone()))
}

/// A rename followed through: the file's text with its leftover uses renamed, and what to tell the model.
pub struct Followed {
    /// The written file's text with the old name's remaining uses renamed.
    pub text: String,
    /// The lines of that file renamed (1-based; empty when none were left).
    pub lines: Vec<usize>,
    /// The result's paragraph: what was renamed here and the other files' renamed text.
    pub note: String,
}

/// Follows the rename `old` → `new` of the file `this` (named `label`) through: `None` when the change renamed no
/// single definition, or the old name is still defined in the workspace, or no use of it is left anywhere.
pub fn follow(
    state: Option<&WorkspaceState>,
    this: &Path,
    label: &str,
    old: &str,
    new: &str,
) -> Option<Followed> {
    let (from, to) = renamed_definition(old, new)?;
    let mut others: Vec<(String, String)> = Vec::new();
    if let Some(state) = state {
        for (rel, text) in state.other_texts(this, MAX_FILES, MAX_FILE_BYTES) {
            if !uses_word(&text, &from) {
                continue;
            }
            if definitions(&text).contains(&from) {
                // Still defined there: the uses may mean that definition.
                return None;
            }
            others.push((rel, text));
        }
    }
    let (text, lines) = rename_word(new, &from, &to);
    if lines.is_empty() && others.is_empty() {
        return None;
    }
    let mut note = String::new();
    if !lines.is_empty() {
        note.push_str(&format!(
            "\nYour block renamed `{from}` to `{to}`; the other uses of `{from}` in {label} were renamed too ({}).",
            lines_phrase(&lines)
        ));
    }
    if !others.is_empty() {
        let names: Vec<&str> = others.iter().map(|(f, _)| f.as_str()).collect();
        note.push_str(&format!(
            "\n`{from}` is no longer defined, but {} still {} it. With the new name {} read:",
            names.join(", "),
            if others.len() == 1 { "uses" } else { "use" },
            if others.len() == 1 {
                "it would"
            } else {
                "they would"
            },
        ));
        for (rel, text) in others.iter().take(MAX_SHOWN) {
            let (renamed, _) = rename_word(text, &from, &to);
            note.push_str(&format!(
                "\n\n{rel}\n{}",
                super::truncate::shown_file(&renamed)
            ));
        }
        note.push_str(&format!(
            "\n\nWrite {} with the new name to finish the rename.",
            names.join(" and ")
        ));
    }
    Some(Followed { text, lines, note })
}

/// `[3]` → "line 3", `[3, 9]` → "lines 3, 9".
fn lines_phrase(lines: &[usize]) -> String {
    let list: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let word = if lines.len() == 1 { "line" } else { "lines" };
    format!("{word} {}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_of_several_languages() {
        let text = "import os\nTIMEOUT = 5\nLIMIT: int = 3\nx == 4\nprint(TIMEOUT)\n\ndef calc_total(items):\n    \
                    tmp = 0\n    def inner():\n        pass\nclass Usr:\n    def label(self):\n        pass\n\
                    export function subtract(a, b) {}\nconst PORT = 80;\npub fn parse_args() {}\n";
        let defs: Vec<String> = definitions(text).into_iter().collect();
        assert_eq!(
            defs,
            [
                "LIMIT",
                "PORT",
                "TIMEOUT",
                "Usr",
                "calc_total",
                "inner",
                "label",
                "parse_args",
                "subtract"
            ]
        );
    }

    #[test]
    fn one_renamed_definition_is_found_and_others_are_not_renames() {
        let old = "def calc_total(items):\n    return 1\n\n\ndef receipt(items):\n    return calc_total(items)\n";
        let new = "def total_price(items):\n    return 1\n\n\ndef receipt(items):\n    return calc_total(items)\n";
        assert_eq!(
            renamed_definition(old, new),
            Some(("calc_total".into(), "total_price".into()))
        );
        // Two definitions renamed at once, a definition only added, a new name already in use: not followed.
        let two = "def a_total(items):\n    return 1\n\n\ndef b_receipt(items):\n    return calc_total(items)\n";
        assert_eq!(renamed_definition(old, two), None);
        assert_eq!(
            renamed_definition(old, &format!("{old}\n\ndef more():\n    pass\n")),
            None
        );
        let reuse = "def items(items):\n    return 1\n\n\ndef receipt(items):\n    return calc_total(items)\n";
        assert_eq!(renamed_definition(old, reuse), None);
    }

    #[test]
    fn whole_words_only() {
        let (text, lines) = rename_word(
            "calc_total(x)\nmy_calc_total = calc_totals\n# calc_total here\n",
            "calc_total",
            "total_price",
        );
        assert_eq!(
            text,
            "total_price(x)\nmy_calc_total = calc_totals\n# total_price here\n"
        );
        assert_eq!(lines, [1, 3]);
    }

    #[test]
    fn the_rename_is_followed_in_this_file_and_shown_for_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models.py");
        let old = "class Usr:\n    pass\n\n\ndef make():\n    return Usr()\n";
        let new = "class User:\n    pass\n\n\ndef make():\n    return Usr()\n";
        std::fs::write(&models, new).unwrap();
        std::fs::write(
            dir.path().join("service.py"),
            "from models import Usr\n\nu = Usr()\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("other.py"), "print(1)\n").unwrap();
        let state = WorkspaceState::new(dir.path());
        let done = follow(Some(&state), &models, "models.py", old, new).unwrap();
        assert_eq!(
            done.text,
            "class User:\n    pass\n\n\ndef make():\n    return User()\n"
        );
        assert_eq!(done.lines, [6]);
        assert!(done.note.contains("line 6"), "{}", done.note);
        assert!(
            done.note
                .contains("service.py\n```\nfrom models import User\n\nu = User()\n```"),
            "{}",
            done.note
        );
        assert!(!done.note.contains("other.py"), "{}", done.note);

        // Still defined in another file: nothing is followed.
        std::fs::write(dir.path().join("legacy.py"), "class Usr:\n    pass\n").unwrap();
        let state = WorkspaceState::new(dir.path());
        assert!(follow(Some(&state), &models, "models.py", old, new).is_none());
    }
}
