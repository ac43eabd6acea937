//! Grounding (seed 001): tool results that compaction drops from the context are kept here, content-addressed
//! (file name = SHA-256 of the content), in a `refs/` folder next to the session files. A compaction summary
//! points at them with refs like `[ref:ab12cd]` (the shortest unique prefix, at least 6 hex digits), and the
//! `recall {ref}` tool reads them back in full.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::SessionError;

/// The fewest hex digits a ref is shown with.
pub const MIN_REF_LEN: usize = 6;

/// A folder of content-addressed texts. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    /// A store in `dir` (created on the first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The store beside the session files of `session_dir`: `<session_dir>/refs`.
    pub fn beside(session_dir: &Path) -> Self {
        Self::new(session_dir.join("refs"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `content` (once: equal contents share a file) and returns its ref — the shortest prefix of its hash,
    /// at least [`MIN_REF_LEN`] digits, that no other stored text shares.
    pub fn save(&self, content: &str) -> Result<String, SessionError> {
        let hash = hex::encode(Sha256::digest(content.as_bytes()));
        std::fs::create_dir_all(&self.dir).map_err(|e| SessionError::io(&self.dir, e))?;
        let path = self.dir.join(&hash);
        if !path.exists() {
            // Write beside, sync, then rename: a reader never sees a partial blob.
            let tmp = self.dir.join(format!(".{hash}.{}.tmp", std::process::id()));
            let written = std::fs::File::create(&tmp).and_then(|mut f| {
                f.write_all(content.as_bytes())?;
                f.sync_all()
            });
            written
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    SessionError::io(&path, e)
                })?;
        }
        let others = self.hashes()?;
        let mut len = MIN_REF_LEN;
        while len < hash.len()
            && others
                .iter()
                .any(|h| h != &hash && h.starts_with(&hash[..len]))
        {
            len += 1;
        }
        Ok(hash[..len].to_string())
    }

    /// The content a ref (a prefix of at least [`MIN_REF_LEN`] hex digits; `ref:` and brackets are tolerated)
    /// points to. Errors: [`SessionError::UnknownRef`], [`SessionError::AmbiguousRef`].
    pub fn load(&self, reference: &str) -> Result<String, SessionError> {
        let r = normalize(reference);
        if r.len() < MIN_REF_LEN || !r.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(SessionError::UnknownRef(reference.to_string()));
        }
        let matches: Vec<String> = self
            .hashes()?
            .into_iter()
            .filter(|h| h.starts_with(&r))
            .collect();
        match matches.as_slice() {
            [] => Err(SessionError::UnknownRef(reference.to_string())),
            [one] => {
                let path = self.dir.join(one);
                std::fs::read_to_string(&path).map_err(|e| SessionError::io(path, e))
            }
            many => Err(SessionError::AmbiguousRef {
                reference: reference.to_string(),
                candidates: many
                    .iter()
                    .map(|h| h[..MIN_REF_LEN + 2].to_string())
                    .collect(),
            }),
        }
    }

    /// The hashes stored (none when the folder does not exist yet).
    fn hashes(&self) -> Result<Vec<String>, SessionError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io(&self.dir, e)),
        };
        Ok(rd
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.len() == 64 && n.chars().all(|c| c.is_ascii_hexdigit()))
            .collect())
    }
}

/// `[ref:AB12cd]` → `ab12cd`.
fn normalize(reference: &str) -> String {
    let r = reference
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']');
    r.strip_prefix("ref:")
        .unwrap_or(r)
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_dedup_and_bad_refs() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::beside(dir.path());
        let r = blobs.save("hello\nworld\n").unwrap();
        assert_eq!(r.len(), MIN_REF_LEN);
        assert_eq!(blobs.save("hello\nworld\n").unwrap(), r);
        assert_eq!(blobs.load(&r).unwrap(), "hello\nworld\n");
        assert_eq!(
            blobs.load(&format!("[ref:{}]", r.to_uppercase())).unwrap(),
            "hello\nworld\n"
        );
        assert!(matches!(
            blobs.load("abc"),
            Err(SessionError::UnknownRef(_))
        ));
        assert!(matches!(
            blobs.load("zzzzzzzz"),
            Err(SessionError::UnknownRef(_))
        ));
        assert!(matches!(
            blobs.load("000000"),
            Err(SessionError::UnknownRef(_))
        ));
    }
}
