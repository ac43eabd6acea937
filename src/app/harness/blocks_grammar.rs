//! The file-blocks reply ([`super::blocks`]) as an llguidance Lark grammar, so that on the local engine
//! the model can only write blocks [`parse_blocks`](super::blocks::parse_blocks) reads as it meant
//! them: free text lines around zero or more blocks, where a **file block** is a path line (a workspace file, or
//! a plausible new relative path), an opening fence with at most a language word, body lines and one closing
//! fence; a **bash block** (when commands run) is ```` ```bash ````, exactly one command line and the closing
//! fence. A fence with nothing to name it is not in the language.
//!
//! Every lexeme is a whole line ending in `\n` (llguidance's lexemes are greedy regexes: a line lexeme cannot be
//! extended past its newline, so lines never run into each other), except the reply's last line, which may end
//! without one. Body lines exclude the closing fence by intersection with a complement, so a body never
//! swallows its close. Opt-in (`--blocks-grammar`): the harness sets the grammar as each model call's
//! `response_format`, with the files listed when the call is made. A prefilled reply goes unconstrained (the
//! engine would start the grammar after the prefill, as if the reply began there).
//!
//! Why it stays off: small models like to quote a result in an unnamed fence (`It now reads:` then ```` ``` ````)
//! when they are done. The grammar forbids that fence, so the model writes a partial fence instead, or (with
//! bash blocks) gets its ```` ``` ```` completed to ```` ```bash ```` and runs the quoted text as a command.
//! Also, the engine's budget close (the last 64 tokens of `max_tokens`) looks for a short way out made for
//! JSON; under this grammar it finds none and ends the reply where the grammar last accepted it.

use crate::schema::lark::lark_string;

/// The most workspace files named as literals; the others are reached through the generic path pattern (most
/// files are: only names without an extension or a `/`, or with unusual characters, need a literal).
pub const MAX_LITERAL_FILES: usize = 300;

/// A new file's relative path, as `edit_format::path_word` reads one: ASCII name characters, a `/` or an
/// extension (or an all-caps name like `VERSION`), never a `.` or `..` segment, never absolute.
const NEW_PATH: &str = r#"NEW_PATH: (/[A-Za-z0-9_.+@-]+(\/[A-Za-z0-9_.+@-]+)+/ | /[A-Za-z0-9_.+@-]*\.[A-Za-z0-9]{1,10}/ | /[A-Z_]{3,}/) & ~/([^\n]*\/)?\.\.?(\/[^\n]*)?/"#;

/// The rules that do not depend on the workspace. `BODY_LINE` is any line but a closing fence; `TEXT_LINE`
/// any line that does not start with a fence.
const FIXED_RULES: &str = r#"file_block: PATH_LINE OPEN BODY_LINE*
TEXT_LINE: /[^\n]*\n/ & ~/[ \t]*```[^\n]*\n/
LAST_TEXT: /[^\n]+/ & ~/[ \t]*```[^\n]*/
PATH_LINE: PATH "\n"
OPEN: /```[A-Za-z0-9_+#-]*\n/
BODY_LINE: /[^\n]*\n/ & ~/[ \t]*```[ \t]*\n/
CLOSE: /[ \t]*```[ \t]*\n/
CLOSE_END: /[ \t]*```[ \t]*/
"#;

/// The bash block's rules: its opening fence and one non-blank line that is no fence.
const BASH_RULES: &str = r#"bash_block: BASH_OPEN COMMAND_LINE
BASH_OPEN: "```bash\n"
COMMAND_LINE: /[ \t]*[^ \t\n][^\n]*\n/ & ~/[ \t]*```[^\n]*\n/
"#;

/// The Lark grammar of a whole blocks reply in a workspace holding `files` (relative paths); `bash`: whether
/// ```` ```bash ```` command blocks are allowed. The language-word of a file block's fence has no `.`, since
/// `parse_blocks` would read a dotted one as the path.
pub fn blocks_grammar(files: &[String], bash: bool) -> String {
    let blocks = if bash {
        "file_block | bash_block"
    } else {
        "file_block"
    };
    let mut g = format!(
        "start: item* last?\nitem: TEXT_LINE | ({blocks}) CLOSE\nlast: LAST_TEXT | ({blocks}) CLOSE_END\n"
    );
    g.push_str(FIXED_RULES);
    if bash {
        g.push_str(BASH_RULES);
    }
    let literals: Vec<String> = files
        .iter()
        .filter(|f| !generic_path(f) && names_itself(f, files))
        .take(MAX_LITERAL_FILES)
        .map(|f| lark_string(f))
        .collect();
    if literals.is_empty() {
        g.push_str("PATH: NEW_PATH\n");
    } else {
        g.push_str(&format!("PATH: NEW_PATH | {}\n", literals.join(" | ")));
    }
    g.push_str(NEW_PATH);
    g.push('\n');
    g
}

/// Whether a path line holding just `file` names it for `parse_blocks` (no spaces, no decoration it would strip).
fn names_itself(file: &str, files: &[String]) -> bool {
    super::blocks::path_word(file, files).as_deref() == Some(file)
}

/// Whether [`NEW_PATH`] already matches `path` (then it needs no literal).
fn generic_path(path: &str) -> bool {
    let plain = !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '@' | '-' | '/'));
    let segments_ok = path
        .split('/')
        .all(|s| !s.is_empty() && s != "." && s != "..");
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = name.rsplit_once('.').is_some_and(|(_, ext)| {
        (1..=10).contains(&ext.len()) && ext.chars().all(|c| c.is_ascii_alphanumeric())
    });
    let caps = !path.contains('/')
        && name.len() >= 3
        && name.chars().all(|c| c.is_ascii_uppercase() || c == '_');
    plain && segments_ok && (path.contains('/') || extension || caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_only_for_files_the_pattern_misses() {
        let files: Vec<String> = ["calc.py", "Makefile", "src/a.rs", "VERSION", "my file.txt"]
            .map(String::from)
            .to_vec();
        let g = blocks_grammar(&files, true);
        assert!(g.contains("\"Makefile\""));
        assert!(!g.contains("\"calc.py\""));
        assert!(!g.contains("\"VERSION\""));
        // A name with a space is never read as a path line, so it is not offered as one.
        assert!(!g.contains("my file"));
        assert!(!blocks_grammar(&files, false).contains("bash_block"));
    }

    #[test]
    fn many_files_are_bounded_and_escaped() {
        let files: Vec<String> = (0..2000).map(|i| format!("Data\"{i}")).collect();
        let g = blocks_grammar(&files, false);
        assert_eq!(g.matches("\"Data\\\"").count(), MAX_LITERAL_FILES);
        crate::schema::lark::check_lark(&g, "blocks").unwrap();
    }

    #[test]
    fn the_generic_pattern_mirror() {
        for p in ["a.py", "src/x", "LICENSE", ".gitignore", "a/b/c.tar.gz"] {
            assert!(generic_path(p), "{p}");
        }
        for p in [
            "Makefile",
            "a/../b.py",
            "./a.py",
            "/etc/x.py",
            "naïve.py",
            "AB",
        ] {
            assert!(!generic_path(p), "{p}");
        }
    }
}
