//! A Hugging Face model folder, found but not read: a folder with a `config.json`, or an `org/name` repository
//! in the local hf-hub cache (`models--org--name/snapshots/<rev>/`). Converting one into a GGUF needs the
//! engine's architectures and lives there (`engine::files::hf_folder`).

use std::path::{Path, PathBuf};

/// Whether `path` is a Hugging Face model folder.
pub fn is_folder(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// The snapshot folder of `repo` (`org/name`) in the local hf-hub cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`,
/// else `~/.cache/huggingface/hub`): the revision `refs/main` names, else the only snapshot.
pub fn hub_snapshot(repo: &str) -> Option<PathBuf> {
    let root = std::env::var_os("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
        })?;
    hub_snapshot_in(&root, repo)
}

/// [`hub_snapshot`] in the hub cache at `root`.
pub fn hub_snapshot_in(root: &Path, repo: &str) -> Option<PathBuf> {
    let (org, name) = repo.split_once('/')?;
    if org.is_empty() || name.is_empty() || name.contains('/') || org.starts_with('.') {
        return None;
    }
    let dir = root.join(format!("models--{org}--{name}"));
    let snapshots = dir.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(dir.join("refs/main")) {
        let snap = snapshots.join(rev.trim());
        if snap.is_dir() {
            return Some(snap);
        }
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    (all.len() == 1).then(|| all.remove(0))
}
