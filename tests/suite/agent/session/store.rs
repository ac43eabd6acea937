//! JsonlStore: tree operations and `build_context` against hand-written fixtures, a torn last line, and bad input
//! (`kill -9` of a writer process and a full disk are `durability.rs`).
use agentd::agent::AgentMessage;
use agentd::session::{
    EntryKind, JsonlStore, ModelRef, SessionEntry, SessionError, SessionStore, StoreOptions,
};

use super::{copy_fixture, fixture, llm_view};

fn open(name: &str, dir: &std::path::Path) -> JsonlStore {
    JsonlStore::open(&copy_fixture(name, dir), StoreOptions::default()).unwrap()
}

fn user(text: &str) -> EntryKind {
    EntryKind::message(AgentMessage::user(text))
}

fn texts(messages: &[AgentMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            AgentMessage::User { content, .. } => format!("user:{content}"),
            AgentMessage::Assistant(a) => format!("assistant:{}", a.text()),
            AgentMessage::ToolResult(r) => format!("tool:{}", r.content),
            AgentMessage::CompactionSummary { summary, .. } => format!("summary:{summary}"),
            AgentMessage::Custom { content, .. } => format!("custom:{content}"),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn build_context_applies_the_latest_compaction_and_model_on_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = open("tree.jsonl", dir.path());
    assert_eq!(store.leaf().as_deref(), Some("s1"));
    let ctx = store.build_context(None).unwrap();
    assert_eq!(
        texts(&ctx.messages),
        vec![
            "summary:## Goal\nList and read files",
            "assistant:Two files.",
            "user:read b.rs instead",
            "assistant:b.rs is empty",
            "custom:remember this",
        ]
    );
    assert_eq!(ctx.entry_ids, vec!["k1", "a2", "u3", "a4", "x2"]);
    assert_eq!(
        ctx.model,
        Some(ModelRef {
            provider: "local".into(),
            model_id: "smollm2".into()
        })
    );
    assert_eq!(ctx.thinking_level, "high");
    match &ctx.messages[0] {
        AgentMessage::CompactionSummary { tokens_before, .. } => assert_eq!(*tokens_before, 500),
        m => panic!("{m:?}"),
    }
    // The other branch: no compaction on it, and its last assistant names another model.
    let other = store.build_context(Some("a3")).unwrap();
    assert_eq!(
        texts(&other.messages),
        vec![
            "user:list the files",
            "assistant:",
            "tool:a.rs\nb.rs",
            "assistant:Two files.",
            "user:read a.rs",
            "assistant:a.rs says hi",
        ]
    );
    assert_eq!(other.model.unwrap().model_id, "qwen");
    assert!(matches!(
        store.build_context(Some("nope")),
        Err(SessionError::UnknownEntry(_))
    ));
}

#[tokio::test]
async fn branch_checkout_rewind_and_the_printed_tree() {
    let dir = tempfile::tempdir().unwrap();
    let store = open("tree.jsonl", dir.path());
    let tree = store.render_tree();
    assert!(
        tree.starts_with(
            "session 11111111-2222-3333-4444-555555555555 (cwd /work/proj, 15 entries)\n"
        ),
        "{tree}"
    );
    // a2 has two children: drawn as branches; the current path is starred; the label shows.
    assert!(tree.contains("├─  u2 user: \"read a.rs\""), "{tree}");
    assert!(
        tree.contains("└─* u3 user: \"read b.rs instead\" [alt]"),
        "{tree}"
    );
    assert!(tree.contains("* s1 session_info demo  <- leaf"), "{tree}");

    // checkout: only leaves.
    assert!(matches!(store.checkout("a2"), Err(SessionError::NotALeaf(id)) if id == "a2"));
    assert!(matches!(
        store.checkout("zz"),
        Err(SessionError::UnknownEntry(_))
    ));
    store.checkout("a3").unwrap();
    assert_eq!(store.build_context(None).unwrap().messages.len(), 6);

    // rewind 2 messages from a3: back to a2, and appending there starts a third branch.
    assert_eq!(store.rewind(2).unwrap().as_deref(), Some("a2"));
    let e = store.append(user("read c.rs")).await.unwrap();
    assert_eq!(e.parent_id.as_deref(), Some("a2"));
    assert_eq!(
        texts(&store.build_context(None).unwrap().messages)
            .last()
            .unwrap(),
        "user:read c.rs"
    );
    assert!(matches!(
        store.rewind(100),
        Err(SessionError::RewindTooFar {
            requested: 100,
            available: 5
        })
    ));

    // branch from any entry (u1) and from before the first entry (a new root).
    store.branch(Some("u1")).unwrap();
    let b = store.append(user("again")).await.unwrap();
    assert_eq!(b.parent_id.as_deref(), Some("u1"));
    assert_eq!(
        texts(&store.build_context(None).unwrap().messages),
        vec!["user:list the files", "user:again"]
    );
    store.branch(None).unwrap();
    let root = store.append(user("fresh start")).await.unwrap();
    assert_eq!(root.parent_id, None);
    assert!(matches!(
        store.branch(Some("zz")),
        Err(SessionError::UnknownEntry(_))
    ));

    // A branch summary records where the branch came from and enters the context.
    let s = store
        .branch_with_summary(Some("a2"), "tried c.rs".into())
        .await
        .unwrap();
    assert!(matches!(&s.kind, EntryKind::BranchSummary { from_id, .. } if from_id == "a2"));
    let ctx = store.build_context(None).unwrap();
    assert!(
        matches!(ctx.messages.last(), Some(AgentMessage::BranchSummary { summary, .. }) if summary == "tried c.rs")
    );

    // Everything survives a reopen; the leaf is the last entry appended.
    let path = store.path().to_path_buf();
    let before = store.entries();
    drop(store);
    let again = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(again.entries(), before);
    assert_eq!(again.leaf(), Some(s.id));
}

#[tokio::test]
async fn fork_writes_the_path_to_a_new_file_and_list_finds_both() {
    let dir = tempfile::tempdir().unwrap();
    let store = open("tree.jsonl", dir.path());
    let fork = store.fork(None, StoreOptions::default()).unwrap();
    assert_ne!(fork.path(), store.path());
    assert_eq!(
        fork.header().parent_session.as_deref(),
        Some(store.path().to_str().unwrap())
    );
    assert_eq!(fork.header().cwd, "/work/proj");
    // The path without its label entry, then the label recreated at the end.
    let ids: Vec<String> = fork.entries().iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        &ids[..12],
        &["u1", "m1", "a1", "t1", "a2", "u3", "k1", "a4", "x1", "x2", "th1", "s1"]
    );
    assert!(
        matches!(&fork.entries()[12].kind, EntryKind::Label { target_id, label } if target_id == "u3" && label.as_deref() == Some("alt"))
    );
    assert_eq!(
        llm_view(&fork.build_context(None).unwrap().messages),
        llm_view(&store.build_context(None).unwrap().messages)
    );
    let small = store.fork(Some("a3"), StoreOptions::default()).unwrap();
    assert_eq!(small.entries().len(), 7);
    // The fork appends on its own (a few ms later, so "newest activity" below is well defined: entries are
    // stamped to the millisecond).
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    small.append(user("only here")).await.unwrap();
    assert_eq!(store.entries().len(), 15);

    let list = JsonlStore::list(dir.path()).unwrap();
    assert_eq!(list.len(), 3);
    let original = list.iter().find(|i| i.path == store.path()).unwrap();
    assert_eq!(original.name.as_deref(), Some("demo"));
    assert_eq!(original.message_count, 8);
    assert_eq!(original.first_message, "list the files");
    let forked = list.iter().find(|i| i.path == small.path()).unwrap();
    assert_eq!(
        forked.parent_session.as_deref(),
        Some(store.path().to_str().unwrap())
    );
    assert_eq!(forked.message_count, 7);
    // Newest activity first.
    assert_eq!(list[0].path, small.path());
    // A missing directory has no sessions.
    assert!(JsonlStore::list(&dir.path().join("none"))
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn sessions_live_per_working_directory_under_agentd_home() {
    let home = tempfile::tempdir().unwrap();
    let dir = agentd::session::sessions_dir_in(home.path(), std::path::Path::new("/home/me/proj"));
    assert_eq!(dir, home.path().join("sessions").join("--home-me-proj--"));
    let store = JsonlStore::create(
        &dir,
        std::path::Path::new("/home/me/proj"),
        StoreOptions::default(),
    )
    .unwrap();
    store.append(user("hi")).await.unwrap();
    let name = store
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        name.ends_with(&format!("_{}.jsonl", store.header().id)),
        "{name}"
    );
    let first = std::fs::read_to_string(store.path()).unwrap();
    let header: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(header["type"], "session");
    assert_eq!(header["version"], 3);
    assert_eq!(header["cwd"], "/home/me/proj");
    let entry: serde_json::Value = serde_json::from_str(first.lines().nth(1).unwrap()).unwrap();
    assert_eq!(entry["type"], "message");
    assert_eq!(entry["parentId"], serde_json::Value::Null);
    assert_eq!(entry["message"]["role"], "user");
    let list = JsonlStore::list(&dir).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, store.header().id);
}

