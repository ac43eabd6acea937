//! The tool boundary: the `Tool` trait every tool implements, what a call gets (`ToolContext`), what it returns
//! (`ToolOutput`, `ToolError`), the policy tags a tool declares, and the partial output it may stream. A call's
//! blocking file work goes through [`ToolContext::run_blocking`], so an abort ends the call at once.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;

pub use super::error::ToolError;
use super::policy::FileScope;
use super::support::session_resources::SessionResources;
use super::support::workspace::WorkspaceState;
use crate::schema::ToolSpec;

/// What a tool may do; an agent's `Policy` allows a set of these and refuses any tool needing another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyTag {
    /// Reads files or directories; changes nothing.
    ReadOnly,
    /// Creates or modifies files.
    Write,
    /// Runs programs.
    Exec,
    /// Talks to the network.
    Network,
}

impl PolicyTag {
    /// Every tag, in declaration order.
    pub const ALL: [PolicyTag; 4] = [
        PolicyTag::ReadOnly,
        PolicyTag::Write,
        PolicyTag::Exec,
        PolicyTag::Network,
    ];

    /// The snake_case name used in configs and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyTag::ReadOnly => "read_only",
            PolicyTag::Write => "write",
            PolicyTag::Exec => "exec",
            PolicyTag::Network => "network",
        }
    }
}

impl std::fmt::Display for PolicyTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A successful tool result: `content` goes to the model, `details` to people, UIs and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub content: String,
    pub details: serde_json::Value,
}

impl ToolOutput {
    pub fn new(content: impl Into<String>, details: serde_json::Value) -> Self {
        Self {
            content: content.into(),
            details,
        }
    }
}

/// A piece of partial output streamed while a tool runs (bash's stdout/stderr as it arrives); the agent loop
/// forwards it as a `tool_execution_update` event. Updates travel through a bounded channel
/// ([`super::support::update_channel::update_channel`]); a tool never waits for room, it merges what did not fit into its next
/// update ([`super::support::update_channel::CoalescedUpdates`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolUpdate {
    /// The tool call this output belongs to.
    pub call_id: String,
    /// The new text since the previous update (not the whole output so far).
    pub text: String,
}

/// Everything a call may use besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Directory relative paths are resolved against and bash runs in.
    pub cwd: PathBuf,
    /// When set, every path a tool touches must resolve (symlinks followed) to somewhere under this root.
    pub workspace: Option<PathBuf>,
    /// Cancelled when the run is aborted; every tool then returns promptly (bash kills its process group, file
    /// work stops waiting for its blocking thread).
    pub cancel: CancellationToken,
    /// Where streamed partial output goes, if anyone listens: a bounded channel, never waited on.
    pub updates: Option<Sender<ToolUpdate>>,
    /// The id of the tool call being executed.
    pub call_id: String,
    /// What the session's calls leave behind (bash's background process groups and overflow logs), cleaned when
    /// the session closes them. `None`: nothing is tracked (background jobs outlive the call, logs stay in the
    /// temp directory).
    pub resources: Option<SessionResources>,
    /// What the session knows of its workspace (files seen, the listing); tools that read or change files tell
    /// it. `None`: nothing is tracked.
    pub workspace_state: Option<WorkspaceState>,
}

impl ToolContext {
    /// A context in `cwd` with no confinement, a fresh cancel token, no update listener and an empty call id.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            workspace: None,
            cancel: CancellationToken::new(),
            updates: None,
            call_id: String::new(),
            resources: None,
            workspace_state: None,
        }
    }

    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Streams partial output to `updates` (make it with [`super::support::update_channel::update_channel`]).
    pub fn with_updates(mut self, updates: Sender<ToolUpdate>) -> Self {
        self.updates = Some(updates);
        self
    }

    /// Tracks what this call leaves behind in the session's `resources`.
    pub fn with_resources(mut self, resources: SessionResources) -> Self {
        self.resources = Some(resources);
        self
    }

    /// Tells `state` what this call reads and changes.
    pub fn with_workspace_state(mut self, state: WorkspaceState) -> Self {
        self.workspace_state = Some(state);
        self
    }

    /// What this call may reach on disk: its working directory and workspace.
    pub fn scope(&self) -> FileScope {
        FileScope::new(self.cwd.clone(), self.workspace.clone())
    }

    /// The model has seen `path`'s current text (a read, a write, an edit whose result shows it).
    pub fn saw(&self, path: &std::path::Path) {
        if let Some(s) = &self.workspace_state {
            s.saw(path);
        }
    }

    /// The tree may have changed (a write, an edit, a command).
    pub fn tree_changed(&self) {
        if let Some(s) = &self.workspace_state {
            s.changed();
        }
    }

    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = call_id.into();
        self
    }

    /// Streams `text` to the listener, if any, without waiting: when the channel is full the text is dropped. A
    /// listener that went away is not an error. Tools that stream a lot use [`super::support::update_channel::CoalescedUpdates`],
    /// which keeps what did not fit for the next update.
    pub fn send_update(&self, text: impl Into<String>) {
        let _ = self.try_send_update(text.into());
    }

    /// Streams `text` without waiting; gives it back when the channel is full. No listener, or one that went away,
    /// counts as delivered.
    pub fn try_send_update(&self, text: String) -> Result<(), String> {
        let Some(tx) = &self.updates else {
            return Ok(());
        };
        let update = ToolUpdate {
            call_id: self.call_id.clone(),
            text,
        };
        match tx.try_send(update) {
            Ok(()) | Err(TrySendError::Closed(_)) => Ok(()),
            Err(TrySendError::Full(update)) => Err(update.text),
        }
    }

    /// Runs blocking work (file I/O) on tokio's blocking pool so that an abort ends the call at once: when
    /// `cancel` fires first this returns [`aborted`] without waiting for the thread, which finishes (or stays stuck
    /// in a system call) on its own; its result is dropped. `work` should still check `cancel` in long loops so
    /// the thread stops soon after an abort. A panic in `work` is `Fatal`.
    pub async fn run_blocking<T, F>(&self, tool: &str, work: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    {
        if self.cancel.is_cancelled() {
            return Err(aborted(tool));
        }
        let task = tokio::task::spawn_blocking(work);
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(aborted(tool)),
            joined = task => joined.map_err(|e| ToolError::Fatal(format!("{tool} task failed: {e}")))?,
        }
    }
}

