//! [`SessionTree`]: a session's entries in memory, validated as they are inserted (unique ids, parents that
//! exist), and what is computed from them: the path from the root to a leaf, the context the model sees from a leaf
//! (`build_context`: the latest compaction on the path applies, the latest model wins), the target of a rewind,
//! and the tree printed as text. Pure data: no I/O.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::entry::{EntryKind, SessionEntry, SessionHeader};
use super::{Location, SessionError};
use crate::env::now_ms;
use crate::provider::ContentBlock;
use crate::transcript::AgentMessage;

/// The model in effect on a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRef {
    /// Empty when it came from an assistant message (which records only the model id).
    pub provider: String,
    pub model_id: String,
}

/// What the model sees from one leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionContext {
    pub messages: Vec<AgentMessage>,
    /// For each message, the entry it came from (a compaction summary comes from its compaction entry).
    pub entry_ids: Vec<String>,
    /// The latest model on the path (a `model_change` entry or an assistant message's model).
    pub model: Option<ModelRef>,
    /// The latest thinking level on the path (`off` when none).
    pub thinking_level: String,
    /// The leaf the context was built from.
    pub leaf: Option<String>,
}

/// A session's entries, indexed.
#[derive(Debug, Clone)]
pub struct SessionTree {
    header: SessionHeader,
    entries: Vec<SessionEntry>,
    index: HashMap<String, usize>,
}

