//! `write {path, content}`: creates or replaces a file, creating missing parent directories. The write is atomic:
//! the content goes to a temporary file in the same directory, which is then renamed over the target, so readers
//! see the old file or the new one, never half of it.

use std::io::Write as _;
use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::policy::resolve_path;
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

/// Replaces `path` with `bytes` atomically (temp file in the same directory, fsync, rename), creating parents.
/// An existing file keeps its permissions. Returns whether the file is new.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let existing = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(std::io::Error::other("it is a directory"));
        }
        Ok(meta) => Some(meta.permissions()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".agentd-write-")
        .suffix(".tmp")
        .tempfile_in(parent)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Some(perms) = &existing {
        tmp.as_file().set_permissions(perms.clone())?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
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

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WriteArgs = parse_arguments("write", args)?;
        let path = resolve_path(ctx, &args.path)?;
        let bytes = args.content.len();
        let target = path.clone();
        let created =
            tokio::task::spawn_blocking(move || atomic_write(&target, args.content.as_bytes()))
                .await
                .map_err(|e| ToolError::Fatal(format!("write task failed: {e}")))?
                .map_err(|e| {
                    ToolError::RespondToModel(format!("Cannot write {}: {e}", args.path))
                })?;
        Ok(ToolOutput::new(
            format!("Successfully wrote {bytes} bytes to {}", args.path),
            json!({ "path": path, "bytes": bytes, "created": created }),
        ))
    }
}
