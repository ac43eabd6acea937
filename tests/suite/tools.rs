//! Tool tests (issue 5, item 7): every rule of the built-in tools and of policy/confinement, in temp dirs.

mod bash;
mod edit;
mod files;
mod policy;
mod search;
mod truncate;

use std::path::Path;

use agentd::tools::tool::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

/// A context rooted at `dir` (no confinement).
pub fn ctx(dir: &Path) -> ToolContext {
    ToolContext::new(dir).with_call_id("call-1")
}

/// Calls `tool`, expecting success.
pub async fn ok(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> ToolOutput {
    match tool.call(args.clone(), ctx).await {
        Ok(out) => out,
        Err(e) => panic!("{} {args} failed: {e}", tool.spec().name),
    }
}

/// Calls `tool`, expecting an error for the model; returns its text.
pub async fn err(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> String {
    match tool.call(args.clone(), ctx).await {
        Ok(out) => panic!("{} {args} succeeded: {}", tool.spec().name, out.content),
        Err(ToolError::RespondToModel(text)) => text,
        Err(e) => panic!(
            "{} {args}: expected RespondToModel, got {e:?}",
            tool.spec().name
        ),
    }
}

/// Writes `content` to `dir/name`, creating parents.
pub fn put(dir: &Path, name: &str, content: impl AsRef<[u8]>) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, content).unwrap();
}
