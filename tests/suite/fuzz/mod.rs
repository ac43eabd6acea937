//! Fuzzing on stable Rust: a seeded mutation engine (bit flips, interesting bytes, cut, duplicated and spliced
//! ranges, dictionary tokens) over the seed corpora in `tests/data/fuzz/<target>/`, feeding each parser that
//! reads what other programs write. The property is the same for all: an input is accepted or refused with an
//! error — never a panic, never a hang. A panicking input is saved under `$CARGO_TARGET_TMPDIR/fuzz-findings/`
//! and named in the failure.
//!
//! Each target runs `AGENTD_FUZZ_ITERS` inputs (default 1500: a few seconds in CI); `AGENTD_FUZZ_ITERS=200000
//! cargo test --release --test all fuzz` is the long run. `AGENTD_FUZZ_SEED` changes the sequence.

mod hf_config;
mod mcp_replies;
mod targets;

use std::path::{Path, PathBuf};

/// A xorshift64* generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u8] = &[
    0, 0xff, 0x7f, 0x80, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'\n', b'\r', b' ', b'<',
    b'>', b'0', b'9', b'-', b'e', b'.',
];

/// One mutation of `input` (in place): the engine's choice of what to break.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>], dictionary: &[&[u8]]) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let at = rng.below(len);
                input[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                input[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                // Delete a range.
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                input.drain(at..at + n);
            }
            3 if len > 0 => {
                // Duplicate a range somewhere (repetition finds quadratic paths).
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(256));
                let piece: Vec<u8> = input[at..at + n].to_vec();
                let to = rng.below(len + 1);
                let times = 1 + rng.below(8);
                for _ in 0..times {
                    input.splice(to..to, piece.iter().copied());
                }
            }
            4 if !dictionary.is_empty() => {
                let word = dictionary[rng.below(dictionary.len())];
                let to = rng.below(len + 1);
                input.splice(to..to, word.iter().copied());
            }
            5 if !seeds.is_empty() => {
                // Splice: our head, another seed's tail.
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            6 if len > 0 => input.truncate(rng.below(len)),
            7 if len >= 8 => {
                // An integer-sized run of 0xff or 0x00 (lengths and counts).
                let at = rng.below(len - 7);
                let v = if rng.below(2) == 0 { 0xff } else { 0 };
                let n = [1, 2, 4, 8][rng.below(4)];
                input[at..at + n].fill(v);
            }
            _ => {
                let to = rng.below(len + 1);
                input.insert(to, rng.next() as u8);
            }
        }
    }
    // Bound the size so no target is slowed by a runaway input.
    input.truncate(1 << 20);
}

/// The seed corpus of `target`.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the seed corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