impl SessionTree {
    pub fn new(header: SessionHeader) -> Self {
        Self {
            header,
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub fn entries(&self) -> &[SessionEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&SessionEntry> {
        self.index.get(id).and_then(|&i| self.entries.get(i))
    }

    /// The last entry appended (Pi's leaf after loading a file).
    pub fn last_id(&self) -> Option<&str> {
        self.entries.last().map(|e| e.id.as_str())
    }

    /// Whether `id` has no children.
    pub fn is_leaf(&self, id: &str) -> bool {
        !self
            .entries
            .iter()
            .any(|e| e.parent_id.as_deref() == Some(id))
    }

    /// Checks that `entry` can be added: a fresh, non-empty id and references to existing entries.
    pub fn validate(&self, entry: &SessionEntry, at: &Location) -> Result<(), SessionError> {
        if entry.id.is_empty() || self.index.contains_key(&entry.id) {
            return Err(SessionError::DuplicateId {
                location: at.clone(),
                id: entry.id.clone(),
            });
        }
        let missing = |field: &'static str, target: &str| SessionError::MissingParent {
            location: at.clone(),
            id: entry.id.clone(),
            field,
            missing: target.to_string(),
        };
        if let Some(parent) = &entry.parent_id {
            if !self.index.contains_key(parent) {
                return Err(missing("parentId", parent));
            }
        }
        match &entry.kind {
            EntryKind::Compaction {
                first_kept_entry_id,
                ..
            } if !self.index.contains_key(first_kept_entry_id) => {
                Err(missing("firstKeptEntryId", first_kept_entry_id))
            }
            EntryKind::Label { target_id, .. } if !self.index.contains_key(target_id) => {
                Err(missing("targetId", target_id))
            }
            _ => Ok(()),
        }
    }

    /// Validates and adds `entry`.
    pub fn insert(&mut self, entry: SessionEntry, at: &Location) -> Result<(), SessionError> {
        self.validate(&entry, at)?;
        self.index.insert(entry.id.clone(), self.entries.len());
        self.entries.push(entry);
        Ok(())
    }

    /// A fresh id: 8 hex characters of a UUID, checked against the ids in use.
    pub fn new_id(&self) -> String {
        for _ in 0..100 {
            let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
            if !self.index.contains_key(&id) {
                return id;
            }
        }
        uuid::Uuid::new_v4().simple().to_string()
    }

    /// The entries from the root to `leaf`, in order (`None`: an empty path).
    pub fn path(&self, leaf: Option<&str>) -> Result<Vec<&SessionEntry>, SessionError> {
        let mut path = Vec::new();
        let mut current = match leaf {
            None => return Ok(path),
            Some(id) => Some(
                self.get(id)
                    .ok_or_else(|| SessionError::UnknownEntry(id.to_string()))?,
            ),
        };
        while let Some(e) = current {
            path.push(e);
            // Parents always precede children (checked on insert), so this walk ends.
            current = e.parent_id.as_deref().and_then(|p| self.get(p));
        }
        path.reverse();
        Ok(path)
    }

    /// The context the model sees from `leaf`: after the latest compaction on the path, its summary, then the
    /// path's messages from its first kept entry on; the latest model and thinking level on the path.
    pub fn build_context(&self, leaf: Option<&str>) -> Result<SessionContext, SessionError> {
        let path = self.path(leaf)?;
        let mut model: Option<ModelRef> = None;
        let mut thinking_level = "off".to_string();
        // (position on the path, summary, first kept entry id, tokens before)
        let mut compaction: Option<(usize, &str, &str, u64)> = None;
        for (i, e) in path.iter().enumerate() {
            match &e.kind {
                EntryKind::ModelChange { provider, model_id } => {
                    model = Some(ModelRef {
                        provider: provider.clone(),
                        model_id: model_id.clone(),
                    })
                }
                EntryKind::ThinkingLevelChange { thinking_level: t } => thinking_level = t.clone(),
                EntryKind::Message {
                    message: AgentMessage::Assistant(a),
                } if !a.model.is_empty() => {
                    let provider = model.as_ref().map(|m| m.provider.clone());
                    model = Some(ModelRef {
                        provider: provider.unwrap_or_default(),
                        model_id: a.model.clone(),
                    })
                }
                EntryKind::Compaction {
                    summary,
                    first_kept_entry_id,
                    tokens_before,
                    ..
                } => compaction = Some((i, summary, first_kept_entry_id, *tokens_before)),
                _ => {}
            }
        }
        let mut messages = Vec::new();
        let mut entry_ids = Vec::new();
        let kept: Vec<&SessionEntry> = match compaction {
            None => path.clone(),
            Some((c, summary, first_kept_id, tokens_before)) => {
                let entry = path[c];
                messages.push(AgentMessage::CompactionSummary {
                    summary: summary.to_string(),
                    tokens_before,
                    timestamp: parse_ms(&entry.timestamp),
                });
                entry_ids.push(entry.id.clone());
                let first_kept = path[..c]
                    .iter()
                    .position(|e| e.id == first_kept_id)
                    .ok_or_else(|| SessionError::MissingParent {
                        location: Location::append(None),
                        id: entry.id.clone(),
                        field: "firstKeptEntryId (on the path)",
                        missing: first_kept_id.to_string(),
                    })?;
                path[first_kept..c]
                    .iter()
                    .chain(&path[c + 1..])
                    .copied()
                    .collect()
            }
        };
        for e in kept {
            if let Some(m) = entry_message(e) {
                messages.push(m);
                entry_ids.push(e.id.clone());
            }
        }
        Ok(SessionContext {
            messages,
            entry_ids,
            model,
            thinking_level,
            leaf: leaf.map(str::to_string),
        })
    }

    /// The leaf after dropping the last `n` messages of the path to `leaf`: the parent of the `n`-th message
    /// from the end (`None`: before the first entry).
    pub fn rewind_target(
        &self,
        leaf: Option<&str>,
        n: usize,
    ) -> Result<Option<String>, SessionError> {
        if n == 0 {
            return Ok(leaf.map(str::to_string));
        }
        let path = self.path(leaf)?;
        let mut seen = 0;
        for e in path.iter().rev() {
            if matches!(e.kind, EntryKind::Message { .. }) {
                seen += 1;
                if seen == n {
                    return Ok(e.parent_id.clone());
                }
            }
        }
        Err(SessionError::RewindTooFar {
            requested: n,
            available: seen,
        })
    }

    /// The latest label of each entry.
    pub fn labels(&self) -> HashMap<&str, &str> {
        let mut labels = HashMap::new();
        for e in &self.entries {
            if let EntryKind::Label { target_id, label } = &e.kind {
                match label.as_deref().filter(|l| !l.is_empty()) {
                    Some(l) => labels.insert(target_id.as_str(), l),
                    None => labels.remove(target_id.as_str()),
                };
            }
        }
        labels
    }

    /// The tree as text, one entry per line: chains continue at the same indentation, branches are drawn with
    /// `├─`/`└─`; `*` marks the path to `leaf`, `<- leaf` the leaf itself, `[label]` labels.
    pub fn render(&self, leaf: Option<&str>) -> String {
        let on_path: std::collections::HashSet<&str> = self
            .path(leaf)
            .map(|p| p.iter().map(|e| e.id.as_str()).collect())
            .unwrap_or_default();
        let labels = self.labels();
        let mut children: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            children.entry(e.parent_id.as_deref()).or_default().push(i);
        }
        let mut out = format!(
            "session {} (cwd {}, {} entries)\n",
            self.header.id,
            self.header.cwd,
            self.entries.len()
        );
        // (entry index, prefix of its line, prefix of its descendants' lines)
        let mut stack: Vec<(usize, String, String)> = Vec::new();
        push_children(&mut stack, children.get(&None), "");
        while let Some((i, line_prefix, child_prefix)) = stack.pop() {
            let e = &self.entries[i];
            let mark = if on_path.contains(e.id.as_str()) {
                "* "
            } else {
                "  "
            };
            let label = labels
                .get(e.id.as_str())
                .map(|l| format!(" [{l}]"))
                .unwrap_or_default();
            let is_leaf = if leaf == Some(e.id.as_str()) {
                "  <- leaf"
            } else {
                ""
            };
            out.push_str(&format!(
                "{line_prefix}{mark}{} {}{label}{is_leaf}\n",
                e.id,
                describe(e)
            ));
            push_children(
                &mut stack,
                children.get(&Some(e.id.as_str())),
                &child_prefix,
            );
        }
        out
    }
}

/// Pushes `kids` so that they pop in order: a single child continues the chain, several are drawn as branches.
fn push_children(
    stack: &mut Vec<(usize, String, String)>,
    kids: Option<&Vec<usize>>,
    prefix: &str,
) {
    let Some(kids) = kids else { return };
    if kids.len() == 1 {
        stack.push((kids[0], prefix.to_string(), prefix.to_string()));
        return;
    }
    for (j, &k) in kids.iter().enumerate().rev() {
        let last = j + 1 == kids.len();
        let line = format!("{prefix}{}", if last { "└─" } else { "├─" });
        let child = format!("{prefix}{}", if last { "  " } else { "│ " });
        stack.push((k, line, child));
    }
}

/// The message an entry contributes to the context, if any.
fn entry_message(e: &SessionEntry) -> Option<AgentMessage> {
    match &e.kind {
        EntryKind::Message { message } => Some(message.clone()),
        EntryKind::CustomMessage {
            custom_type,
            content,
            display,
            details,
        } => Some(AgentMessage::Custom {
            custom_type: custom_type.clone(),
            content: content.clone(),
            display: *display,
            details: details.clone(),
            timestamp: parse_ms(&e.timestamp),
        }),
        EntryKind::BranchSummary {
            from_id, summary, ..
        } if !summary.is_empty() => Some(AgentMessage::BranchSummary {
            summary: summary.clone(),
            from_id: from_id.clone(),
            timestamp: parse_ms(&e.timestamp),
        }),
        _ => None,
    }
}

/// Milliseconds of an ISO timestamp (now, if it does not parse).
fn parse_ms(ts: &str) -> u64 {
    chrono::DateTime::parse_from_rfc3339(ts)
        .map(|t| t.timestamp_millis().max(0) as u64)
        .unwrap_or_else(|_| now_ms())
}

/// One line's worth of what an entry is.
fn describe(e: &SessionEntry) -> String {
    match &e.kind {
        EntryKind::Message { message } => describe_message(message),
        EntryKind::ModelChange { provider, model_id } => {
            format!("model_change {provider}/{model_id}")
        }
        EntryKind::ThinkingLevelChange { thinking_level } => {
            format!("thinking_level {thinking_level}")
        }
        EntryKind::Compaction { tokens_before, .. } => {
            format!("compaction (tokens_before {tokens_before})")
        }
        EntryKind::BranchSummary { summary, .. } => format!("branch_summary: {}", snippet(summary)),
        EntryKind::Label { target_id, label } => match label {
            Some(l) => format!("label {target_id} = {l:?}"),
            None => format!("label {target_id} cleared"),
        },
        EntryKind::Custom { custom_type, .. } => format!("custom {custom_type}"),
        EntryKind::CustomMessage {
            custom_type,
            content,
            ..
        } => format!("custom_message {custom_type}: {}", snippet(content)),
        EntryKind::SessionInfo { name } => {
            format!("session_info {}", name.as_deref().unwrap_or(""))
        }
    }
}

fn describe_message(m: &AgentMessage) -> String {
    match m {
        AgentMessage::User { content, .. } => format!("user: {}", snippet(content)),
        AgentMessage::Assistant(a) => {
            let calls: Vec<String> = a
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolCall(c) => Some(c.name.clone()),
                    _ => None,
                })
                .collect();
            let text = snippet(&a.text());
            if calls.is_empty() {
                format!("assistant: {text}")
            } else {
                format!("assistant: {text} -> {}", calls.join(", "))
            }
        }
        AgentMessage::ToolResult(r) => format!(
            "tool_result {}{}: {} lines",
            r.tool_name,
            if r.is_error { " (error)" } else { "" },
            r.content.lines().count()
        ),
        AgentMessage::BashExecution { command, .. } => format!("bash: {}", snippet(command)),
        AgentMessage::CompactionSummary { .. } => "compaction_summary".into(),
        AgentMessage::BranchSummary { summary, .. } => {
            format!("branch_summary: {}", snippet(summary))
        }
        AgentMessage::Custom {
            custom_type,
            content,
            ..
        } => format!("custom {custom_type}: {}", snippet(content)),
    }
}

/// The first line of `s`, at most 60 characters, quoted.
fn snippet(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(60).collect();
    if line.chars().count() > 60 || s.lines().nth(1).is_some() {
        out.push('…');
    }
    format!("{out:?}")
}
