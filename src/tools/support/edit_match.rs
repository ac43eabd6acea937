//! Where an `edit`'s `old_text` is in a file, forgiving the near-misses models make (Aider's and Codex's lessons):
//! an exact match first, then — one rung at a time, each needing a single match — ignoring trailing whitespace,
//! as a uniformly re-indented block, ignoring each line's leading and trailing whitespace, and with Unicode
//! quotes, dashes and spaces normalised. Whole lines are compared on the fuzzy rungs (a one-line `old_text` may also match
//! inside a line). The match says which rule found it, and the replacement is re-indented when the file's
//! indentation differs from the model's.
//!
//! A miss is answered with what helps the next try: the closest real lines with their line numbers, and whether
//! the new text is already in the file. Several matches are answered with their line numbers.

/// Which rule found the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Exact,
    TrailingWhitespace,
    LineWhitespace,
    Unicode,
    Reindented,
}

impl Rule {
    /// How the result names the rule (`None` for an exact match: nothing to say).
    pub fn note(self) -> Option<&'static str> {
        match self {
            Rule::Exact => None,
            Rule::TrailingWhitespace => Some("matched after ignoring trailing whitespace"),
            Rule::LineWhitespace => {
                Some("matched after ignoring each line's leading and trailing whitespace")
            }
            Rule::Unicode => Some("matched after normalising Unicode quotes, dashes and spaces"),
            Rule::Reindented => Some("matched as a re-indented block"),
        }
    }
}

/// A found `old_text`: the byte span it covers in the text and what to put there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    pub replacement: String,
    pub rule: Rule,
}

/// Why `old_text` was not found once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// Nowhere, by any rule.
    NotFound,
    /// More than once (1-indexed line numbers of the starts), by `rule`.
    Ambiguous { lines: Vec<usize>, rule: Rule },
}

/// Where `needle` starts in `haystack`, overlapping occurrences included ("aa" occurs twice in "aaa").
pub fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        let at = from + pos;
        found.push(at);
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    found
}

/// The 1-indexed line of byte offset `at`.
pub fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// Quotes, dashes and spaces as ASCII (what models type for what editors write).
fn normalise_char(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201a}' | '\u{201b}' | '\u{2032}' => '\'',
        '\u{201c}' | '\u{201d}' | '\u{201e}' | '\u{201f}' | '\u{2033}' => '"',
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2212}' => '-',
        '\u{00a0}' | '\u{2002}' | '\u{2003}' | '\u{2007}' | '\u{2009}' | '\u{202f}'
        | '\u{3000}' => ' ',
        '\u{2026}' => '.',
        c => c,
    }
}

