//! Approvals: what each tool call may do without asking the user.
//!
//! An [`ApprovalPolicy`] gives every tool tag (`read_only`, `write`, `exec`, `network`) a mode: `allow` (run),
//! `ask` (the user decides, call by call) or `deny` (never; tools that need a denied tag are not offered). A call
//! is judged by its tool's strictest tag. [`Approvals`] is the running part, installed as the agent's
//! `before_tool_call` hook: an `ask` call becomes an [`ApprovalRequest`] handed to whichever door is attached
//! (the TUI's y / n / always prompt, an RPC `approval_request` line, an HTTP `approval_request` event), and the
//! call waits until the door answers with [`Approvals::resolve`]. "Always" allows that tool for the rest of the
//! session. A denied call (or one nobody is there to approve) returns an error result the model sees.
//!
//! Defaults: `agentd chat` and RPC mode ask before `write`, `exec` and `network`
//! ([`ApprovalPolicy::interactive`]); `agentd run -p` allows reads and writes and denies `exec` and `network`
//! ([`ApprovalPolicy::print`]); the HTTP sessions API allows what the session's policy allows unless the request
//! asks for approvals.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use super::AppError;
use crate::agent::{BeforeToolCall, BeforeToolCallHook};
use crate::provider::ToolCall;
use crate::tools::policy::{FileScope, ParsePolicyError, Policy};
use crate::tools::tool::PolicyTag;

/// What a tag may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Run without asking.
    #[default]
    Allow,
    /// Ask the user before each call.
    Ask,
    /// Never run (the tool is not offered).
    Deny,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Allow => "allow",
            Approval::Ask => "ask",
            Approval::Deny => "deny",
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Approval {
    type Err = ApprovalParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allow" | "yes" => Ok(Approval::Allow),
            "ask" => Ok(Approval::Ask),
            "deny" | "no" => Ok(Approval::Deny),
            other => Err(ApprovalParseError(format!(
                "unknown approval mode '{other}' (known: allow, ask, deny)"
            ))),
        }
    }
}

/// An approval policy or mode that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApprovalParseError(pub String);

impl From<ParsePolicyError> for ApprovalParseError {
    fn from(e: ParsePolicyError) -> Self {
        ApprovalParseError(e.to_string())
    }
}

/// A mode for every tag (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    modes: BTreeMap<PolicyTag, Approval>,
}

impl ApprovalPolicy {
    /// Every tag set to `mode`.
    pub fn uniform(mode: Approval) -> Self {
        Self {
            modes: PolicyTag::ALL.iter().map(|t| (*t, mode)).collect(),
        }
    }

    /// Everything runs without asking.
    pub fn allow_all() -> Self {
        Self::uniform(Approval::Allow)
    }

    /// `agentd chat` and RPC mode: reads run, writes, commands and network access are asked about.
    pub fn interactive() -> Self {
        let mut p = Self::uniform(Approval::Ask);
        p.set(PolicyTag::ReadOnly, Approval::Allow);
        p
    }

    /// `agentd run -p` (nobody to ask): reads and writes run, commands and network access are denied.
    pub fn print() -> Self {
        let mut p = Self::uniform(Approval::Deny);
        p.set(PolicyTag::ReadOnly, Approval::Allow);
        p.set(PolicyTag::Write, Approval::Allow);
        p
    }

    pub fn get(&self, tag: PolicyTag) -> Approval {
        self.modes.get(&tag).copied().unwrap_or_default()
    }

    pub fn set(&mut self, tag: PolicyTag, mode: Approval) {
        self.modes.insert(tag, mode);
    }

    /// Sets `mode` for the tags of a policy string (`write,exec`, `all`, `none`).
    pub fn set_tags(&mut self, tags: &str, mode: Approval) -> Result<(), ApprovalParseError> {
        let tags: Policy = tags.parse()?;
        for tag in tags.allowed() {
            self.set(tag, mode);
        }
        Ok(())
    }

