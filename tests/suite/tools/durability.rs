//! `write` and `edit` keep files' permissions right: a new file gets what the umask gives (not the temp file's
//! private 0600), an existing one keeps its mode through the atomic rename.

use std::os::unix::fs::PermissionsExt;

use agentd::tools::edit::EditTool;
use agentd::tools::write::WriteTool;
use serde_json::json;

use super::{ctx, ok, put};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Sets the process umask for the guard's life. The umask is process-wide: 022 is the usual default, so setting
/// it does not change what concurrently running tests see.
struct Umask(libc::mode_t);

impl Umask {
    fn set(mask: libc::mode_t) -> Self {
        // SAFETY: umask(2) has no preconditions.
        Self(unsafe { libc::umask(mask) })
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::umask(self.0) };
    }
}

#[tokio::test]
async fn a_new_file_gets_the_umask_default_permissions() {
    let _umask = Umask::set(0o022);
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    ok(
        &WriteTool::new(),
        json!({"path": "new.txt", "content": "hi\n"}),
        &c,
    )
    .await;
    ok(
        &WriteTool::new(),
        json!({"path": "sub/dir/new.txt", "content": "hi\n"}),
        &c,
    )
    .await;
    assert_eq!(mode(&dir.path().join("new.txt")), 0o644);
    assert_eq!(mode(&dir.path().join("sub/dir/new.txt")), 0o644);
}

#[tokio::test]
async fn an_executable_keeps_its_mode_through_edit_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sh");
    put(dir.path(), "run.sh", "#!/bin/sh\necho old\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = ctx(dir.path());
    ok(
        &EditTool::new(),
        json!({"path": "run.sh", "edits": [{"old_text": "echo old", "new_text": "echo new"}]}),
        &c,
    )
    .await;
    assert_eq!(mode(&path), 0o755);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "#!/bin/sh\necho new\n"
    );
    ok(
        &WriteTool::new(),
        json!({"path": "run.sh", "content": "#!/bin/sh\necho newer\n"}),
        &c,
    )
    .await;
    assert_eq!(mode(&path), 0o755);
    let out = std::process::Command::new(&path).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "newer\n");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["run.sh"], "no temp file left behind");
}

#[tokio::test]
async fn edit_through_a_symlink_changes_the_target_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "real.txt", "alpha\n");
    std::fs::set_permissions(
        dir.path().join("real.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::os::unix::fs::symlink("real.txt", dir.path().join("link.txt")).unwrap();
    ok(
        &EditTool::new(),
        json!({"path": "link.txt", "edits": [{"old_text": "alpha", "new_text": "beta"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(std::fs::symlink_metadata(dir.path().join("link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("real.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(mode(&dir.path().join("real.txt")), 0o600);
}
