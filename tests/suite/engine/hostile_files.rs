//! Hostile model files: the real SmolLM2 GGUF cut short at many points, its header bytes flipped at seeded
//! random places, and its counts and sizes overwritten with absurd values. Every file either loads (tokenizer,
//! chat template, weights) or fails with a clear error — never a panic, and never an allocation sized by the
//! file's claims (an absurd claim would abort the test process).

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use agentd::engine::{ChatTemplate, GgufFile, Model, Tokenizer, WeightFormat};

use crate::suite::common;
use crate::suite::fuzz::Rng;

/// Opens `path` as the engine does; `Err` carries the error's text.
fn load(path: &Path, weights: bool) -> Result<(), String> {
    let gguf = GgufFile::open(path).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
    ChatTemplate::from_gguf(&gguf, &tokenizer).map_err(|e| e.to_string())?;
    if weights {
        Model::load_with_threads(&gguf, &candle_core::Device::Cpu, WeightFormat::Auto, 1)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Loads the file at `path`, turning a panic into a test failure that names `what`.
fn survives(path: &Path, what: &str, weights: bool) -> Result<(), String> {
    match std::panic::catch_unwind(|| load(path, weights)) {
        Ok(r) => r,
        Err(_) => panic!("{what}: loading panicked"),
    }
}

/// A copy of the real file in a temp dir, patched in place and put back after each try (rewriting the whole
/// file per try would cost a hundred megabytes each).
struct Patched {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl Patched {
    fn new(bytes: &[u8]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        Patched {
            _dir: dir,
            path,
            file,
        }
    }

    fn write_at(&mut self, at: usize, bytes: &[u8]) {
        self.file.seek(SeekFrom::Start(at as u64)).unwrap();
        self.file.write_all(bytes).unwrap();
    }

    /// Loads the file with `patch` (offset, bytes) written over it, then puts the original bytes back.
    fn try_with(
        &mut self,
        original: &[u8],
        patch: &[(usize, Vec<u8>)],
        what: &str,
        weights: bool,
    ) -> Result<(), String> {
        for (at, bytes) in patch {
            self.write_at(*at, bytes);
        }
        let r = survives(&self.path, what, weights);
        for (at, bytes) in patch.iter().rev() {
            self.write_at(*at, &original[*at..*at + bytes.len()]);
        }
        r
    }
}

/// The real file's bytes.
fn original() -> Vec<u8> {
    std::fs::read(common::smollm2_path()).unwrap()
}

#[test]
fn a_cut_model_file_is_a_clear_error() {
    let bytes = original();
    let patched = Patched::new(&bytes);
    // Cuts inside the header (every few bytes at the start, then spread out), and inside the tensor data; made
    // from the longest to the shortest by truncating the one copy.
    let mut cuts: Vec<usize> = (0..64).collect();
    cuts.extend((1..200).map(|i| i * 9_973));
    cuts.extend((1..32).map(|i| bytes.len() / 32 * i));
    cuts.push(bytes.len() - 1);
    cuts.sort_unstable_by(|a, b| b.cmp(a));
    for cut in cuts {
        patched.file.set_len(cut as u64).unwrap();
        let err = survives(&patched.path, &format!("cut at {cut}"), false)
            .expect_err("a cut file loaded");
        assert!(!err.is_empty());
    }
}

#[test]
fn flipped_header_bytes_never_panic() {
    let bytes = original();
    let mut patched = Patched::new(&bytes);
    // The header (metadata, vocabulary and tensor infos) is in the first two megabytes.
    let header = 2 << 20;
    let mut rng = Rng::new(0x5eed_1234_abcd_ef01);
    let (mut loaded, mut refused) = (0, 0);
    for round in 0..400u32 {
        let flips = 1 + (rng.next() % 4) as usize;
        let mut what = format!("round {round}:");
        let mut patch = Vec::new();
        for _ in 0..flips {
            // Mostly near the start, where the counts and lengths are.
            let span = if rng.next().is_multiple_of(2) {
                4096
            } else {
                header
            };
            let at = (rng.next() as usize) % span;
            let value = match rng.next() % 4 {
                0 => 0xff,
                1 => 0x00,
                2 => bytes[at] ^ (1 << (rng.next() % 8)),
                _ => rng.next() as u8,
            };
            what.push_str(&format!(" [{at}]={value:#x}"));
            patch.push((at, vec![value]));
        }
        // The weights load only now and then: most flips land in the vocabulary's strings.
        match patched.try_with(&bytes, &patch, &what, round.is_multiple_of(25)) {
            Ok(()) => loaded += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        refused > 0 && loaded > 0,
        "{loaded} loaded, {refused} refused"
    );
}

#[test]
fn absurd_counts_and_sizes_are_refused_before_anything_is_allocated() {
    let bytes = original();
    let mut patched = Patched::new(&bytes);
    // GGUF v3: magic, version (u32), tensor count (u64 at 8), metadata count (u64 at 16), the first key's length.
    for (at, value) in [
        (8, u64::MAX),
        (8, 1 << 40),
        (16, u64::MAX),
        (16, 1 << 40),
        (24, u64::MAX),
        (24, 1 << 40),
    ] {
        let what = format!("u64 {value} at {at}");
        let patch = [(at, value.to_le_bytes().to_vec())];
        let err = patched
            .try_with(&bytes, &patch, &what, false)
            .expect_err("an absurd count loaded");
        assert!(!err.is_empty());
    }
    // Absurd hyper-parameters: each u32 value of the architecture's keys that sizes something set to 0 and to
    // huge values (the feed-forward width is taken from the tensors' shapes, not from its key).
    let keys = [
        "llama.block_count",
        "llama.context_length",
        "llama.embedding_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.rope.dimension_count",
    ];
    let mut tried = 0;
    for key in keys {
        let Some(at) = find_u32_value(&bytes, key) else {
            continue;
        };
        for value in [0u32, u32::MAX, 1 << 30] {
            let what = format!("{key} = {value}");
            let patch = [(at, value.to_le_bytes().to_vec())];
            let err = patched
                .try_with(&bytes, &patch, &what, true)
                .expect_err(&what);
            assert!(!err.is_empty(), "{what}");
            tried += 1;
        }
    }
    assert!(tried >= 15, "the keys were not found in the file: {tried}");
}

/// The offset of the u32 value of metadata key `key` (key length u64, key bytes, type u32 = 4, value).
fn find_u32_value(bytes: &[u8], key: &str) -> Option<usize> {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    needle.extend_from_slice(&4u32.to_le_bytes());
    let start = bytes[..1 << 20]
        .windows(needle.len())
        .position(|w| w == needle.as_slice())?;
    Some(start + needle.len())
}