fn normalise(s: &str) -> String {
    s.chars().map(normalise_char).collect()
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// The lines of `text` with the byte offset each starts at.
fn lines_with_offsets(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split('\n') {
        out.push((at, line));
        at += line.len() + 1;
    }
    out
}

/// `new` re-indented from `old_indent` to `file_indent`: lines that begin with `old_indent` get `file_indent`
/// instead, lines indented less than it (the model's indentation was off line by line) get `file_indent`
/// before their text; blank lines are left as they are.
fn reindent(new: &str, old_indent: &str, file_indent: &str) -> String {
    if old_indent == file_indent {
        return new.to_string();
    }
    new.split('\n')
        .map(|l| match l.strip_prefix(old_indent) {
            _ if l.trim().is_empty() => l.to_string(),
            Some(rest) => format!("{file_indent}{rest}"),
            None => format!("{file_indent}{}", l.trim_start()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Finds `old` in `text` (both LF-normalised) and says what replaces it with `new`.
pub fn find(text: &str, old: &str, new: &str) -> Result<Found, Miss> {
    let exact = occurrences(text, old);
    match exact.len() {
        1 => {
            return Ok(Found {
                start: exact[0],
                end: exact[0] + old.len(),
                replacement: new.to_string(),
                rule: Rule::Exact,
            })
        }
        0 => {}
        _ => {
            return Err(Miss::Ambiguous {
                lines: exact.iter().map(|&at| line_of(text, at)).collect(),
                rule: Rule::Exact,
            })
        }
    }
    let file = lines_with_offsets(text);
    let trailing_newline = old.ends_with('\n');
    let old_body = old.strip_suffix('\n').unwrap_or(old);
    let old_lines: Vec<&str> = old_body.split('\n').collect();
    if old_lines.iter().all(|l| l.trim().is_empty()) {
        return Err(Miss::NotFound);
    }
    type Eq = fn(&str, &str) -> bool;
    // The re-indented block (relative indentation kept) is tried before per-line whitespace, which it is
    // stricter than, so the result names the closer rule.
    let rungs: [(Rule, Eq); 4] = [
        (Rule::TrailingWhitespace, |f, o| {
            f.trim_end() == o.trim_end()
        }),
        (Rule::Reindented, |_, _| false),
        (Rule::LineWhitespace, |f, o| f.trim() == o.trim()),
        (Rule::Unicode, |f, o| {
            normalise(f.trim()) == normalise(o.trim())
        }),
    ];
    for (rule, eq) in rungs {
        let starts: Vec<usize> = match rule {
            Rule::Reindented => reindented_starts(&file, &old_lines),
            _ => (0..file.len().saturating_sub(old_lines.len() - 1))
                .filter(|&i| {
                    old_lines
                        .iter()
                        .enumerate()
                        .all(|(k, o)| eq(file[i + k].1, o))
                })
                .collect(),
        };
        match starts.len() {
            0 => {}
            1 => {
                let i = starts[0];
                let last = i + old_lines.len() - 1;
                let start = file[i].0;
                let mut end = file[last].0 + file[last].1.len();
                let mut replacement = new.to_string();
                if trailing_newline && end < text.len() {
                    end += 1;
                } else if let Some(stripped) = replacement.strip_suffix('\n') {
                    // The old text had no newline at its end, so the matched lines do not include one.
                    if !trailing_newline {
                        replacement = stripped.to_string();
                    }
                }
                if matches!(
                    rule,
                    Rule::LineWhitespace | Rule::Unicode | Rule::Reindented
                ) {
                    let first_old = old_lines
                        .iter()
                        .find(|l| !l.trim().is_empty())
                        .copied()
                        .unwrap_or("");
                    let k = old_lines
                        .iter()
                        .position(|l| !l.trim().is_empty())
                        .unwrap_or(0);
                    replacement =
                        reindent(&replacement, indent_of(first_old), indent_of(file[i + k].1));
                }
                return Ok(Found {
                    start,
                    end,
                    replacement,
                    rule,
                });
            }
            _ => {
                return Err(Miss::Ambiguous {
                    lines: starts.iter().map(|i| i + 1).collect(),
                    rule,
                })
            }
        }
        // A one-line old_text may sit inside a line: match it there with normalised Unicode and whitespace runs.
        if old_lines.len() == 1 && rule == Rule::Unicode {
            if let Some(found) = inside_a_line(text, old_lines[0], new)? {
                return Ok(found);
            }
        }
    }
    Err(Miss::NotFound)
}

/// Starts of windows whose lines equal `old`'s after removing one common indentation from each side.
fn reindented_starts(file: &[(usize, &str)], old: &[&str]) -> Vec<usize> {
    let common = |lines: &mut dyn Iterator<Item = &str>| -> usize {
        lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0)
    };
    let old_cut = common(&mut old.iter().copied());
    let strip = |l: &str, n: usize| -> String {
        if l.trim().is_empty() {
            String::new()
        } else {
            l.get(n.min(l.len() - l.trim_start().len())..)
                .unwrap_or(l)
                .trim_end()
                .to_string()
        }
    };
    let old_norm: Vec<String> = old.iter().map(|l| strip(l, old_cut)).collect();
    (0..file.len().saturating_sub(old.len() - 1))
        .filter(|&i| {
            let window: Vec<&str> = file[i..i + old.len()].iter().map(|(_, l)| *l).collect();
            let cut = common(&mut window.iter().copied());
            window
                .iter()
                .zip(&old_norm)
                .all(|(f, o)| strip(f, cut) == *o)
        })
        .collect()
}

/// A one-line `old` inside a line of `text`, comparing with Unicode normalised and whitespace runs collapsed.
fn inside_a_line(text: &str, old: &str, new: &str) -> Result<Option<Found>, Miss> {
    let squash = |s: &str| -> String {
        normalise(s)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let target = squash(old);
    if target.is_empty() {
        return Ok(None);
    }
    let mut hits = Vec::new();
    for (offset, line) in lines_with_offsets(text) {
        // Try every start at a character boundary; lines are short, so this stays cheap.
        for (s, _) in line.char_indices() {
            if line[s..].starts_with(char::is_whitespace) {
                continue;
            }
            let mut end = None;
            for (e, c) in line[s..]
                .char_indices()
                .map(|(i, c)| (s + i + c.len_utf8(), c))
            {
                let _ = c;
                let got = squash(&line[s..e]);
                if got == target {
                    end = Some(e);
                    break;
                }
                if !target.starts_with(&got) {
                    break;
                }
            }
            if let Some(e) = end {
                hits.push((offset + s, offset + e));
            }
        }
    }
    match hits.len() {
        0 => Ok(None),
        1 => Ok(Some(Found {
            start: hits[0].0,
            end: hits[0].1,
            replacement: new.to_string(),
            rule: Rule::Unicode,
        })),
        _ => Err(Miss::Ambiguous {
            lines: hits.iter().map(|(s, _)| line_of(text, *s)).collect(),
            rule: Rule::Unicode,
        }),
    }
}

/// The lines of `text` most like `old` (a window of as many lines, scored by character similarity), with one line
/// of context each side, numbered: what the model should have copied. `None` for an empty file.
pub fn closest_lines(text: &str, old: &str) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    if text.trim().is_empty() {
        return None;
    }
    let n = old
        .trim_end_matches('\n')
        .split('\n')
        .count()
        .clamp(1, lines.len());
    let target = normalise(old.trim());
    let mut best = (0.0f32, 0usize);
    for i in 0..=lines.len() - n {
        let window = lines[i..i + n].join("\n");
        let score =
            similar::TextDiff::from_chars(normalise(window.trim()).as_str(), target.as_str())
                .ratio();
        if score > best.0 {
            best = (score, i);
        }
    }
    let (from, to) = (best.1.saturating_sub(1), (best.1 + n + 1).min(lines.len()));
    let width = to.to_string().len();
    Some(
        (from..to)
            .map(|i| format!("{:>width$} | {}", i + 1, lines[i]))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: &str = "def add(a, b):\n    return a - b\n\n\nclass K:\n    def m(self):\n        x = \"hi\"  \n        return x\n";

    fn apply(text: &str, f: &Found) -> String {
        format!("{}{}{}", &text[..f.start], f.replacement, &text[f.end..])
    }

    #[test]
    fn every_rung_finds_its_near_miss() {
        let f = find(PY, "return a - b", "return a + b").unwrap();
        assert_eq!(f.rule, Rule::Exact);
        // Trailing whitespace in the file, not in old_text.
        let f = find(
            PY,
            "        x = \"hi\"\n        return x",
            "        x = \"ho\"\n        return x",
        )
        .unwrap();
        assert_eq!(f.rule, Rule::TrailingWhitespace);
        assert!(apply(PY, &f).contains("x = \"ho\"\n        return x\n"));
        // Indentation wrong line by line (not one uniform shift): found, and the replacement takes the file's.
        let f = find(PY, "  x = \"hi\"\nreturn x", "  x = \"ho\"\nreturn x").unwrap();
        assert_eq!(f.rule, Rule::LineWhitespace);
        assert!(
            apply(PY, &f).contains("        x = \"ho\"\n        return x"),
            "{}",
            apply(PY, &f)
        );
        // Curly quotes typed for straight ones.
        let f = find(PY, "x = \u{201c}hi\u{201d}", "x = \"yo\"").unwrap();
        assert_eq!(f.rule, Rule::Unicode);
        assert!(apply(PY, &f).contains("        x = \"yo\""));
        // A block re-indented as a whole (relative indentation kept).
        let block = "def m(self):\n    x = \"hi\"\n    return x";
        let f = find(PY, block, "def m(self):\n    return 1").unwrap();
        assert_eq!(f.rule, Rule::Reindented);
        let out = apply(PY, &f);
        assert!(
            out.contains("class K:\n    def m(self):\n        return 1\n"),
            "{out}"
        );
    }

    #[test]
    fn misses_and_ambiguities_say_where() {
        assert_eq!(find(PY, "return a * b", "x"), Err(Miss::NotFound));
        let twice = "a = 1\nb = 2\na = 1\n";
        assert_eq!(
            find(twice, "a = 1", "a = 3"),
            Err(Miss::Ambiguous {
                lines: vec![1, 3],
                rule: Rule::Exact
            })
        );
        let near = closest_lines(PY, "return a * b").unwrap();
        assert!(near.contains("2 |     return a - b"), "{near}");
    }
}
