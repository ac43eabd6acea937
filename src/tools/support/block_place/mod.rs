//! Where a file block goes in the file it names (the "file blocks" edit format: the model writes a file's new
//! text in a fenced block, whole or only the part it changes). Small models often write just the function they
//! fixed, or the whole file minus its last function; taken as the whole file, such a block would delete
//! everything it left out. So the block is placed, not pasted:
//!
//! - the block's lines are aligned with the file's (Smith–Waterman local alignment over lines: an equal line
//!   scores high, a similar line — the line the block changed — lower, anything else costs), which finds the
//!   run of the file the block rewrites;
//! - that run is replaced by the whole block, and the file's lines before and after it stay as they were
//!   (lines a block leaves out at its ends are kept, never deleted; lines it leaves out *between* lines it
//!   matched are deleted, as it wrote them);
//! - a block that matches nothing is the whole new file when it is about as long as the file (or the file is
//!   tiny), else it is added at the end (a new function, a new key).
//!
//! Pure text in, text out; the `write_block` tool writes the result.

use similar::{ChangeTag, TextDiff};

/// How a block was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The block is the whole new file.
    Whole,
    /// The block replaced lines `start..=end` (1-based, of the old file); the lines around them were kept.
    Region { start: usize, end: usize },
    /// The block matched no line and was added after the last line.
    Appended,
}

/// The new text of a file and how the block was placed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub text: String,
    pub placement: Placement,
    /// Old lines (1-based) between matched lines that the block left out: deleted.
    pub deleted: Vec<usize>,
}

/// Score of two equal (non-blank) lines.
const EQUAL: f32 = 2.0;
/// Score of two equal blank lines (they anchor nothing on their own).
const EQUAL_BLANK: f32 = 0.25;
/// Score of two similar lines (one is the other, changed).
const SIMILAR: f32 = 1.0;
/// Score of two unrelated lines set against each other.
const MISMATCH: f32 = -1.0;
/// Cost of a line on one side only.
const GAP: f32 = -0.6;
/// Cost of a blank line on one side only.
const GAP_BLANK: f32 = -0.2;
/// How alike two lines must be (0..1, by characters) to count as one line changed.
const SIMILAR_RATIO: f32 = 0.6;
/// Lines up to this many characters are short: they must be more alike to count as one line changed.
const SHORT_LINE: usize = 16;
/// How alike two short lines must be.
const SHORT_SIMILAR_RATIO: f32 = 0.75;
/// Above this many line pairs only equal lines are compared (similarity costs a character diff per pair).
const MAX_FUZZY_PAIRS: usize = 400_000;
/// Above this many line pairs the alignment is not attempted: the block is the whole file.
const MAX_PAIRS: usize = 25_000_000;
/// Lines longer than this are only compared for equality.
const MAX_FUZZY_LINE: usize = 400;

/// Places `block` in `old` (see the module docs). Both are LF text; the result ends with a newline when the
/// block or the kept tail does.
pub fn place(old: &str, block: &str) -> Placed {
    let whole = || Placed {
        text: block.to_string(),
        placement: Placement::Whole,
        deleted: Vec::new(),
    };
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = block.lines().collect();
    let content_lines = a.iter().filter(|l| !l.trim().is_empty()).count();
    if content_lines == 0 || b.is_empty() || a.len() * b.len() > MAX_PAIRS {
        return whole();
    }
    let Some(span) = align(&a, &b).or_else(|| same_key(&a, &b)) else {
        // Nothing matches: a rewrite of a short file, or something new — a block that only defines names the
        // file does not define, in a file that defines others, is new (a function added).
        let block_lines = b.iter().filter(|l| !l.trim().is_empty()).count();
        let (old_defs, new_defs) = (defined_names(&a), defined_names(&b));
        let adds = !old_defs.is_empty() && !new_defs.is_empty() && old_defs.is_disjoint(&new_defs)
            || adds_assignments(&a, &b);
        if !adds && (content_lines <= 3 || block_lines * 2 >= content_lines) {
            return whole();
        }
        let mut text = old.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        if !text.ends_with("\n\n") {
            text.push('\n');
        }
        text.push_str(block);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        return Placed {
            text,
            placement: Placement::Appended,
            deleted: Vec::new(),
        };
    };
    let (i0, i1) = span.old;
    let i1 = i1 + dead_after(&b, &a[i1..]);
    if i0 == 0 && i1 == a.len() {
        return Placed {
            deleted: span.deleted,
            ..whole()
        };
    }
    let mut out = String::with_capacity(old.len() + block.len());
    for line in &a[..i0] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(block);
    if !block.ends_with('\n') {
        out.push('\n');
    }
    for line in &a[i1..] {
        out.push_str(line);
        out.push('\n');
    }
    if i1 == a.len() && !block.ends_with('\n') || i1 < a.len() && !old.ends_with('\n') {
        out.pop();
    }
    Placed {
        text: out,
        placement: Placement::Region {
            start: i0 + 1,
            end: i1,
        },
        deleted: span.deleted,
    }
}