fn iterations() -> usize {
    std::env::var("AGENTD_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn base_seed() -> u64 {
    std::env::var("AGENTD_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x00c0_ffee_d00d_f00d)
}

/// Values a structural mutation puts in place of a node: the edges of what a schema or a message may hold.
fn interesting_json(rng: &mut Rng) -> serde_json::Value {
    use serde_json::json;
    let choices = [
        json!(null),
        json!(true),
        json!(-1),
        json!(0),
        json!(u64::MAX),
        json!(1e308),
        json!(-0.5),
        json!(""),
        json!("\u{0}\u{ffff}🙂\"\\"),
        json!("#/$defs/a"),
        json!("(a|aa)*$"),
        json!([]),
        json!({}),
        json!({"$ref": "#"}),
        json!({"type": ["string", "null"]}),
        json!({"anyOf": [{"type": "integer"}, {"$ref": "#"}]}),
        json!({"type": "array", "items": {"$ref": "#"}, "minItems": 3}),
        json!({"type": "string", "pattern": "[", "format": "uri"}),
        json!({"type": "object", "required": ["missing"], "properties": {}}),
        json!({"enum": []}),
    ];
    choices[rng.below(choices.len())].clone()
}

/// A structural mutation of a JSON document: a few nodes replaced, removed, duplicated or given strange keys,
/// so most inputs still parse and reach the code behind the parser.
pub fn mutate_json(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(seed) else {
        return seed.to_vec();
    };
    for _ in 0..1 + rng.below(3) {
        // Walk down to a random node, as a JSON pointer.
        let mut pointer = String::new();
        let mut at = &doc;
        for _ in 0..rng.below(8) {
            let step = match at {
                serde_json::Value::Object(m) if !m.is_empty() => {
                    let k = m
                        .keys()
                        .nth(rng.below(m.len()))
                        .cloned()
                        .unwrap_or_default();
                    at = &m[&k];
                    k.replace('~', "~0").replace('/', "~1")
                }
                serde_json::Value::Array(a) if !a.is_empty() => {
                    let i = rng.below(a.len());
                    at = &a[i];
                    i.to_string()
                }
                _ => break,
            };
            pointer.push('/');
            pointer.push_str(&step);
        }
        let Some(node) = doc.pointer_mut(&pointer) else {
            continue;
        };
        match (rng.below(4), &mut *node) {
            (0, serde_json::Value::Object(m)) if !m.is_empty() => {
                let k = m
                    .keys()
                    .nth(rng.below(m.len()))
                    .cloned()
                    .unwrap_or_default();
                m.remove(&k);
            }
            (1, serde_json::Value::Object(m)) => {
                let keys = [
                    "type",
                    "$ref",
                    "items",
                    "properties",
                    "required",
                    "enum",
                    "const",
                    "name",
                ];
                m.insert(keys[rng.below(keys.len())].into(), interesting_json(rng));
            }
            (2, serde_json::Value::Array(a)) if !a.is_empty() => {
                let item = a[rng.below(a.len())].clone();
                for _ in 0..1 + rng.below(16) {
                    a.push(item.clone());
                }
            }
            _ => *node = interesting_json(rng),
        }
    }
    serde_json::to_vec(&doc).unwrap_or_else(|_| seed.to_vec())
}

/// Runs `target`'s inputs through `check` (which says whether the input got through, so a target that refuses
/// everything is noticed): the seeds first as they are, then mutations. Returns how many inputs ran and how
/// many got through. A panic saves the input and fails the test naming it.
pub fn fuzz(
    target: &str,
    dictionary: &[&[u8]],
    check: impl Fn(&[u8], &mut Rng) -> bool,
) -> (usize, usize) {
    fuzz_with(target, dictionary, false, check)
}

/// [`fuzz`], with half the mutations structural ([`mutate_json`]) when `json` is set.
pub fn fuzz_with(
    target: &str,
    dictionary: &[&[u8]],
    json: bool,
    check: impl Fn(&[u8], &mut Rng) -> bool,
) -> (usize, usize) {
    let seeds = seeds(target);
    let mut rng = Rng::new(base_seed() ^ target.len() as u64 ^ (target.as_bytes()[0] as u64) << 32);
    let n = iterations();
    let started = std::time::Instant::now();
    let mut through = 0;
    for i in 0..n + seeds.len() {
        let input = match seeds.get(i) {
            Some(seed) => seed.clone(),
            None if json && rng.below(2) == 0 => {
                let seed = &seeds[rng.below(seeds.len())];
                mutate_json(&mut rng, seed)
            }
            None => {
                let mut input = seeds[rng.below(seeds.len())].clone();
                mutate(&mut rng, &mut input, &seeds, dictionary);
                input
            }
        };
        let mut inner = Rng::new(rng.next());
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input, &mut inner)));
        if let Ok(true) = result {
            through += 1;
        }
        if result.is_err() {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{target}-{i}.bin"));
            std::fs::write(&path, &input).unwrap();
            panic!("{target}: input {i} panicked; saved as {}", path.display());
        }
    }
    let total = n + seeds.len();
    eprintln!(
        "fuzz {target}: {total} inputs, {through} got through, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        through >= seeds.len() && through < total,
        "{target}: {through} of {total} inputs got through (the seeds must, and some mutations must not)"
    );
    (total, through)
}

/// `bytes` cut into pieces of random sizes (how a network delivers them).
pub fn chunks<'a>(bytes: &'a [u8], rng: &mut Rng) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let n = 1 + rng.below(64.min(bytes.len() - at));
        out.push(&bytes[at..at + n]);
        at += n;
    }
    out
}

#[test]
fn mutations_are_seeded_and_bounded() {
    let mut a = Rng::new(7);
    let mut b = Rng::new(7);
    let seeds = vec![b"{\"a\": [1, 2, 3]}".to_vec()];
    for _ in 0..200 {
        let (mut x, mut y) = (seeds[0].clone(), seeds[0].clone());
        mutate(&mut a, &mut x, &seeds, &[b"null"]);
        mutate(&mut b, &mut y, &seeds, &[b"null"]);
        assert_eq!(x, y, "the same seed makes the same inputs");
        assert!(x.len() <= 1 << 20);
    }
}
