//! Model folders shipped as a zip (a manifest's `[unpack]`): the verified zip in the cache is unpacked into a
//! folder beside it, once. Members are written under a locked staging folder (`.pip-unpack-…`, swept like the
//! other staging entries), each checked file's size and sha256 compared with the manifest, then the folder is
//! renamed into place with a marker naming the zip's sha256; a folder without that marker (an interrupted
//! unpack, another zip) is unpacked again. Member names that would leave the folder are refused.

use std::fs::{self, File};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use super::error::{FilesError, Result};
use super::manifest::{ModelManifest, Unpack};
use super::source::DigestWriter;
use super::staging;

/// The marker inside an unpacked folder: the sha256 of the zip it came from.
const UNPACKED_MARKER: &str = ".agentd-unpacked";

/// The unpacked folder of `manifest`'s verified `zip`, unpacking it first when needed.
pub fn ensure_unpacked(zip: &Path, manifest: &ModelManifest, unpack: &Unpack) -> Result<PathBuf> {
    let dir = zip.parent().unwrap_or(Path::new("."));
    let dest = dir.join(&unpack.folder);
    if is_current(&dest, manifest, unpack) {
        return Ok(dest);
    }
    let fail = |message: String| FilesError::Fetch {
        name: manifest.name.clone(),
        attempts: vec![format!("unpacking {}: {message}", zip.display())],
    };
    let (staged, _lock) = staging::locked_tempdir(dir, ".pip-unpack-").map_err(|e| {
        fail(format!(
            "creating a staging folder in {}: {e}",
            dir.display()
        ))
    })?;
    let root = staged.path().join("folder");
    extract(zip, &root).map_err(fail)?;
    for check in &unpack.check {
        let path = root.join(&check.file);
        let size = fs::metadata(&path)
            .map_err(|e| fail(format!("{} is missing from the zip: {e}", check.file)))?
            .len();
        if size != check.size {
            return Err(fail(format!(
                "{} is {size} bytes, expected {}",
                check.file, check.size
            )));
        }
        let actual = sha256_of(&path).map_err(|e| fail(format!("hashing {}: {e}", check.file)))?;
        if actual != check.sha256 {
            return Err(FilesError::Sha256Mismatch {
                path: dest.join(&check.file),
                expected: check.sha256.clone(),
                actual,
            });
        }
    }
    fs::write(root.join(UNPACKED_MARKER), &manifest.sha256)
        .map_err(|e| fail(format!("writing the marker: {e}")))?;
    if dest.exists() {
        fs::remove_dir_all(&dest)
            .map_err(|e| fail(format!("removing the old {}: {e}", dest.display())))?;
    }
    fs::rename(&root, &dest).map_err(|e| fail(format!("renaming into {}: {e}", dest.display())))?;
    staging::sync_dir(dir).map_err(|e| fail(format!("syncing {}: {e}", dir.display())))?;
    Ok(dest)
}

fn sha256_of(path: &Path) -> io::Result<String> {
    let mut digest = DigestWriter::new(io::sink());
    io::copy(&mut BufReader::new(File::open(path)?), &mut digest)?;
    Ok(digest.hex_digest())
}

/// Whether `dest` was unpacked from this zip and its checked files have their sizes.
fn is_current(dest: &Path, manifest: &ModelManifest, unpack: &Unpack) -> bool {
    let marker = fs::read_to_string(dest.join(UNPACKED_MARKER)).unwrap_or_default();
    marker == manifest.sha256
        && unpack.check.iter().all(|c| {
            fs::metadata(dest.join(&c.file)).is_ok_and(|m| m.is_file() && m.len() == c.size)
        })
}

/// Unpacks every member of `zip` under `root`, refusing names that would leave it.
fn extract(zip: &Path, root: &Path) -> std::result::Result<(), String> {
    let file = File::open(zip).map_err(|e| format!("opening: {e}"))?;
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| format!("not a zip: {e}"))?;
    fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    for i in 0..archive.len() {
        let mut member = archive
            .by_index(i)
            .map_err(|e| format!("member {i}: {e}"))?;
        let Some(relative) = member.enclosed_name() else {
            return Err(format!(
                "member `{}` would be written outside the folder",
                member.name()
            ));
        };
        let path = root.join(relative);
        if member.is_dir() {
            fs::create_dir_all(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let mut out =
            File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        io::copy(&mut member, &mut out)
            .map_err(|e| format!("extracting {}: {e}", member.name()))?;
        out.sync_all()
            .map_err(|e| format!("syncing {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_files::manifest::CheckedFile;
    use sha2::Digest;
    use std::io::Write;

    fn zip_with(path: &Path, members: &[(&str, &[u8])]) {
        let file = File::create(path).unwrap();
        let mut w = zip::ZipWriter::new(file);
        for (name, data) in members {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
    }

    fn manifest(zip_sha: &str, check: Vec<CheckedFile>) -> (ModelManifest, Unpack) {
        let unpack = Unpack {
            folder: "f".into(),
            check,
        };
        let text = format!(
            "name = \"m\"\ndisplay_name = \"m\"\narchitecture = \"bert\"\nfile_name = \"m.zip\"\nsha256 = \"{zip_sha}\"\nsize_bytes = 1\ncontext_length = 8\ntask = \"embed\"\n"
        );
        (ModelManifest::parse("m.toml", &text).unwrap(), unpack)
    }

    fn checked(file: &str, data: &[u8]) -> CheckedFile {
        CheckedFile {
            file: file.into(),
            sha256: hex::encode(sha2::Sha256::digest(data)),
            size: data.len() as u64,
        }
    }

    #[test]
    fn unpacks_once_and_checks_the_listed_files() {
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("m.zip");
        zip_with(&zip, &[("a/w.bin", b"weights"), ("c.json", b"{}")]);
        let (m, u) = manifest(&"a".repeat(64), vec![checked("a/w.bin", b"weights")]);
        let out = ensure_unpacked(&zip, &m, &u).unwrap();
        assert_eq!(out, dir.path().join("f"));
        assert_eq!(fs::read(out.join("a/w.bin")).unwrap(), b"weights");
        assert_eq!(fs::read(out.join("c.json")).unwrap(), b"{}");
        // Current: not unpacked again (an edit to an unchecked file survives).
        fs::write(out.join("c.json"), b"edited").unwrap();
        ensure_unpacked(&zip, &m, &u).unwrap();
        assert_eq!(fs::read(out.join("c.json")).unwrap(), b"edited");
        // A marker of another zip: unpacked afresh.
        fs::write(out.join(UNPACKED_MARKER), "b".repeat(64)).unwrap();
        ensure_unpacked(&zip, &m, &u).unwrap();
        assert_eq!(fs::read(out.join("c.json")).unwrap(), b"{}");
    }

    #[test]
    fn a_wrong_file_or_an_escaping_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("m.zip");
        zip_with(&zip, &[("w.bin", b"weights")]);
        let (m, u) = manifest(&"a".repeat(64), vec![checked("w.bin", b"other!!")]);
        let err = ensure_unpacked(&zip, &m, &u).unwrap_err();
        assert!(matches!(err, FilesError::Sha256Mismatch { .. }), "{err}");
        assert!(!dir.path().join("f").exists());

        zip_with(&zip, &[("../evil", b"x")]);
        let (m, u) = manifest(&"a".repeat(64), vec![]);
        let err = ensure_unpacked(&zip, &m, &u).unwrap_err().to_string();
        assert!(err.contains("outside the folder"), "{err}");
        assert!(!dir.path().join("evil").exists());
    }
}
