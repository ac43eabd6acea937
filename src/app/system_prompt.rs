//! The system prompt: a deliberately small default (small local models have small windows, and every token of
//! it is paid on every turn), the `AGENTS.md` context files, the skills list, `--system-prompt` and
//! `--append-system-prompt`.
//!
//! Order (Pi's): base prompt (default or `--system-prompt`), appended text, `# Project context` with each
//! context file, the skills list (only when the `read` tool is offered), then the working directory and date.
//! Context files: `AGENTS.md` (else `CLAUDE.md`) from the user config dir, then from `/` down to the working
//! directory (outermost first, so the nearest file has the last word).

use std::path::{Path, PathBuf};

use super::lookup::LookupDir;
use super::skills::{self, Skill};
use crate::env::config_dir;
use crate::tools::policy::FileScope;

/// The names a context file may have, in order of preference (one per directory).
pub const CONTEXT_FILE_NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// The default base prompt. Tool names and schemas reach the model through the chat template, so they are not
/// repeated here; only guidance for the tools that are offered is added.
pub const DEFAULT_BASE: &str =
    "You are agentd, a coding assistant. You help the user with their project by reading files, \
running commands, and editing code with your tools. Be concise.";

/// A loaded context file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    pub path: PathBuf,
    pub content: String,
}

/// The skill directories: user, then project (within the session's scope).
pub fn skill_dirs(scope: &FileScope) -> Vec<LookupDir> {
    vec![
        LookupDir::user(config_dir().join("skills")),
        LookupDir::project(scope, Path::new(".agentd").join("skills")),
    ]
}

/// The largest context file read.
const MAX_CONTEXT_FILE_BYTES: u64 = 1024 * 1024;

/// The first of `CONTEXT_FILE_NAMES` in `dir` that reads, with the path it resolves to (for duplicates).
fn context_file_in(dir: &LookupDir) -> Option<(ContextFile, PathBuf)> {
    CONTEXT_FILE_NAMES.iter().find_map(|name| {
        let path = dir.path.join(name);
        let content = dir.scope.read_text(&path, MAX_CONTEXT_FILE_BYTES)?;
        let real = dir.scope.resolve(&path).ok()?;
        Some((ContextFile { path, content }, real))
    })
}

/// The context files of a session in `scope`: the user's, then every ancestor's of the working directory from
/// the root down to it. A confined session takes only the ancestors inside its workspace, read within it (a
/// context file that links out of the workspace is not read).
pub fn context_files(scope: &FileScope) -> Vec<ContextFile> {
    let mut files: Vec<(ContextFile, PathBuf)> = Vec::new();
    files.extend(context_file_in(&LookupDir::user(config_dir())));
    let mut ancestors: Vec<&Path> = scope
        .cwd()
        .ancestors()
        .filter(|dir| scope.workspace().is_none_or(|root| dir.starts_with(root)))
        .collect();
    ancestors.reverse();
    for dir in ancestors {
        if let Some((f, real)) = context_file_in(&LookupDir::within(scope, dir)) {
            if !files.iter().any(|(_, r)| *r == real) {
                files.push((f, real));
            }
        }
    }
    files.into_iter().map(|(f, _)| f).collect()
}

/// Everything the system prompt is built from.
#[derive(Debug, Clone, Default)]
pub struct PromptInputs {
    /// `--system-prompt` (replaces the default base).
    pub custom: Option<String>,
    /// `--append-system-prompt`.
    pub append: Option<String>,
    /// The offered tools' names.
    pub tools: Vec<String>,
    pub context_files: Vec<ContextFile>,
    pub skills: Vec<Skill>,
    pub cwd: PathBuf,
    /// The workspace's files as a short tree (`WorkspaceState::tree` of [`TREE_LINES`] lines). With it the prompt shows the tree and says
    /// paths are relative, instead of the working directory's absolute path (which small models copy as the
    /// path of every call).
    pub tree: Option<String>,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// How the model changes files: with blocks, the default base prompt is the blocks format's instructions.
    pub edit_format: super::harness::EditFormat,
}

/// Tool guidance lines for the offered tools.
fn guidelines(tools: &[String]) -> Vec<&'static str> {
    let has = |t: &str| tools.iter().any(|n| n == t);
    let mut lines = Vec::new();
    if has("read") && has("edit") {
        lines.push("Read a file before editing it.");
    }
    if has("edit") {
        lines.push("edit needs old text that matches the file exactly.");
    }
    if has("write") {
        lines.push("Use write only for new files or complete rewrites.");
    }
    if has("bash") && (has("grep") || has("find") || has("ls")) {
        lines.push("Prefer grep, find and ls over bash for exploring files.");
    }
    if has("recall") {
        lines.push(
            "A summary's [ref:xxxxxx] lines point at earlier tool results: recall reads one again.",
        );
    }
    lines
}

