//! `@path` references in a prompt (Pi's `@file`), and the small files a prompt names by path
//! ([`attach_named_files`], with the workspace grammar on): a word `@path` naming an existing file puts the file's text
//! after the prompt, in a `<file name="path">…</file>` block; `@dir/` puts the directory's listing there (as the `ls` tool lists it). The
//! path rules are the file tools': relative to the working directory, `~` expanded, symlinks followed, and with a
//! workspace it must stay inside it. The read tool's limits apply (2000 lines or 50 KB: the head is kept and the
//! rest left to the `read` tool), and a binary file is refused. A word naming nothing (`@someone`, an e-mail
//! address) is left alone.

use std::fmt::Write as _;
use std::path::Path;

use super::AppError;
use crate::tools::ls::{list, DEFAULT_LS_LIMIT};
use crate::tools::policy::FileScope;
use crate::tools::read::binary_reason;
use crate::tools::support::truncate::{truncate_head, Limits};
use crate::tools::tool::ToolError;

/// Larger files are refused outright (only their head would be shown anyway; `read` pages through them).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// `text` with a block appended for every `@path` word that names a file or directory (each path once).
pub fn expand_mentions(
    text: &str,
    cwd: &Path,
    workspace: Option<&Path>,
) -> Result<String, AppError> {
    let scope = FileScope::new(cwd, workspace.map(Path::to_path_buf));
    // Whether a word names anything at all is asked anywhere (a mention outside the workspace is refused with
    // the reason, not ignored); only what the scope resolves is read.
    let anywhere = FileScope::unconfined(cwd);
    let mut blocks = String::new();
    let mut seen = Vec::new();
    for word in text.split_whitespace() {
        let Some(raw) = word.strip_prefix('@') else {
            continue;
        };
        // Trailing punctuation belongs to the sentence unless the name really ends with it.
        let trimmed =
            raw.trim_end_matches([',', '.', ';', ':', '!', '?', ')', ']', '}', '"', '\'']);
        let Some(name) = [raw, trimmed]
            .into_iter()
            .find(|p| !p.is_empty() && anywhere.exists(p))
        else {
            continue;
        };
        let path = scope.resolve(name).map_err(|e| mention_error(name, e))?;
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let body = if scope.is_dir(&path) {
            listing(&path)
        } else {
            file_text(&scope, name)?
        };
        let _ = write!(blocks, "\n\n<file name=\"{name}\">\n{body}\n</file>");
    }
    if blocks.is_empty() {
        return Ok(text.to_string());
    }
    Ok(format!("{}{blocks}", text.trim_end()))
}

fn mention_error(name: &str, e: ToolError) -> AppError {
    let (ToolError::RespondToModel(message) | ToolError::Fatal(message)) = e;
    AppError::usage(format!("@{name}: {message}"))
}

/// The largest file [`attach_named_files`] attaches.
pub const NAMED_FILE_MAX_BYTES: u64 = 8 * 1024;

/// `expanded` (the prompt after `@path` expansion) with a `<file>` block for every small text file of the
/// workspace that `prompt` names by its relative path as a plain word (quotes, backticks and trailing
/// punctuation aside), unless a block for it is already there. Each attached file counts as seen.
pub fn attach_named_files(
    expanded: &str,
    prompt: &str,
    state: &crate::tools::support::workspace::WorkspaceState,
) -> String {
    let mut blocks = String::new();
    for (rel, text) in named_files(prompt, state) {
        if expanded.contains(&format!("<file name=\"{rel}\">")) {
            continue;
        }
        let _ = write!(
            blocks,
            "\n\n<file name=\"{rel}\">\n{}\n</file>",
            text.trim_end_matches('\n')
        );
    }
    match blocks.is_empty() {
        true => expanded.to_string(),
        false => format!("{}{blocks}", expanded.trim_end()),
    }
}