#[tokio::test]
async fn a_torn_last_line_is_skipped_and_cut_off_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_fixture("torn.jsonl", dir.path());
    let loaded = agentd::session::file::load(&path).unwrap();
    assert_eq!(loaded.torn_line, Some(4));
    assert_eq!(loaded.tree.len(), 2);
    let store = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(store.leaf().as_deref(), Some("e2"));
    let e = store.append(user("three")).await.unwrap();
    drop(store);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("\"timest{"),
        "the torn bytes must be gone: {text}"
    );
    let again = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(again.entries().len(), 3);
    assert_eq!(again.leaf(), Some(e.id));
    assert_eq!(agentd::session::file::load(&path).unwrap().torn_line, None);

    // A complete but unreadable last line (garbage after a crash) is skipped the same way.
    let garbage = dir.path().join("garbage.jsonl");
    let mut bytes = std::fs::read(fixture("torn.jsonl")).unwrap();
    let cut = bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    bytes.truncate(cut);
    bytes.extend_from_slice(b"\0\0\0{not json\n");
    std::fs::write(&garbage, bytes).unwrap();
    assert_eq!(
        agentd::session::file::load(&garbage).unwrap().torn_line,
        Some(4)
    );
}

#[test]
fn a_corrupt_middle_line_is_an_error_naming_the_line() {
    let err =
        JsonlStore::open(&fixture("corrupt_middle.jsonl"), StoreOptions::default()).unwrap_err();
    assert!(
        matches!(&err, SessionError::Corrupt { location, .. } if location.line == Some(3)),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("corrupt_middle.jsonl:3: corrupt session entry: not JSON"),
        "{text}"
    );
}

