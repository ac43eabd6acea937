//! The lines of a session file (Pi's JSONL v3): a header line `{"type":"session","version":3,"id","timestamp",
//! "cwd"}`, then one entry per line, `{"type", "id", "parentId", "timestamp", …}`. Field names are camelCase as in
//! Pi's files; messages inside `message` entries are our [`AgentMessage`] (tagged by `role`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::transcript::AgentMessage;

/// The format version this build writes and reads.
pub const SESSION_VERSION: u32 = 3;

/// An ISO-8601 UTC timestamp with milliseconds (`2025-01-02T03:04:05.678Z`), as Pi writes them.
pub fn iso_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    pub version: u32,
    /// A UUID naming the session.
    pub id: String,
    pub timestamp: String,
    /// The working directory the session was started in.
    pub cwd: String,
    /// The file this session was forked from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
}

impl SessionHeader {
    /// A fresh header for `cwd`.
    pub fn new(cwd: impl Into<String>) -> Self {
        Self {
            version: SESSION_VERSION,
            id: uuid::Uuid::new_v4().to_string(),
            timestamp: iso_now(),
            cwd: cwd.into(),
            parent_session: None,
        }
    }

    /// The header as one JSON line (without the newline), `type` first.
    pub fn to_line(&self) -> String {
        let mut map = Map::new();
        map.insert("type".into(), Value::from("session"));
        if let Ok(Value::Object(fields)) = serde_json::to_value(self) {
            map.extend(fields);
        }
        Value::Object(map).to_string()
    }
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// Unique within the file (8 hex characters when we generate it).
    pub id: String,
    /// The entry this one follows; `None` for a root.
    #[serde(rename = "parentId", default)]
    pub parent_id: Option<String>,
    pub timestamp: String,
    #[serde(flatten)]
    pub kind: EntryKind,
}

impl SessionEntry {
    pub fn new(id: impl Into<String>, parent_id: Option<String>, kind: EntryKind) -> Self {
        Self {
            id: id.into(),
            parent_id,
            timestamp: iso_now(),
            kind,
        }
    }

    /// The entry as one JSON line (without the newline): `type`, `id`, `parentId`, `timestamp`, then the rest.
    pub fn to_line(&self) -> String {
        let mut map = Map::new();
        let fields = match serde_json::to_value(&self.kind) {
            Ok(Value::Object(m)) => m,
            // Every kind serialises to an object; keep the line valid JSON even if that ever changed.
            _ => Map::new(),
        };
        map.insert(
            "type".into(),
            fields.get("type").cloned().unwrap_or(Value::Null),
        );
        map.insert("id".into(), Value::from(self.id.clone()));
        map.insert(
            "parentId".into(),
            self.parent_id.clone().map_or(Value::Null, Value::from),
        );
        map.insert("timestamp".into(), Value::from(self.timestamp.clone()));
        for (k, v) in fields {
            if k != "type" {
                map.insert(k, v);
            }
        }
        Value::Object(map).to_string()
    }

    /// The snake_case type name.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

/// What an entry records. Tagged by `type`; fields are camelCase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum EntryKind {
    /// A message of the transcript.
    Message { message: AgentMessage },
    /// The model changed from here on.
    ModelChange { provider: String, model_id: String },
    /// The reasoning effort changed from here on.
    ThinkingLevelChange { thinking_level: String },
    /// Messages before `first_kept_entry_id` are replaced by `summary` in the context built from any leaf below.
    Compaction {
        summary: String,
        first_kept_entry_id: String,
        tokens_before: u64,
        /// Files read and modified, grounding refs, whether the model summarised (see `agent::compaction`).
        #[serde(default, skip_serializing_if = "Value::is_null")]
        details: Value,
    },
    /// A summary of the branch that was left when branching from `from_id`.
    BranchSummary {
        from_id: String,
        summary: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        details: Value,
    },
    /// A user bookmark on `target_id` (`label: None` clears it).
    Label {
        target_id: String,
        #[serde(default)]
        label: Option<String>,
    },
    /// Application state; never part of the model's context.
    Custom {
        custom_type: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        data: Value,
    },
    /// An application message that is part of the model's context (as user text when `display`).
    CustomMessage {
        custom_type: String,
        content: String,
        #[serde(default)]
        display: bool,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        details: Value,
    },
    /// Session metadata (a display name).
    SessionInfo {
        #[serde(default)]
        name: Option<String>,
    },
}

impl EntryKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EntryKind::Message { .. } => "message",
            EntryKind::ModelChange { .. } => "model_change",
            EntryKind::ThinkingLevelChange { .. } => "thinking_level_change",
            EntryKind::Compaction { .. } => "compaction",
            EntryKind::BranchSummary { .. } => "branch_summary",
            EntryKind::Label { .. } => "label",
            EntryKind::Custom { .. } => "custom",
            EntryKind::CustomMessage { .. } => "custom_message",
            EntryKind::SessionInfo { .. } => "session_info",
        }
    }

    /// A message entry.
    pub fn message(message: AgentMessage) -> Self {
        EntryKind::Message { message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_put_the_envelope_first_and_round_trip() {
        let e = SessionEntry {
            id: "a1b2c3d4".into(),
            parent_id: None,
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            kind: EntryKind::Compaction {
                summary: "S".into(),
                first_kept_entry_id: "x".into(),
                tokens_before: 12,
                details: Value::Null,
            },
        };
        let line = e.to_line();
        assert!(
            line.starts_with(
                r#"{"type":"compaction","id":"a1b2c3d4","parentId":null,"timestamp":"#
            ),
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["firstKeptEntryId"], json!("x"));
        assert_eq!(v["tokensBefore"], json!(12));
        let back: SessionEntry = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
        let h = SessionHeader::new("/w");
        assert!(h
            .to_line()
            .starts_with(r#"{"type":"session","version":3,"id":"#));
    }
}