/// A word of a prompt without the quotes, brackets and sentence punctuation around it (`` `calc.py`, `` →
/// `calc.py`).
pub(crate) fn prompt_word(word: &str) -> &str {
    word.trim_start_matches(['`', '"', '\'', '(', '['])
        .trim_end_matches(['`', '"', '\'', ',', '.', ';', ':', '!', '?', ')', ']'])
}

/// The small text files of the workspace that `prompt` names by their relative path as a plain word (quotes,
/// backticks and trailing punctuation aside), each once, in the order named, with their text. Each counts as
/// seen.
pub fn named_files(
    prompt: &str,
    state: &crate::tools::support::workspace::WorkspaceState,
) -> Vec<(String, String)> {
    let files = state.listing().files;
    let mut out: Vec<(String, String)> = Vec::new();
    for word in prompt.split_whitespace() {
        let name = prompt_word(word);
        let name = name.strip_prefix("./").unwrap_or(name);
        let Some(rel) = files.iter().find(|f| f.as_str() == name) else {
            continue;
        };
        if out.iter().any(|(r, _)| r == rel) {
            continue;
        }
        let Ok(text) = state.scope().read_bytes(rel, NAMED_FILE_MAX_BYTES) else {
            continue;
        };
        if binary_reason(&text).is_some() {
            continue;
        }
        let Ok(text) = String::from_utf8(text) else {
            continue;
        };
        state.saw(Path::new(rel));
        out.push((rel.clone(), text));
    }
    out
}

/// Tab completion of a partial `@path` (without the `@`), relative to `cwd`: the text to insert at the cursor
/// (the rest of the only match, with `/` after a directory and a space after a file; else the longest common
/// part of the matches) and the matches when there are several. Hidden entries only match a prefix starting with
/// `.`.
pub fn complete_path(cwd: &Path, partial: &str) -> (String, Vec<String>) {
    let (dir_part, prefix) = match partial.rfind('/') {
        Some(i) => (&partial[..=i], &partial[i + 1..]),
        None => ("", partial),
    };
    let dir = if dir_part.starts_with('/') {
        std::path::PathBuf::from(dir_part)
    } else if let Some(rest) = dir_part.strip_prefix("~/") {
        match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(rest),
            None => return (String::new(), Vec::new()),
        }
    } else {
        cwd.join(dir_part)
    };
    // The local user's own completion: nothing of it reaches the model until the prompt's mentions are read.
    let anywhere = FileScope::unconfined(cwd);
    let mut matches: Vec<(String, bool)> = anywhere
        .read_dir(&dir)
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_string_lossy().into_owned();
            let visible = !name.starts_with('.') || prefix.starts_with('.');
            (visible && name.starts_with(prefix)).then(|| (name, anywhere.is_dir(&path)))
        })
        .collect();
    matches.sort();
    match matches.as_slice() {
        [] => (String::new(), Vec::new()),
        [(name, is_dir)] => {
            let end = if *is_dir { "/" } else { " " };
            (format!("{}{end}", &name[prefix.len()..]), Vec::new())
        }
        many => {
            let first = &many[0].0;
            let mut common = first.len();
            for (name, _) in &many[1..] {
                common = first
                    .char_indices()
                    .zip(name.chars())
                    .take_while(|((_, a), b)| a == b)
                    .last()
                    .map_or(0, |((i, a), _)| i + a.len_utf8())
                    .min(common);
            }
            let shown = many
                .iter()
                .map(|(n, d)| if *d { format!("{n}/") } else { n.clone() })
                .collect();
            (
                first[prefix.len()..common.max(prefix.len())].to_string(),
                shown,
            )
        }
    }
}