#[test]
fn bad_input_gives_clear_errors() {
    let err =
        JsonlStore::open(&fixture("unknown_version.jsonl"), StoreOptions::default()).unwrap_err();
    assert!(
        matches!(err, SessionError::UnsupportedVersion { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("unsupported session version 7 (this build reads version 3)"),
        "{err}"
    );

    let err =
        JsonlStore::open(&fixture("missing_parent.jsonl"), StoreOptions::default()).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "missing_parent.jsonl:3: entry `e2` refers to `ghost` (parentId), which does not exist"
        ),
        "{err}"
    );

    let err =
        JsonlStore::open(&fixture("duplicate_id.jsonl"), StoreOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("duplicate_id.jsonl:3: entry id `e1` is already used"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let err = JsonlStore::open(&empty, StoreOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a session file: the file is empty"),
        "{err}"
    );
    let headless = dir.path().join("headless.jsonl");
    std::fs::write(&headless, "{\"type\":\"message\",\"id\":\"x\"}\n").unwrap();
    let err = JsonlStore::open(&headless, StoreOptions::default()).unwrap_err();
    assert!(err.to_string().contains("line 1 is not a header"), "{err}");
    let unknown_type = dir.path().join("unknown_type.jsonl");
    let header = std::fs::read_to_string(fixture("torn.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(
        &unknown_type,
        format!("{header}\n{{\"type\":\"teleport\",\"id\":\"x\",\"parentId\":null,\"timestamp\":\"t\"}}\n{{}}\n"),
    )
    .unwrap();
    let err = JsonlStore::open(&unknown_type, StoreOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown_type.jsonl:2: corrupt session entry: unknown variant `teleport`"),
        "{err}"
    );
    let missing =
        JsonlStore::open(&dir.path().join("absent.jsonl"), StoreOptions::default()).unwrap_err();
    assert!(matches!(missing, SessionError::Io { .. }), "{missing:?}");
}

#[tokio::test]
async fn appends_with_a_colliding_id_or_a_missing_parent_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open("tree.jsonl", dir.path());
    let dup = SessionEntry::new("u1", Some("s1".into()), user("x"));
    let err = store.append_entry(dup).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::DuplicateId { id, .. } if id == "u1"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("entry id `u1` is already used"),
        "{err}"
    );
    let orphan = SessionEntry::new("n1", Some("ghost".into()), user("x"));
    let err = store.append_entry(orphan).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("entry `n1` refers to `ghost` (parentId), which does not exist"),
        "{err}"
    );
    let bad_label = EntryKind::Label {
        target_id: "ghost".into(),
        label: Some("x".into()),
    };
    let err = store.append(bad_label).await.unwrap_err();
    assert!(err.to_string().contains("(targetId)"), "{err}");
    // Nothing of that reached the file.
    let path = store.path().to_path_buf();
    drop(store);
    assert_eq!(
        JsonlStore::open(&path, StoreOptions::default())
            .unwrap()
            .entries()
            .len(),
        15
    );
    // An explicit entry with a fresh id and an existing parent is fine.
    let store = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    store
        .append_entry(SessionEntry::new("n2", Some("a3".into()), user("ok")))
        .await
        .unwrap();
    assert_eq!(store.leaf().as_deref(), Some("n2"));
}

#[test]
fn an_unreadable_session_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_dir = dir.path().join("file");
    std::fs::write(&not_dir, "x").unwrap();
    let err = JsonlStore::list(&not_dir).unwrap_err();
    assert!(matches!(err, SessionError::UnreadableDir { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "cannot read the session directory {}",
            not_dir.display()
        )),
        "{err}"
    );
    let err = JsonlStore::create(
        &not_dir.join("sub"),
        std::path::Path::new("/w"),
        StoreOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, SessionError::Io { .. }), "{err:?}");
    // Without permission (root reads anything, so only checked as another user).
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(matches!(
            JsonlStore::list(&locked),
            Err(SessionError::UnreadableDir { .. })
        ));
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
