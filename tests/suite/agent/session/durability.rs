//! Durability of the JSONL store: every entry whose append was acknowledged survives a `kill -9` of the writer
//! process (the writer is this test binary, run again as a child) and a full disk; append latency per fsync policy.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use agentd::agent::AgentMessage;
use agentd::session::{EntryKind, FsyncPolicy, JsonlStore, SessionStore, StoreOptions};

fn user(text: &str) -> EntryKind {
    EntryKind::message(AgentMessage::user(text))
}

/// The writer process of `every_acknowledged_entry_survives_kill_9`: appends until killed, printing the id of
/// each entry once its append is acknowledged. Does nothing unless the parent test set the variable.
#[test]
#[ignore = "run by every_acknowledged_entry_survives_kill_9 in a child process"]
fn kill9_writer_child() {
    let Ok(dir) = std::env::var("AGENTD_KILL9_DIR") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = JsonlStore::create(
            std::path::Path::new(&dir),
            std::path::Path::new("/w"),
            StoreOptions::default(),
        )
        .unwrap();
        println!("PATH {}", store.path().display());
        for i in 0..1_000_000u64 {
            let e = store
                .append(user(&format!(
                    "entry {i} {}",
                    "x".repeat((i % 7) as usize * 100)
                )))
                .await
                .unwrap();
            println!("ACK {}", e.id);
        }
    });
}

#[test]
fn every_acknowledged_entry_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::agent::session::durability::kill9_writer_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AGENTD_KILL9_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut path = None;
    let mut acked = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        // libtest prints "test NAME ... " without a newline before the test's own output.
        if let Some(at) = line.find("PATH ") {
            path = Some(std::path::PathBuf::from(&line[at + 5..]));
        } else if let Some(id) = line.strip_prefix("ACK ") {
            acked.push(id.to_string());
            if acked.len() == 300 {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        }
    }
    // Acknowledgements already printed before the kill count too.
    for line in lines {
        if let Some(id) = line.unwrap_or_default().strip_prefix("ACK ") {
            acked.push(id.to_string());
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed");
    let path = path.expect("the child printed its session path");
    let store = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    let stored: std::collections::HashSet<String> =
        store.entries().into_iter().map(|e| e.id).collect();
    let lost: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(lost.is_empty(), "acknowledged entries lost: {lost:?}");
    assert!(
        acked.len() >= 300 && stored.len() >= acked.len(),
        "{} acked, {} stored",
        acked.len(),
        stored.len()
    );
    // The recovered file takes new appends.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(store.append(user("after the crash"))).unwrap();
}

#[tokio::test]
async fn append_latency_by_fsync_policy() {
    let dir = tempfile::tempdir().unwrap();
    for (name, fsync) in [
        ("always", FsyncPolicy::Always),
        ("periodic(50ms)", FsyncPolicy::Periodic { interval_ms: 50 }),
        ("never", FsyncPolicy::Never),
    ] {
        let store = JsonlStore::create(
            &dir.path().join(name),
            std::path::Path::new("/w"),
            StoreOptions { fsync },
        )
        .unwrap();
        let mut times = Vec::new();
        for i in 0..200 {
            let t = Instant::now();
            store
                .append(user(&format!("message {i} with some text")))
                .await
                .unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        store.sync().await.unwrap();
        times.sort_by(|a, b| a.total_cmp(b));
        println!(
            "append latency, fsync {name}: p50 {:.0} µs, p99 {:.0} µs, mean {:.0} µs",
            times[100],
            times[198],
            times.iter().sum::<f64>() / times.len() as f64
        );
        assert_eq!(
            JsonlStore::open(store.path(), StoreOptions::default())
                .unwrap()
                .entries()
                .len(),
            200
        );
    }
    // Concurrent appends are applied one after another: all land, in one parent chain.
    let store = std::sync::Arc::new(
        JsonlStore::create(
            &dir.path().join("group"),
            std::path::Path::new("/w"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    let t = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move { s.append(user(&format!("concurrent {i}"))).await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    println!(
        "64 concurrent appends (fsync always): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let reopened = JsonlStore::open(store.path(), StoreOptions::default()).unwrap();
    assert_eq!(reopened.entries().len(), 64);
    // One linear chain: every entry's parent is the one before it.
    let entries = reopened.entries();
    for w in entries.windows(2) {
        assert_eq!(w[1].parent_id.as_deref(), Some(w[0].id.as_str()));
    }
}

/// A small tmpfs mounted for one test (root only; `None` where mounting is not allowed), unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: usize) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs here (not root)");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test]
async fn a_full_disk_refuses_the_append_and_keeps_every_acknowledged_entry() {
    let Some(disk) = SmallDisk::mount(256 << 10) else {
        return;
    };
    // A filler to free later, then a session that fills the rest.
    let filler = disk.path().join("filler");
    std::fs::write(&filler, vec![b'f'; 64 << 10]).unwrap();
    let sessions = disk.path().join("sessions");
    let store = JsonlStore::create(
        &sessions,
        std::path::Path::new("/w"),
        StoreOptions::default(),
    )
    .unwrap();
    let path = store.path().to_path_buf();
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 0..1000 {
        let text = format!("entry {i} {}", "x".repeat(3000));
        match store.append(user(&text)).await {
            Ok(e) => acknowledged.push(e.id),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let err = refused.expect("the disk never filled").to_string();
    assert!(
        err.contains("No space left") && err.contains("not stored"),
        "{err}"
    );
    assert!(acknowledged.len() > 10, "{}", acknowledged.len());
    // Still full: a large entry is refused again, cleanly. The file on disk is whole (no partial line).
    let again = store.append(user(&"y".repeat(8000))).await.unwrap_err();
    assert!(again.to_string().contains("No space left"), "{again}");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.last(), Some(&b'\n'), "a partial line was left");
    // Room again: the same store appends, and a reader sees every acknowledged entry in order.
    std::fs::remove_file(&filler).unwrap();
    let after = store.append(user("after the disk had room")).await.unwrap();
    acknowledged.push(after.id);
    drop(store);
    let reopened = JsonlStore::open(&path, StoreOptions::default()).unwrap();
    let ids: Vec<String> = reopened
        .entries()
        .into_iter()
        .filter(|e| matches!(e.kind, EntryKind::Message { .. }))
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, acknowledged);
}