/// How many of the old lines after the block's span the block's last line makes unreachable: a block that ends
/// in `return`/`raise`/`throw` (a stub's new body) ends its suite, so the old lines of that suite after it (up to
/// the first line indented less) would be dead code if kept.
fn dead_after(block: &[&str], rest: &[&str]) -> usize {
    let Some(last) = block.iter().rev().find(|l| !l.trim().is_empty()) else {
        return 0;
    };
    let word = last
        .trim_start()
        .split([' ', ';', '('])
        .next()
        .unwrap_or("");
    if !matches!(word, "return" | "raise" | "throw") {
        return 0;
    }
    let level = indent(last);
    // An unindented one (a fragment without its indentation) says nothing of the suite it ends.
    if level == 0 {
        return 0;
    }
    let mut end = 0;
    for (k, line) in rest.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if indent(line) < level {
            break;
        }
        end = k + 1;
    }
    // Only a statement at the block's own level makes the run dead code (deeper lines alone belong to it).
    match rest[..end]
        .iter()
        .any(|l| !l.trim().is_empty() && indent(l) == level)
    {
        true => end,
        false => 0,
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The best local alignment of `b` in `a`: the old lines `old.0..old.1` it covers and the old lines inside that
/// no block line stands for. `None` when no line matches.
struct Span {
    old: (usize, usize),
    new: (usize, usize),
    deleted: Vec<usize>,
}

fn align(a: &[&str], b: &[&str]) -> Option<Span> {
    let fuzzy = a.len() * b.len() <= MAX_FUZZY_PAIRS;
    let (n, m) = (a.len(), b.len());
    let w = m + 1;
    // Scores and the move that reached each cell (0 start, 1 diagonal, 2 up = old line skipped, 3 left).
    let mut h = vec![0f32; (n + 1) * w];
    let mut mv = vec![0u8; (n + 1) * w];
    let mut best = (0f32, 0usize, 0usize);
    for i in 1..=n {
        for j in 1..=m {
            let s = score(a[i - 1], b[j - 1], fuzzy);
            let diag = h[(i - 1) * w + j - 1] + s;
            let up = h[(i - 1) * w + j] + gap(a[i - 1]);
            let left = h[i * w + j - 1] + gap(b[j - 1]);
            let (v, k) = [(0.0, 0u8), (diag, 1), (up, 2), (left, 3)]
                .into_iter()
                .fold((0.0f32, 0u8), |acc, x| if x.0 > acc.0 { x } else { acc });
            h[i * w + j] = v;
            mv[i * w + j] = k;
            // On a tie the later cell wins: the span reaches as far as it is as good.
            if v > 0.0 && v >= best.0 {
                best = (v, i, j);
            }
        }
    }
    if best.0 < SIMILAR {
        return None;
    }
    let (mut i, mut j) = (best.1, best.2);
    let end = i;
    let mut deleted = Vec::new();
    let (mut exact, mut alike) = (0usize, 0usize);
    while i > 0 && j > 0 && h[i * w + j] > 0.0 {
        match mv[i * w + j] {
            1 => {
                let s = score(a[i - 1], b[j - 1], fuzzy);
                if s == EQUAL {
                    exact += 1;
                } else if s == SIMILAR {
                    alike += 1;
                }
                i -= 1;
                j -= 1;
            }
            2 => {
                i -= 1;
                deleted.push(i + 1);
            }
            3 => j -= 1,
            _ => break,
        }
    }
    // One similar line is a match only for a block of about that size (a changed setting), not for a new
    // function that happens to have a `return` like another one.
    let block_lines = b.iter().filter(|l| !l.trim().is_empty()).count();
    if exact == 0 && block_lines > 1 && alike * 2 <= block_lines {
        return None;
    }
    deleted.retain(|&line| !a[line - 1].trim().is_empty());
    deleted.reverse();
    let mut span = Span {
        old: (i, end),
        new: (j, best.2),
        deleted,
    };
    extend_edges(a, b, &mut span);
    let (lo, hi) = span.old;
    span.deleted.retain(|&line| line > lo && line <= hi);
    Some(span)
}

/// Narrows the span to its outermost non-blank matched lines (blank lines alone anchor nothing), then widens it
/// over block lines at its edges that stand for the old lines next to them, changed more than the alignment
/// accepts (a definition renamed: `def fmt_name(…)` → `def format_name(…)`): outwards, pair by pair, while a
/// pair starts with the same word and is alike by characters (blank pairs are crossed only on the way to one).
fn extend_edges(a: &[&str], b: &[&str], span: &mut Span) {
    let blank = |x: &str| x.trim().is_empty();
    while span.old.0 < span.old.1
        && span.new.0 < span.new.1
        && blank(a[span.old.0])
        && blank(b[span.new.0])
    {
        span.old.0 += 1;
        span.new.0 += 1;
    }
    while span.old.1 > span.old.0
        && span.new.1 > span.new.0
        && blank(a[span.old.1 - 1])
        && blank(b[span.new.1 - 1])
    {
        span.old.1 -= 1;
        span.new.1 -= 1;
    }
    let loosely_same = |x: &str, y: &str| {
        let (x, y) = (x.trim(), y.trim());
        if x.is_empty() || y.is_empty() {
            return false;
        }
        let (hx, hy) = (head(x), head(y));
        // A definition renamed (`def fmt_name(first, last):` → `def format_name(first, last):`).
        let renamed_definition =
            hx.len() > 1 && hx.first() == hy.first() && char_ratio(x, y) >= SIMILAR_RATIO;
        // A name renamed in a line otherwise the same (`TIMEOUT = 30` → `TIMEOUT_SECONDS = 30`).
        let renamed_name = match (hx.first(), hy.first()) {
            (Some(nx), Some(ny)) => x.replacen(nx, "", 1) == y.replacen(ny, "", 1),
            _ => false,
        };
        renamed_definition || renamed_name || similar_lines(x, y)
    };
    // Backwards: k pairs (blank ones, then one alike) at a time.
    loop {
        let mut k = 1;
        while k <= span.old.0
            && k <= span.new.0
            && blank(a[span.old.0 - k])
            && blank(b[span.new.0 - k])
        {
            k += 1;
        }
        if k <= span.old.0
            && k <= span.new.0
            && (loosely_same(a[span.old.0 - k], b[span.new.0 - k])
                || span.new.0 == k
                    && same_statement(a[span.old.0 - k], b[0])
                    && (span.old.0 == k || opens_scope(a[span.old.0 - k - 1], a[span.old.0 - k])))
        {
            span.old.0 -= k;
            span.new.0 -= k;
        } else {
            break;
        }
    }
    loop {
        let mut k = 0;
        while span.old.1 + k < a.len()
            && span.new.1 + k < b.len()
            && blank(a[span.old.1 + k])
            && blank(b[span.new.1 + k])
        {
            k += 1;
        }
        let (i, j) = (span.old.1 + k, span.new.1 + k);
        if i < a.len()
            && j < b.len()
            && (loosely_same(a[i], b[j])
                || j + 1 == b.len()
                    && same_statement(a[i], b[j])
                    && (i + 1 == a.len() || opens_scope(a[i], a[i + 1])))
        {
            span.old.1 += k + 1;
            span.new.1 += k + 1;
        } else {
            break;
        }
    }
}

/// Two lines that are one statement rewritten: the same indentation and the same first word (`    return 0` →
/// `    return util.double(21)`). Only trusted at a block's first or last line, where the scope ends too.
fn same_statement(x: &str, y: &str) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let (hx, hy) = (head(x.trim()), head(y.trim()));
    !x.trim().is_empty()
        && indent(x) == indent(y)
        && x[..indent(x)] == y[..indent(y)]
        && !hx.is_empty()
        && hx.first() == hy.first()
}