    /// Applies `tag=mode` pairs, comma-separated (`write=ask,exec=deny`; `all=ask` sets every tag).
    pub fn apply(&mut self, spec: &str) -> Result<(), ApprovalParseError> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((tags, mode)) = part.split_once('=') else {
                return Err(ApprovalParseError(format!(
                    "'{part}' is not TAG=MODE (e.g. write=ask, exec=deny)"
                )));
            };
            self.set_tags(tags, mode.parse()?)?;
        }
        Ok(())
    }

    /// The mode of a call to a tool with these tags: the strictest tag's (a tool without tags runs).
    pub fn decide(&self, tags: &[PolicyTag]) -> Approval {
        tags.iter()
            .map(|t| self.get(*t))
            .max()
            .unwrap_or(Approval::Allow)
    }

    /// The tags that are not denied.
    pub fn policy(&self) -> Policy {
        Policy::from_tags(
            PolicyTag::ALL
                .into_iter()
                .filter(|t| self.get(*t) != Approval::Deny),
        )
    }

    /// Whether any tag is asked about.
    pub fn asks(&self) -> bool {
        self.modes.values().any(|m| *m == Approval::Ask)
    }

    /// `(tag, mode)` for every tag, in canonical order.
    pub fn modes(&self) -> impl Iterator<Item = (PolicyTag, Approval)> + '_ {
        PolicyTag::ALL.into_iter().map(|t| (t, self.get(t)))
    }
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self::allow_all()
    }
}

impl fmt::Display for ApprovalPolicy {
    /// `read_only=allow,write=ask,exec=ask,network=ask`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .modes()
            .map(|(t, m)| format!("{}={m}", t.as_str()))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for ApprovalPolicy {
    type Err = ApprovalParseError;

    /// `tag=mode` pairs over [`ApprovalPolicy::allow_all`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = Self::allow_all();
        p.apply(s)?;
        Ok(p)
    }
}

/// A call waiting for the user.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    /// Answer with this id.
    pub id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub arguments: Value,
    /// The tool's tags that are asked about.
    pub tags: Vec<String>,
    /// What the call would do, for a person: the command for `bash`, a unified diff for `edit` and `write`.
    pub preview: String,
}

/// The user's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this call.
    #[serde(alias = "yes", alias = "approve", alias = "y")]
    Allow,
    /// Run this call and every later call of the same tool in this session.
    #[serde(alias = "always_allow", alias = "a")]
    Always,
    /// Do not run it; the model gets an error result.
    #[serde(alias = "no", alias = "reject", alias = "n")]
    Deny,
}

impl FromStr for Decision {
    type Err = ApprovalParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(Value::String(s.trim().to_ascii_lowercase())).map_err(|_| {
            ApprovalParseError(format!(
                "unknown decision '{s}' (known: allow, always, deny)"
            ))
        })
    }
}

/// Where approval requests go: the door that is attached (called on the agent's task; must not block).
pub type ApprovalSink = Arc<dyn Fn(ApprovalRequest) + Send + Sync>;

struct Pending {
    request: ApprovalRequest,
    reply: oneshot::Sender<(Decision, Option<String>)>,
}

struct State {
    policy: ApprovalPolicy,
    /// Tools the user allowed for the rest of the session.
    always: BTreeSet<String>,
    pending: Vec<Pending>,
    sink: Option<ApprovalSink>,
    next_id: u64,
}

/// The running approvals of one coding session (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approvals")
            .field("policy", &self.policy().to_string())
            .finish_non_exhaustive()
    }
}

/// Where the hook finds what it needs to judge and describe a call.
#[derive(Clone)]
pub struct HookContext {
    /// The offered tools' tags, by name.
    pub tags: HashMap<String, Vec<PolicyTag>>,
    pub cwd: PathBuf,
    pub workspace: Option<PathBuf>,
}

impl Approvals {
    pub fn new(policy: ApprovalPolicy) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                policy,
                always: BTreeSet::new(),
                pending: Vec::new(),
                sink: None,
                next_id: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn policy(&self) -> ApprovalPolicy {
        self.lock().policy.clone()
    }

