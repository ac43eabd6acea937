//! Prompt templates (Pi's): Markdown files that become `/name args…` commands. `name.md` in the user's
//! `prompts/` directories (`<config dir>/prompts/`, `~/.agentd/prompts/`) or the project's `.agentd/prompts/`
//! (which wins for the same name). An optional front matter gives a `description`; otherwise the first line of
//! the body describes it.
//!
//! Arguments are split like a shell would (quotes group words, a backslash escapes) and substituted into the
//! body: `$1`, `$2`, … (missing ones are empty), `$@` and `$ARGUMENTS` (all of them joined by spaces),
//! `${@:N}` (from the N-th on) and `${@:N:L}` (L of them from the N-th).

use std::path::{Path, PathBuf};

use super::lookup::LookupDir;
use crate::tools::policy::FileScope;

/// One template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    /// The command name: the file name without `.md`.
    pub name: String,
    pub description: String,
    pub body: String,
    pub path: PathBuf,
}

/// The largest template file read.
const MAX_TEMPLATE_BYTES: u64 = 1024 * 1024;

/// Where templates are looked for, the weakest first: the user's directories, then the project's (within the
/// session's scope).
pub fn template_dirs(scope: &FileScope) -> Vec<LookupDir> {
    let mut dirs = vec![crate::env::config_dir().join("prompts")];
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let dir = PathBuf::from(home).join(".agentd").join("prompts");
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mut dirs: Vec<LookupDir> = dirs.into_iter().map(LookupDir::user).collect();
    dirs.push(LookupDir::project(
        scope,
        Path::new(".agentd").join("prompts"),
    ));
    dirs
}

/// The templates in `dirs` (later directories override earlier ones by name), sorted by name, and a warning per
/// file that could not be read.
pub fn discover(dirs: &[LookupDir]) -> (Vec<PromptTemplate>, Vec<String>) {
    let mut found: std::collections::BTreeMap<String, PromptTemplate> = Default::default();
    let mut warnings = Vec::new();
    for dir in dirs {
        for path in dir.entries() {
            if path.extension().and_then(|e| e.to_str()) != Some("md") || !dir.scope.is_file(&path)
            {
                continue;
            }
            let Some(name) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if name.is_empty() || name.chars().any(char::is_whitespace) {
                warnings.push(format!(
                    "{}: a template name cannot contain spaces",
                    path.display()
                ));
                continue;
            }
            let text = dir
                .scope
                .read_bytes(&path, MAX_TEMPLATE_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|b| String::from_utf8(b).map_err(|_| "not UTF-8 text".to_string()));
            match text {
                Ok(text) => {
                    let (description, body) = parse(&text);
                    found.insert(
                        name.clone(),
                        PromptTemplate {
                            name,
                            description,
                            body,
                            path,
                        },
                    );
                }
                Err(e) => warnings.push(format!("{}: {e}", path.display())),
            }
        }
    }
    (found.into_values().collect(), warnings)
}

/// Splits a template file into its description and body.
fn parse(text: &str) -> (String, String) {
    let text = text.trim_start_matches('\u{feff}');
    let mut description = None;
    let mut body = text;
    if let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    {
        if let Some(end) = rest.find("\n---") {
            for line in rest[..end].lines() {
                if let Some(v) = line.trim().strip_prefix("description:") {
                    description = Some(v.trim().trim_matches(['"', '\'']).to_string());
                }
            }
            let after = &rest[end + 4..];
            body = after
                .strip_prefix('\n')
                .or_else(|| after.strip_prefix("\r\n"))
                .unwrap_or(after);
        }
    }
    let body = body.trim_start_matches(['\n', '\r']).to_string();
    let description = description.filter(|d| !d.is_empty()).unwrap_or_else(|| {
        body.lines()
            .find(|l| !l.trim().is_empty())
            .map(|l| {
                l.trim()
                    .trim_start_matches('#')
                    .trim()
                    .chars()
                    .take(80)
                    .collect()
            })
            .unwrap_or_default()
    });
    (description, body)
}