/// Whether `next` is outside the scope `line` is the last of: blank, or less indented.
fn opens_scope(line: &str, next: &str) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    next.trim().is_empty() || indent(next) < indent(line)
}

/// The names the top-level definitions of `lines` define (`def add`, `class Rect`, `function sub`, `fn main`).
fn defined_names<'a>(lines: &[&'a str]) -> std::collections::BTreeSet<&'a str> {
    lines
        .iter()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| {
            let h = head(l.trim());
            (h.len() > 1 && DEFINES.contains(&h[0])).then(|| h[h.len() - 1])
        })
        .collect()
}

/// A block of top-level assignments (`MAX_SIZE = 100`) for a file of them that assigns none of its names and
/// none of its values: new constants, added (a model asked to add `MAX_SIZE = 100` to a file holding
/// `MIN_SIZE = 1` may write only the new line). A name with a value the file already has is a rename
/// (`TIMEOUT = 30` → `TIMEOUT_SECONDS = 30`): not this.
fn adds_assignments(a: &[&str], b: &[&str]) -> bool {
    fn assignments<'a>(lines: &[&'a str]) -> Option<Vec<(&'a str, &'a str)>> {
        lines
            .iter()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| {
                let (name, value) = l.split_once('=')?;
                let name = name.trim_end();
                let top_level = !l.starts_with(char::is_whitespace);
                let ident = !name.is_empty()
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit());
                (top_level && ident && !value.starts_with('=')).then(|| (name, value.trim()))
            })
            .collect()
    }
    let (Some(old), Some(new)) = (assignments(a), assignments(b)) else {
        return false;
    };
    !old.is_empty()
        && !new.is_empty()
        && new
            .iter()
            .all(|(n, v)| old.iter().all(|(on, ov)| on != n && ov != v))
}