    /// The tools allowed for the rest of the session ("always").
    pub fn always_allowed(&self) -> Vec<String> {
        self.lock().always.iter().cloned().collect()
    }

    /// Attaches the door that answers requests (`None`: nobody; `ask` calls are then refused).
    pub fn set_sink(&self, sink: Option<ApprovalSink>) {
        self.lock().sink = sink;
    }

    /// The requests waiting for an answer, oldest first.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        self.lock()
            .pending
            .iter()
            .map(|p| p.request.clone())
            .collect()
    }

    /// Answers the request `id`. `NotFound` when no request with that id is waiting.
    pub fn resolve(
        &self,
        id: &str,
        decision: Decision,
        reason: Option<String>,
    ) -> Result<(), AppError> {
        let mut state = self.lock();
        let Some(at) = state.pending.iter().position(|p| p.request.id == id) else {
            return Err(AppError::NotFound(format!(
                "no approval request `{id}` is waiting"
            )));
        };
        let pending = state.pending.remove(at);
        if decision == Decision::Always {
            state.always.insert(pending.request.tool_name.clone());
        }
        drop(state);
        // The run may have ended meanwhile; then nobody waits and there is nothing to do.
        let _ = pending.reply.send((decision, reason));
        Ok(())
    }

    /// Denies every waiting request (the run was aborted, the door went away).
    pub fn deny_all(&self, reason: &str) {
        let pending = std::mem::take(&mut self.lock().pending);
        for p in pending {
            let _ = p.reply.send((Decision::Deny, Some(reason.to_string())));
        }
    }

    /// Judges one call: runs it, refuses it, or asks the attached door and waits for the answer.
    pub async fn check(&self, call: &ToolCall, context: &HookContext) -> BeforeToolCall {
        let tags = context.tags.get(&call.name).cloned().unwrap_or_default();
        let rx = {
            let mut state = self.lock();
            match state.policy.decide(&tags) {
                Approval::Allow => return BeforeToolCall::Proceed,
                Approval::Deny => {
                    return BeforeToolCall::Block(format!(
                        "the approval policy denies {}",
                        tag_list(&tags, &state.policy, Approval::Deny)
                    ))
                }
                Approval::Ask if state.always.contains(&call.name) => {
                    return BeforeToolCall::Proceed
                }
                Approval::Ask => {}
            }
            let Some(sink) = state.sink.clone() else {
                return BeforeToolCall::Block(format!(
                    "`{}` needs the user's approval ({}) and nobody is here to give it; run with --allow {}",
                    call.name,
                    tag_list(&tags, &state.policy, Approval::Ask),
                    tag_list(&tags, &state.policy, Approval::Ask),
                ));
            };
            state.next_id += 1;
            let request = ApprovalRequest {
                id: format!("approval-{}", state.next_id),
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                tags: tags
                    .iter()
                    .filter(|t| state.policy.get(**t) == Approval::Ask)
                    .map(|t| t.as_str().to_string())
                    .collect(),
                preview: preview(call, context),
            };
            let (tx, rx) = oneshot::channel();
            state.pending.push(Pending {
                request: request.clone(),
                reply: tx,
            });
            drop(state);
            sink(request);
            rx
        };
        match rx.await {
            Ok((Decision::Allow | Decision::Always, _)) => BeforeToolCall::Proceed,
            Ok((Decision::Deny, reason)) => BeforeToolCall::Block(match reason {
                Some(r) if !r.trim().is_empty() => format!("the user denied it: {}", r.trim()),
                _ => "the user denied it".into(),
            }),
            Err(_) => BeforeToolCall::Block("the approval request was dropped".into()),
        }
    }

    /// The `before_tool_call` hook that runs [`Approvals::check`].
    pub fn hook(&self, context: HookContext) -> BeforeToolCallHook {
        let approvals = self.clone();
        let context = Arc::new(context);
        Arc::new(move |call: &ToolCall| {
            let approvals = approvals.clone();
            let context = context.clone();
            let call = call.clone();
            async move { approvals.check(&call, &context).await }.boxed()
        })
    }
}

