//! `write {path, content}`: creates or replaces a file, creating missing parent directories. The write is atomic:
//! the content goes to a temporary file in the same directory, which is then renamed over the target, so readers
//! see the old file or the new one, never half of it. It is durable once the call returns: the file is fsynced
//! before the rename and its directory after. A new file gets the permissions the umask gives (`0644` under
//! `022`), an existing one keeps its own; a target that exists but is not a regular file (a FIFO, a device) is
//! refused.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::policy::resolve_path;
use super::support::truncate::preview_lines;
use super::support::workspace::WorkspaceState;
use super::tool::with_property;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// Arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// Path of the file to write, relative to the working directory or absolute. Missing parent directories are
    /// created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// The `write` tool.
pub struct WriteTool {
    spec: ToolSpec,
}

impl WriteTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<WriteArgs>(
                "write",
                "Write content to a file. Creates the file if it does not exist and overwrites it if it does; \
                 creates parent directories. Use edit for changes to part of an existing file.",
            ),
        }
    }
}

impl Default for WriteTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Replaces `path` with `bytes` atomically and durably (temp file in the same directory, fsync, rename, fsync of
/// the directory), creating parents. A new file gets `0666` less the umask; an existing file keeps its
/// permissions. A target that is not a regular file is refused. Returns whether the file is new.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let existing = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Some(meta.permissions()),
        Ok(meta) => {
            return Err(std::io::Error::other(format!(
                "it is a {}, not a regular file",
                super::support::file_access::kind_name(&meta.file_type())
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    // The temp file is created with the mode a new file would get (the kernel applies the umask), not
    // tempfile's private 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".agentd-write-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(parent)?;
    tmp.write_all(bytes)?;
    if let Some(perms) = &existing {
        tmp.as_file().set_permissions(perms.clone())?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename is only durable once the directory entry is on disk.
    std::fs::File::open(parent)?.sync_all()?;
    Ok(existing.is_none())
}

#[async_trait]
impl Tool for WriteTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::Write]
    }

    fn argument_grammar(&self, workspace: &WorkspaceState) -> Option<serde_json::Value> {
        let path = workspace.new_path_schema(None);
        Some(with_property(&self.spec.parameters, "path", path))
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WriteArgs = parse_arguments("write", args)?;
        let path = resolve_path(ctx, &args.path)?;
        let bytes = args.content.len();
        let (target, shown) = (path.clone(), args.path.clone());
        let content = args.content;
        let shown_text = written_text(&content);
        // An abort returns at once; a write already under way may still land (old file or new, never half).
        let created = ctx
            .run_blocking("write", move || {
                atomic_write(&target, content.as_bytes())
                    .map_err(|e| ToolError::RespondToModel(format!("Cannot write {shown}: {e}")))
            })
            .await?;
        ctx.saw(&path);
        ctx.tree_changed();
        let what = if created { "Created" } else { "Replaced" };
        // The result shows what the file now holds, not a byte count: small models copy numbers they are shown
        // into their next call ("Successfully wrote 5 bytes" became `write version.txt "5"`).
        Ok(ToolOutput::new(
            format!(
                "{what} {}. It now reads:\n{shown_text}\nIf the task is done, reply with a short summary; \
                 otherwise make the next change.",
                args.path
            ),
            json!({ "path": path, "bytes": bytes, "created": created }),
        ))
    }
}

/// The written text as the result shows it: all of it when short, else its first lines and how much follows.
fn written_text(content: &str) -> String {
    preview_lines(content, 30, 1500, "… (the rest as written)")
        .trim_end_matches('\n')
        .to_string()
}