/// For a block of one line that matched nothing: the old line with the same key (`DEBUG=false` for
/// `DEBUG=true`), the most alike when several start alike.
fn same_key(a: &[&str], b: &[&str]) -> Option<Span> {
    let mut lines = b.iter().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (j, line) = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    let key = head(line.trim());
    if key.is_empty() {
        return None;
    }
    let mut best: Option<(f32, usize)> = None;
    let mut tie = false;
    for (i, old) in a.iter().enumerate() {
        if head(old.trim()) != key {
            continue;
        }
        let r = char_ratio(old.trim(), line.trim());
        match best {
            Some((s, _)) if r < s => {}
            Some((s, _)) if r == s => tie = true,
            _ => {
                best = Some((r, i));
                tie = false;
            }
        }
    }
    let (_, i) = best.filter(|_| !tie)?;
    Some(Span {
        old: (i, i + 1),
        new: (j, j + 1),
        deleted: Vec::new(),
    })
}

fn gap(line: &str) -> f32 {
    if line.trim().is_empty() {
        GAP_BLANK
    } else {
        GAP
    }
}

fn score(x: &str, y: &str, fuzzy: bool) -> f32 {
    let (tx, ty) = (x.trim_end(), y.trim_end());
    if tx == ty {
        return if tx.trim().is_empty() {
            EQUAL_BLANK
        } else {
            EQUAL
        };
    }
    let (sx, sy) = (tx.trim(), ty.trim());
    if sx.is_empty() || sy.is_empty() {
        return MISMATCH;
    }
    if sx == sy {
        // The same line, indented otherwise.
        return SIMILAR;
    }
    if fuzzy && similar_lines(sx, sy) {
        SIMILAR
    } else {
        MISMATCH
    }
}

/// Words that open a definition: the name after them is what the line is about.
const DEFINES: [&str; 14] = [
    "def",
    "class",
    "function",
    "fn",
    "func",
    "struct",
    "enum",
    "interface",
    "type",
    "trait",
    "impl",
    "async",
    "pub",
    "export",
];

/// The words a changed line keeps: its first word (after leading punctuation and quotes: `return`, `DEBUG`,
/// `port`), and for a definition the name too (`def add` is not `def mul` changed).
fn head(line: &str) -> Vec<&str> {
    let words = line
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty());
    let mut out = Vec::new();
    for w in words {
        out.push(w);
        if !DEFINES.contains(&w) {
            break;
        }
    }
    out
}

/// Whether two trimmed lines are one line changed: they start with the same word (a changed line keeps its
/// keyword or key: `x = 1` is not `y = 2` changed), are alike by characters and of comparable length.
fn similar_lines(x: &str, y: &str) -> bool {
    let (lx, ly) = (x.chars().count(), y.chars().count());
    if lx > MAX_FUZZY_LINE || ly > MAX_FUZZY_LINE || lx.min(ly) * 2 < lx.max(ly) {
        return false;
    }
    if head(x) != head(y) {
        return false;
    }
    // Short lines are alike by accident (`return 2`, `return a - b`): ask more of them.
    let needed = if lx.min(ly) <= SHORT_LINE {
        SHORT_SIMILAR_RATIO
    } else {
        SIMILAR_RATIO
    };
    char_ratio(x, y) >= needed
}

/// How alike two lines are by characters (0..1: twice the characters in common over both lengths).
fn char_ratio(x: &str, y: &str) -> f32 {
    let (lx, ly) = (x.chars().count(), y.chars().count());
    if lx + ly == 0 || lx > MAX_FUZZY_LINE || ly > MAX_FUZZY_LINE {
        return 0.0;
    }
    let diff = TextDiff::from_chars(x, y);
    let same: usize = diff
        .iter_all_changes()
        .filter(|c| c.tag() == ChangeTag::Equal)
        .map(|c| c.value().chars().count())
        .sum();
    (2 * same) as f32 / (lx + ly) as f32
}

#[cfg(test)]
mod tests;
