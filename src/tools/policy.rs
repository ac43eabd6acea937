//! What an agent lets its tools do: a `Policy` (the allowed set of `PolicyTag`s) checked before every call, and
//! workspace confinement (`resolve_path`): every path a tool touches, symlinks resolved, must stay under the root.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use super::tool::{PolicyTag, Tool, ToolContext, ToolError};

/// The set of tags an agent allows. A tool is allowed when every tag it declares is in the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    allowed: BTreeSet<PolicyTag>,
}

/// A policy string named a tag that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy tag '{tag}' (known: read_only, write, exec, network, or 'all' / 'none')")]
pub struct ParsePolicyError {
    pub tag: String,
}

impl Policy {
    /// Everything allowed.
    pub fn all() -> Self {
        Self::from_tags(PolicyTag::ALL)
    }

    /// Only `read_only` tools.
    pub fn read_only() -> Self {
        Self::from_tags([PolicyTag::ReadOnly])
    }

    /// No tool at all.
    pub fn none() -> Self {
        Self::from_tags([])
    }

    pub fn from_tags(tags: impl IntoIterator<Item = PolicyTag>) -> Self {
        Self {
            allowed: tags.into_iter().collect(),
        }
    }

    pub fn allows(&self, tag: PolicyTag) -> bool {
        self.allowed.contains(&tag)
    }

    pub fn allowed(&self) -> impl Iterator<Item = PolicyTag> + '_ {
        self.allowed.iter().copied()
    }

    /// The policy's name: its tags comma-separated in canonical order (`none` when empty).
    pub fn name(&self) -> String {
        if self.allowed.is_empty() {
            return "none".into();
        }
        let names: Vec<&str> = self.allowed.iter().map(|t| t.as_str()).collect();
        names.join(",")
    }

    /// Whether a tool with these tags may run; the error names the tool, the policy and the missing tags.
    pub fn check_tags(&self, tool_name: &str, tags: &[PolicyTag]) -> Result<(), String> {
        let mut missing: Vec<&str> = tags
            .iter()
            .filter(|t| !self.allows(**t))
            .map(|t| t.as_str())
            .collect();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let plural = if missing.len() == 1 { "" } else { "s" };
        Err(format!(
            "Tool '{tool_name}' is not allowed by policy '{}': it needs the {} tag{plural}, which the policy does not allow.",
            self.name(),
            missing
                .iter()
                .map(|t| format!("'{t}'"))
                .collect::<Vec<_>>()
                .join(", "),
        ))
    }

    /// `check_tags` for a tool.
    pub fn check(&self, tool: &dyn Tool) -> Result<(), String> {
        self.check_tags(&tool.spec().name, tool.tags())
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::all()
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Policy {
    type Err = ParsePolicyError;

    /// `"read_only,write,exec,network"` (any subset, any order, spaces allowed), `"all"` or `"none"`/`""`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut allowed = BTreeSet::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().replace('-', "_").as_str() {
                "all" => allowed.extend(PolicyTag::ALL),
                "none" => {}
                "read_only" | "readonly" | "read" => {
                    allowed.insert(PolicyTag::ReadOnly);
                }
                "write" => {
                    allowed.insert(PolicyTag::Write);
                }
                "exec" => {
                    allowed.insert(PolicyTag::Exec);
                }
                "network" => {
                    allowed.insert(PolicyTag::Network);
                }
                _ => {
                    return Err(ParsePolicyError {
                        tag: part.to_string(),
                    })
                }
            }
        }
        Ok(Self { allowed })
    }
}

/// How many symlinks one path may traverse before we call it a loop (Linux uses 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves a path given by the model: `~` expanded, relative paths joined to `ctx.cwd`, `.`/`..` and every
/// symlink resolved (for a path that does not exist yet, the part that exists is resolved and the rest appended).
/// With `ctx.workspace` set, the result must lie under the (resolved) workspace root.
pub fn resolve_path(ctx: &ToolContext, path: &str) -> Result<PathBuf, ToolError> {
    let to_model = ToolError::RespondToModel;
    if path.trim().is_empty() {
        return Err(to_model("The path is empty.".into()));
    }
    if path.contains('\0') {
        return Err(to_model("The path contains a NUL byte.".into()));
    }
    let expanded = expand_home(path);
    let cwd = absolute(&ctx.cwd)?;
    let absolute_path = if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    };
    let mut hops = 0;
    let resolved = resolve_components(Path::new("/"), &absolute_path, &mut hops)
        .map_err(|e| to_model(format!("Cannot resolve path '{path}': {e}")))?;
    if let Some(root) = &ctx.workspace {
        let root = absolute(root)?;
        let root = std::fs::canonicalize(&root).map_err(|e| {
            ToolError::Fatal(format!(
                "the workspace root '{}' cannot be resolved: {e}",
                root.display()
            ))
        })?;
        if !resolved.starts_with(&root) {
            return Err(to_model(format!(
                "Path '{path}' resolves to '{}', which is outside the workspace '{}'. Only paths inside the workspace are allowed.",
                resolved.display(),
                root.display()
            )));
        }
    }
    Ok(resolved)
}

/// `~` and `~/rest` become `$HOME` and `$HOME/rest`; anything else is returned as is.
fn expand_home(path: &str) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match (path, home) {
        ("~", Some(home)) => PathBuf::from(home),
        (p, Some(home)) if p.starts_with("~/") => PathBuf::from(home).join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}

fn absolute(path: &Path) -> Result<PathBuf, ToolError> {
    std::path::absolute(path)
        .map_err(|e| ToolError::Fatal(format!("cannot make '{}' absolute: {e}", path.display())))
}

/// Walks `rest` one component at a time from the already-resolved `base`, following each symlink it meets
/// (also dangling ones, so a link to a not-yet-existing file outside the workspace is caught).
fn resolve_components(base: &Path, rest: &Path, hops: &mut usize) -> std::io::Result<PathBuf> {
    let mut resolved = base.to_path_buf();
    for component in rest.components() {
        match component {
            Component::Prefix(_) | Component::CurDir => {}
            Component::RootDir => resolved = PathBuf::from("/"),
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(name) => {
                let next = resolved.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        *hops += 1;
                        if *hops > MAX_SYMLINK_HOPS {
                            return Err(std::io::Error::other("too many levels of symbolic links"));
                        }
                        let target = std::fs::read_link(&next)?;
                        // A relative target is relative to the link's directory (`resolved`).
                        resolved = resolve_components(&resolved, &target, hops)?;
                    }
                    _ => resolved = next,
                }
            }
        }
    }
    Ok(resolved)
}