/// Builds the system prompt.
pub fn build(inputs: &PromptInputs) -> String {
    let mut prompt = match &inputs.custom {
        Some(custom) => custom.trim_end().to_string(),
        None if inputs.edit_format == super::harness::EditFormat::Blocks => {
            super::harness::blocks::instructions(inputs.tools.iter().any(|t| t == "bash"))
        }
        None => {
            let mut base = DEFAULT_BASE.to_string();
            for line in guidelines(&inputs.tools) {
                base.push_str("\n- ");
                base.push_str(line);
            }
            base
        }
    };
    if let Some(append) = inputs.append.as_deref().filter(|a| !a.trim().is_empty()) {
        prompt.push_str("\n\n");
        prompt.push_str(append.trim_end());
    }
    if !inputs.context_files.is_empty() {
        prompt.push_str("\n\n# Project context\n");
        for f in &inputs.context_files {
            prompt.push_str(&format!(
                "\n## {}\n\n{}\n",
                f.path.display(),
                f.content.trim_end()
            ));
        }
    }
    if inputs.tools.iter().any(|t| t == "read") && !inputs.skills.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(&skills::prompt_section(&inputs.skills));
    }
    match &inputs.tree {
        Some(tree) if tree.is_empty() => prompt.push_str(&format!(
            "\n\nThe working directory is empty. Use paths relative to it.\nDate: {}",
            inputs.date
        )),
        Some(tree) => prompt.push_str(&format!(
            "\n\nFiles in the working directory (use these paths, relative to it):\n{tree}\nDate: {}",
            inputs.date
        )),
        None => prompt.push_str(&format!(
            "\n\nWorking directory: {}\nDate: {}",
            inputs.cwd.display(),
            inputs.date
        )),
    }
    prompt
}

/// Lines of the file tree the system prompt shows at most.
pub const TREE_LINES: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> PromptInputs {
        PromptInputs {
            tools: ["read", "bash", "edit", "write"].map(String::from).to_vec(),
            cwd: PathBuf::from("/p"),
            date: "2026-01-02".into(),
            ..PromptInputs::default()
        }
    }

    #[test]
    fn default_prompt_is_small_and_ends_with_cwd_and_date() {
        let p = build(&inputs());
        assert!(p.starts_with(DEFAULT_BASE));
        // Without a tree (the workspace grammar off), the working directory as before.
        assert!(p.ends_with("Working directory: /p\nDate: 2026-01-02"));
        assert!(p.len() < 600, "{} bytes", p.len());
    }

    #[test]
    fn the_tree_replaces_the_absolute_path() {
        let p = build(&PromptInputs {
            tree: Some("src/a.py".into()),
            ..inputs()
        });
        assert!(!p.contains("/p"), "{p}");
        assert!(
            p.ends_with("relative to it):\nsrc/a.py\nDate: 2026-01-02"),
            "{p}"
        );
        let empty = build(&PromptInputs {
            tree: Some(String::new()),
            ..inputs()
        });
        assert!(empty.contains("The working directory is empty."), "{empty}");
    }

    #[test]
    fn custom_append_context_and_skills_in_order() {
        let p = build(&PromptInputs {
            custom: Some("BASE".into()),
            append: Some("EXTRA".into()),
            context_files: vec![ContextFile {
                path: PathBuf::from("/p/AGENTS.md"),
                content: "Use tabs.\n".into(),
            }],
            skills: vec![Skill {
                name: "s".into(),
                description: "d".into(),
                path: PathBuf::from("/k/s/SKILL.md"),
            }],
            ..inputs()
        });
        let at = |needle: &str| p.find(needle).unwrap_or_else(|| panic!("{needle} in {p}"));
        assert!(at("BASE") < at("EXTRA"));
        assert!(at("EXTRA") < at("## /p/AGENTS.md\n\nUse tabs."));
        assert!(at("Use tabs.") < at("<name>s</name>"));
        assert!(!p.contains(DEFAULT_BASE));
        let without_read = build(&PromptInputs {
            tools: vec!["bash".into()],
            skills: vec![Skill {
                name: "s".into(),
                description: "d".into(),
                path: PathBuf::from("/k/s/SKILL.md"),
            }],
            ..inputs()
        });
        assert!(!without_read.contains("available_skills"));
    }

    #[test]
    fn context_files_walk_from_the_root_down() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("a").join("b");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "outer").unwrap();
        std::fs::write(dir.path().join("a").join("CLAUDE.md"), "middle").unwrap();
        std::fs::write(inner.join("AGENTS.md"), "inner").unwrap();
        std::fs::write(inner.join("CLAUDE.md"), "ignored").unwrap();
        let found = |scope: &FileScope| -> Vec<String> {
            context_files(scope)
                .into_iter()
                .filter(|f| f.path.starts_with(dir.path()))
                .map(|f| f.content)
                .collect()
        };
        assert_eq!(
            found(&FileScope::unconfined(&inner)),
            ["outer", "middle", "inner"]
        );
        // Confined to `a`: the ancestors above the workspace are outside it, and a context file that links out
        // of it is not read.
        let a = dir.path().join("a");
        assert_eq!(
            found(&FileScope::new(&inner, Some(a.clone()))),
            ["middle", "inner"]
        );
        std::fs::remove_file(inner.join("AGENTS.md")).unwrap();
        std::fs::remove_file(inner.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("AGENTS.md"), inner.join("AGENTS.md")).unwrap();
        assert_eq!(found(&FileScope::new(&inner, Some(a))), ["middle"]);
        assert_eq!(found(&FileScope::unconfined(&inner)), ["outer", "middle"]);
    }
}