/// The tags among `tags` whose mode is `mode`, comma-separated.
fn tag_list(tags: &[PolicyTag], policy: &ApprovalPolicy, mode: Approval) -> String {
    let names: Vec<&str> = tags
        .iter()
        .filter(|t| policy.get(**t) == mode)
        .map(|t| t.as_str())
        .collect();
    names.join(",")
}

/// The longest preview shown (a large `write` is cut, with a note).
const PREVIEW_BYTES: usize = 8 * 1024;

/// What a call would do, for a person: `bash`'s command, `edit`'s diff, `write`'s diff against the file (or its
/// content when the file is new), else the arguments as JSON.
pub fn preview(call: &ToolCall, context: &HookContext) -> String {
    let args = &call.arguments;
    let text = |k: &str| args.get(k).and_then(Value::as_str);
    let shown = match call.name.as_str() {
        "bash" => text("command").map(|c| format!("$ {c}")),
        "edit" => edit_preview(args, context),
        "write" => match (text("path"), text("content")) {
            (Some(path), Some(content)) => Some(write_preview(path, content, context)),
            _ => None,
        },
        _ => None,
    };
    let shown = shown
        .unwrap_or_else(|| serde_json::to_string_pretty(args).unwrap_or_else(|_| args.to_string()));
    cut(shown)
}

fn cut(mut text: String) -> String {
    if text.len() > PREVIEW_BYTES {
        let mut end = PREVIEW_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let total = text.len();
        text.truncate(end);
        text.push_str(&format!("\n… ({total} bytes in all)"));
    }
    text
}

/// The largest file a preview diffs against (a larger one is previewed as if new).
const PREVIEW_SOURCE_BYTES: u64 = 4 * 1024 * 1024;

/// The call's files as the tools would reach them: a path they refuse shows nothing of the file.
fn scope(context: &HookContext) -> FileScope {
    FileScope::new(context.cwd.clone(), context.workspace.clone())
}

fn edit_preview(args: &Value, context: &HookContext) -> Option<String> {
    let parsed: crate::tools::edit::EditArgs = serde_json::from_value(args.clone()).ok()?;
    let original = scope(context).read_text(&parsed.path, PREVIEW_SOURCE_BYTES)?;
    match crate::tools::edit::apply_edits(&original, &parsed.edits, &parsed.path) {
        Ok(edited) => Some(edited.diff),
        Err(why) => Some(format!("{}\n(the edit would fail: {why})", parsed.path)),
    }
}

