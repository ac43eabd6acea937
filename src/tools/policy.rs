//! What an agent lets its tools do: a `Policy` (the allowed set of `PolicyTag`s) checked before every call, and
//! workspace confinement ([`scope`]): every path a tool touches, and every file anything beside a tool reads on
//! a session's behalf, symlinks resolved, must stay under the workspace root.

mod scope;

use std::collections::BTreeSet;
use std::str::FromStr;

pub use scope::FileScope;

use super::error::ToolError;
use super::tool::{PolicyTag, Tool, ToolContext};

/// Resolves a path given by the model for a tool call: [`FileScope::resolve`] in the call's scope.
pub fn resolve_path(ctx: &ToolContext, path: &str) -> Result<std::path::PathBuf, ToolError> {
    ctx.scope().resolve(path)
}

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