/// The result of a call ended by an abort: the model (if the run goes on) sees it as an error result.
pub fn aborted(tool: &str) -> ToolError {
    ToolError::RespondToModel(format!("The {tool} call was aborted."))
}

/// A tool the model can call. One implementation per file under `tools/`.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and JSON Schema of the arguments, as the model sees them.
    fn spec(&self) -> &ToolSpec;

    /// What the tool may do; checked against the agent's `Policy` before every call.
    fn tags(&self) -> &[PolicyTag];

    /// Runs one call. `args` has already been validated against `spec().parameters` by the caller, but tools
    /// still deserialize defensively (see `parse_arguments`).
    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError>;

    /// The grammar of this tool's arguments in this workspace, for the local engine (a JSON Schema with agentd's
    /// extensions, `schema::extensions`: paths that exist, `old_text` from the file): calls that can work, not
    /// only parse. `None` (the default): `spec().parameters` as they are, as for custom and remote tools.
    fn argument_grammar(&self, _workspace: &WorkspaceState) -> Option<serde_json::Value> {
        None
    }
}

/// `parameters` with property `key`'s schema replaced by `schema` (its description kept when `schema` has none):
/// how a built-in tool writes its argument grammar.
pub fn with_property(
    parameters: &serde_json::Value,
    key: &str,
    schema: serde_json::Value,
) -> serde_json::Value {
    let mut out = parameters.clone();
    let description = parameters
        .pointer(&format!("/properties/{key}/description"))
        .cloned();
    let mut schema = schema;
    if let (Some(d), Some(obj)) = (description, schema.as_object_mut()) {
        obj.entry("description").or_insert(d);
    }
    if let Some(props) = out.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.insert(key.to_string(), schema);
    }
    out
}

/// The spec of a built-in tool whose arguments deserialize into `T`: the `schemars` schema (doc comments become
/// the descriptions the model sees) without the numeric `format` annotations schemars adds (`uint64`, `double`),
/// which the grammar does not enforce and admission would refuse; `minimum` still bounds unsigned fields.
pub fn builtin_spec<T: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    let mut parameters = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let serde_json::Value::Object(map) = &mut parameters {
        map.remove("$schema");
        map.remove("title");
    }
    strip_numeric_formats(&mut parameters);
    match ToolSpec::new(name, description, parameters.clone()) {
        Ok(spec) => spec,
        Err(e) => {
            // Unreachable in a tested build: the built-in argument types are fixed and a test checks that every
            // built-in spec is admitted. Falling back keeps the tool usable instead of panicking.
            tracing::error!(tool = name, error = %e, "built-in tool schema was not admitted");
            ToolSpec::new_unchecked(name, description, parameters)
        }
    }
}

/// Removes `format` values schemars attaches to Rust integer and float types, at every depth.
fn strip_numeric_formats(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            let numeric = map.get("format").and_then(|f| f.as_str()).is_some_and(|f| {
                matches!(f, "float" | "double")
                    || f.strip_prefix("uint")
                        .or_else(|| f.strip_prefix("int"))
                        .is_some_and(|bits| bits.chars().all(|c| c.is_ascii_digit()))
            });
            if numeric {
                map.remove("format");
            }
            map.values_mut().for_each(strip_numeric_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_numeric_formats),
        _ => {}
    }
}

/// Deserializes a tool's typed arguments; a mismatch goes back to the model with the tool's name.
pub fn parse_arguments<T: DeserializeOwned>(
    tool: &str,
    args: serde_json::Value,
) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::RespondToModel(format!("Invalid arguments for {tool}: {e}")))
}