fn write_preview(path: &str, content: &str, context: &HookContext) -> String {
    match scope(context).read_text(path, PREVIEW_SOURCE_BYTES) {
        Some(old) => similar::TextDiff::from_lines(old.as_str(), content)
            .unified_diff()
            .context_radius(3)
            .header(path, path)
            .to_string(),
        None => format!(
            "new file {path} ({} lines)\n{content}",
            content.lines().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_print_and_decide_by_the_strictest_tag() {
        let p: ApprovalPolicy = "write=ask,exec=deny".parse().unwrap();
        assert_eq!(
            p.to_string(),
            "read_only=allow,write=ask,exec=deny,network=allow"
        );
        assert_eq!(p.decide(&[PolicyTag::ReadOnly]), Approval::Allow);
        assert_eq!(
            p.decide(&[PolicyTag::ReadOnly, PolicyTag::Write]),
            Approval::Ask
        );
        assert_eq!(
            p.decide(&[PolicyTag::Write, PolicyTag::Exec]),
            Approval::Deny
        );
        assert_eq!(p.decide(&[]), Approval::Allow);
        assert_eq!(p.policy().name(), "read_only,write,network");
        assert!("all=ask".parse::<ApprovalPolicy>().unwrap().asks());
        assert!("write".parse::<ApprovalPolicy>().is_err());
        assert!("write=maybe".parse::<ApprovalPolicy>().is_err());
        assert!("wrote=ask".parse::<ApprovalPolicy>().is_err());
        assert_eq!(
            ApprovalPolicy::print().to_string(),
            "read_only=allow,write=allow,exec=deny,network=deny"
        );
        assert_eq!(
            ApprovalPolicy::interactive().to_string(),
            "read_only=allow,write=ask,exec=ask,network=ask"
        );
        assert_eq!("Always".parse::<Decision>().unwrap(), Decision::Always);
        assert!("perhaps".parse::<Decision>().is_err());
    }

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args,
            invalid: None,
        }
    }

    fn context(dir: &std::path::Path) -> HookContext {
        HookContext {
            tags: [
                ("bash".to_string(), vec![PolicyTag::Exec]),
                ("edit".to_string(), vec![PolicyTag::Write]),
                ("read".to_string(), vec![PolicyTag::ReadOnly]),
            ]
            .into_iter()
            .collect(),
            cwd: dir.to_path_buf(),
            workspace: None,
        }
    }

    #[tokio::test]
    async fn ask_waits_for_the_door_and_always_sticks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        let ctx = context(dir.path());
        let approvals = Approvals::new(ApprovalPolicy::interactive());

        // Nobody attached: refused with a hint.
        let bash = call("bash", serde_json::json!({"command": "ls"}));
        match approvals.check(&bash, &ctx).await {
            BeforeToolCall::Block(why) => assert!(why.contains("--allow exec"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            approvals
                .check(&call("read", serde_json::json!({"path": "a.txt"})), &ctx)
                .await,
            BeforeToolCall::Proceed
        );

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        approvals.set_sink(Some(Arc::new(move |r| {
            let _ = tx.send(r);
        })));
        let edit = call(
            "edit",
            serde_json::json!({"path": "a.txt", "edits": [{"old_text": "two", "new_text": "2"}]}),
        );
        let waiting = tokio::spawn({
            let (a, c, e) = (approvals.clone(), ctx.clone(), edit.clone());
            async move { a.check(&e, &c).await }
        });
        let request = rx.recv().await.unwrap();
        assert_eq!(request.tool_name, "edit");
        assert_eq!(request.tags, ["write"]);
        assert!(
            request.preview.contains("-two") && request.preview.contains("+2"),
            "{}",
            request.preview
        );
        assert_eq!(approvals.pending().len(), 1);
        assert!(approvals
            .resolve("approval-999", Decision::Allow, None)
            .is_err());
        approvals
            .resolve(&request.id, Decision::Deny, Some("not now".into()))
            .unwrap();
        match waiting.await.unwrap() {
            BeforeToolCall::Block(why) => assert!(why.contains("not now"), "{why}"),
            other => panic!("{other:?}"),
        }

        // "always": this call and the next of the same tool run without asking.
        let waiting = tokio::spawn({
            let (a, c, e) = (approvals.clone(), ctx.clone(), edit.clone());
            async move { a.check(&e, &c).await }
        });
        let request = rx.recv().await.unwrap();
        approvals
            .resolve(&request.id, Decision::Always, None)
            .unwrap();
        assert_eq!(waiting.await.unwrap(), BeforeToolCall::Proceed);
        assert_eq!(approvals.check(&edit, &ctx).await, BeforeToolCall::Proceed);
        assert_eq!(approvals.always_allowed(), ["edit"]);

        // An abort denies what waits.
        let waiting = tokio::spawn({
            let (a, c) = (approvals.clone(), ctx.clone());
            async move { a.check(&bash, &c).await }
        });
        let request = rx.recv().await.unwrap();
        assert!(request.preview.starts_with("$ ls"));
        approvals.deny_all("aborted");
        assert!(matches!(waiting.await.unwrap(), BeforeToolCall::Block(_)));
        assert!(approvals.pending().is_empty());
    }
}
