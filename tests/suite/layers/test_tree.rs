//! Every file under `tests/suite/` is compiled: a test file no `mod` line names is silently never run.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file that must declare `path` (a folder's `mod.rs`, or the file beside the folder), and the name.
fn declared_by(root: &Path, path: &Path) -> (PathBuf, String) {
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let (dir, name) = match stem.as_str() {
        "mod" => {
            let dir = path.parent().unwrap();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            (dir.parent().unwrap().to_path_buf(), name)
        }
        _ => (path.parent().unwrap().to_path_buf(), stem),
    };
    let declarer = match dir.join("mod.rs").exists() || dir == root {
        true => dir.join("mod.rs"),
        false => dir.with_extension("rs"),
    };
    (declarer, name)
}

#[test]
fn every_test_file_is_declared() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suite");
    let mut all = Vec::new();
    files(&root, &mut all);
    assert!(all.len() > 50, "{} files", all.len());
    let mut missing = Vec::new();
    for f in all.iter().filter(|f| **f != root.join("mod.rs")) {
        let (declarer, name) = declared_by(&root, f);
        let text = std::fs::read_to_string(&declarer).unwrap_or_default();
        let declared = text.lines().any(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            l == format!("mod {name};")
        });
        if !declared {
            missing.push(format!("{} (not in {})", f.display(), declarer.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "test files never compiled: {missing:#?}"
    );
}