/// Splits `text` into arguments: whitespace separates, `"…"` and `'…'` group, a backslash escapes the next
/// character (outside single quotes).
pub fn split_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut have = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                have = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                have = true;
            }
            (None, c) if c.is_whitespace() => {
                if have || !cur.is_empty() {
                    args.push(std::mem::take(&mut cur));
                    have = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if have || !cur.is_empty() {
        args.push(cur);
    }
    args
}

/// The template's body with `args` substituted.
pub fn expand(body: &str, args: &[String]) -> String {
    let all = |from: usize, len: Option<usize>| -> String {
        let start = from.saturating_sub(1).min(args.len());
        let end = len.map_or(args.len(), |l| (start + l).min(args.len()));
        args[start..end].join(" ")
    };
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(t) = tail.strip_prefix("ARGUMENTS") {
            out.push_str(&all(1, None));
            rest = t;
        } else if let Some(t) = tail.strip_prefix('@') {
            out.push_str(&all(1, None));
            rest = t;
        } else if let Some(spec) = tail.strip_prefix("{@:").and_then(|t| t.split_once('}')) {
            let (inner, t) = spec;
            let mut parts = inner.splitn(2, ':').map(|p| p.trim().parse::<usize>());
            match (parts.next(), parts.next()) {
                (Some(Ok(n)), None) if n >= 1 => out.push_str(&all(n, None)),
                (Some(Ok(n)), Some(Ok(l))) if n >= 1 => out.push_str(&all(n, Some(l))),
                _ => {
                    // Not a substitution: keep it as written.
                    out.push_str("${@:");
                    out.push_str(inner);
                    out.push('}');
                }
            }
            rest = t;
        } else {
            let digits = tail.chars().take_while(char::is_ascii_digit).count();
            match tail[..digits].parse::<usize>() {
                Ok(n) if n >= 1 => {
                    out.push_str(args.get(n - 1).map_or("", String::as_str));
                    rest = &tail[digits..];
                }
                _ => {
                    out.push('$');
                    rest = tail;
                }
            }
        }
    }
    out.push_str(rest);
    out
}

/// If `line` is `/name args…` naming one of `templates`, the expanded prompt.
pub fn expand_command(templates: &[PromptTemplate], line: &str) -> Option<String> {
    let line = line.trim();
    let rest = line.strip_prefix('/')?;
    let (name, args) = match rest.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a),
        None => (rest, ""),
    };
    let t = templates.iter().find(|t| t.name == name)?;
    Some(expand(&t.body, &split_args(args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn arguments_split_like_a_shell() {
        assert_eq!(
            split_args(r#"Button "onClick handler" 'it''s' a\ b """#),
            s(&["Button", "onClick handler", "its", "a b", ""])
        );
        assert!(split_args("   ").is_empty());
    }

    #[test]
    fn substitutions() {
        let args = s(&["a", "b c", "d"]);
        assert_eq!(expand("x=$1 y=$2 z=$4.", &args), "x=a y=b c z=.");
        assert_eq!(
            expand("all: $@ / $ARGUMENTS", &args),
            "all: a b c d / a b c d"
        );
        assert_eq!(
            expand("${@:2} | ${@:1:2} | ${@:9}", &args),
            "b c d | a b c | "
        );
        assert_eq!(
            expand("cost $5 ${x} $ $0 ${@:zero}", &[]),
            "cost  ${x} $ $0 ${@:zero}"
        );
    }

    #[test]
    fn discovery_front_matter_and_override() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::write(
            user.path().join("review.md"),
            "---\ndescription: Review staged changes\n---\nReview $@ carefully.\n",
        )
        .unwrap();
        std::fs::write(user.path().join("fix.md"), "# Fix a bug\nFix $1.\n").unwrap();
        std::fs::write(project.path().join("review.md"), "Project review of $1\n").unwrap();
        std::fs::write(project.path().join("notes.txt"), "not a template").unwrap();
        let (found, warnings) = discover(&[
            LookupDir::user(user.path()),
            LookupDir::project(&FileScope::within(project.path()), ""),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["fix", "review"]);
        assert_eq!(found[0].description, "Fix a bug");
        assert_eq!(found[1].body, "Project review of $1\n");
        assert_eq!(
            expand_command(&found, "/review src/main.rs").as_deref(),
            Some("Project review of src/main.rs\n")
        );
        assert_eq!(expand_command(&found, "/nope x"), None);
        assert_eq!(expand_command(&found, "review x"), None);
        // A confined project's template that links out of its workspace is not read.
        let secret = user.path().join("secret.md");
        std::fs::write(&secret, "the outside secret\n").unwrap();
        std::os::unix::fs::symlink(&secret, project.path().join("leak.md")).unwrap();
        let (found, _) = discover(&[LookupDir::project(&FileScope::within(project.path()), "")]);
        assert!(found.iter().all(|t| t.name != "leak"), "{found:?}");
        let (found, _) = discover(&[LookupDir::project(
            &FileScope::unconfined(project.path()),
            "",
        )]);
        assert!(found.iter().any(|t| t.name == "leak"), "{found:?}");
    }
}