/// The file's text within the read tool's limits, or why it is refused.
fn file_text(scope: &FileScope, name: &str) -> Result<String, AppError> {
    let bytes = scope
        .read_bytes(name, MAX_FILE_BYTES)
        .map_err(|e| mention_error(name, e))?;
    if let Some(reason) = binary_reason(&bytes) {
        return Err(AppError::usage(format!(
            "@{name} looks like a binary file ({reason}); only text files can be put in a prompt"
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    let cut = truncate_head(&text, Limits::default());
    if !cut.truncated() {
        return Ok(cut.content.trim_end_matches('\n').to_string());
    }
    Ok(format!(
        "{}\n[showing lines 1-{} of {}; use the read tool with offset={} for the rest]",
        cut.content.trim_end_matches('\n'),
        cut.output_lines,
        cut.total_lines,
        cut.output_lines + 1
    ))
}

/// The directory's entries as the `ls` tool lists them, at most its default count.
fn listing(dir: &Path) -> String {
    let (names, total) = list(dir, DEFAULT_LS_LIMIT);
    if names.is_empty() {
        return "(empty directory)".into();
    }
    let mut out = names.join("\n");
    if total > names.len() {
        let _ = write!(out, "\n[{} of {total} entries shown]", names.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories_are_inlined_once_and_other_words_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path();
        std::fs::create_dir_all(cwd.join("src")).unwrap();
        std::fs::write(cwd.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(cwd.join("notes.txt"), "milk\n").unwrap();
        let out = expand_mentions(
            "Look at @src/main.rs, then @notes.txt and @src/; ask @someone (mail a@b.c). Again: @notes.txt",
            cwd,
            None,
        )
        .unwrap();
        assert!(out.starts_with("Look at @src/main.rs, then"));
        assert!(out.contains("<file name=\"src/main.rs\">\nfn main() {}\n</file>"));
        assert!(out.contains("<file name=\"notes.txt\">\nmilk\n</file>"));
        assert!(out.contains("<file name=\"src/\">\nmain.rs\n</file>"));
        assert_eq!(out.matches("<file name=\"notes.txt\">").count(), 1);
        assert!(!out.contains("<file name=\"someone") && !out.contains("<file name=\"b.c"));
        // No mention: the text as is.
        assert_eq!(
            expand_mentions("plain text", cwd, None).unwrap(),
            "plain text"
        );
    }

    #[test]
    fn tab_completion_of_paths() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path();
        std::fs::create_dir_all(cwd.join("src/engine")).unwrap();
        std::fs::write(cwd.join("src/main.rs"), "").unwrap();
        std::fs::write(cwd.join("src/mod.rs"), "").unwrap();
        std::fs::write(cwd.join("notes.txt"), "").unwrap();
        std::fs::write(cwd.join(".hidden"), "").unwrap();
        assert_eq!(complete_path(cwd, "no"), ("tes.txt ".to_string(), vec![]));
        assert_eq!(complete_path(cwd, "sr"), ("c/".to_string(), vec![]));
        assert_eq!(complete_path(cwd, "src/e"), ("ngine/".to_string(), vec![]));
        let (insert, all) = complete_path(cwd, "src/m");
        assert_eq!(insert, "");
        assert_eq!(all, ["main.rs", "mod.rs"]);
        assert_eq!(complete_path(cwd, "src/ma").0, "in.rs ");
        assert_eq!(complete_path(cwd, "zzz"), (String::new(), vec![]));
        assert_eq!(complete_path(cwd, ".h").0, "idden ");
        assert!(!complete_path(cwd, "").1.contains(&".hidden".to_string()));
    }

    #[test]
    fn binary_files_and_paths_outside_the_workspace_are_refused_and_long_files_cut() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
        std::fs::write(dir.path().join("secret.txt"), "no").unwrap();
        let long: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(ws.join("long.txt"), long).unwrap();
        let err = expand_mentions("see @blob.bin", &ws, Some(&ws))
            .unwrap_err()
            .to_string();
        assert!(err.contains("binary"), "{err}");
        let err = expand_mentions("see @../secret.txt", &ws, Some(&ws))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the workspace"), "{err}");
        let out = expand_mentions("see @long.txt", &ws, Some(&ws)).unwrap();
        assert!(out.contains(
            "line 1999\n[showing lines 1-2000 of 3000; use the read tool with offset=2001"
        ));
        assert!(!out.contains("line 2000\n"));
    }
}
