//! `recall {ref}`: the full content of a tool result that compaction dropped from the context (grounding). The
//! compaction summary lists dropped results as `[ref:ab12cd] read(path="src/lib.rs") — 240 lines`; the model
//! calls `recall` with that ref to read the result again. Built with the session's [`BlobStore`], so it is not one
//! of the name-only built-ins: `registry.register(Arc::new(RecallTool::new(store.blobs())))`.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;
use crate::session::blobs::BlobStore;

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RecallArgs {
    /// The ref of a dropped tool result, as the summary shows it (`ab12cd` or `[ref:ab12cd]`).
    #[serde(rename = "ref")]
    pub reference: String,
}

/// The `recall` tool over one session's stored tool results.
pub struct RecallTool {
    spec: ToolSpec,
    blobs: BlobStore,
}

impl RecallTool {
    pub fn new(blobs: BlobStore) -> Self {
        Self {
            spec: builtin_spec::<RecallArgs>(
                "recall",
                "Read again, in full, a tool result that was dropped from the context when it was compacted. The \
                 summary of earlier messages lists them as [ref:xxxxxx] lines; pass that ref.",
            ),
            blobs,
        }
    }
}

#[async_trait]
impl Tool for RecallTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: RecallArgs = parse_arguments("recall", args)?;
        let blobs = self.blobs.clone();
        let reference = args.reference.clone();
        let loaded = tokio::task::spawn_blocking(move || blobs.load(&reference))
            .await
            .map_err(|e| ToolError::Fatal(format!("the recall task failed: {e}")))?;
        let content = loaded.map_err(|e| ToolError::RespondToModel(e.to_string()))?;
        let lines = content.lines().count();
        Ok(ToolOutput::new(
            content,
            json!({"ref": args.reference, "lines": lines}),
        ))
    }
}
