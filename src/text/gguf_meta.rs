//! A GGUF file's header and metadata without its tensors or any tensor library: what the text layer needs
//! (vocabulary, merges, scores, template, special ids) to tokenize and render prompts for a model whose weights
//! live elsewhere (a remote server's model). [`Metadata`] is the read access the tokenizer, the template and
//! the FIM detection take, implemented by this reader and by the engine's `GgufFile`.
//!
//! Every count and length is checked against the bytes left in the file before anything is allocated from it,
//! so a hostile header is an error, never an abort.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::text::error::{Result, TextError};

/// One metadata value, as GGUF types it.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    /// Any non-negative integer (files store ids and sizes with various widths).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(x) => Some(x.into()),
            MetaValue::U16(x) => Some(x.into()),
            MetaValue::U32(x) => Some(x.into()),
            MetaValue::U64(x) => Some(x),
            MetaValue::I8(x) => u64::try_from(x).ok(),
            MetaValue::I16(x) => u64::try_from(x).ok(),
            MetaValue::I32(x) => u64::try_from(x).ok(),
            MetaValue::I64(x) => u64::try_from(x).ok(),
            _ => None,
        }
    }

    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(x) => Some(x),
            MetaValue::F64(x) => Some(x as f32),
            _ => None,
        }
    }

    /// A small integer as an `i32` (token types).
    pub fn as_i32(&self) -> Option<i32> {
        match *self {
            MetaValue::I32(x) => Some(x),
            MetaValue::U32(x) => Some(x as i32),
            MetaValue::I8(x) => Some(x.into()),
            MetaValue::U8(x) => Some(x.into()),
            MetaValue::I64(x) => Some(x as i32),
            _ => None,
        }
    }
}

/// Read access to a model file's metadata by key. The typed getters fail with
/// [`TextError::MissingMetadata`] naming the key when it is absent or of another type.
pub trait Metadata {
    /// The value under `key`, if the file has one.
    fn value(&self, key: &str) -> Option<&MetaValue>;

    fn has(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    fn get_str(&self, key: &str) -> Result<&str> {
        match self.value(key) {
            Some(MetaValue::String(s)) => Ok(s),
            _ => Err(missing(key)),
        }
    }

    fn get_u32(&self, key: &str) -> Result<u32> {
        let n = self.value(key).and_then(MetaValue::as_u64);
        n.and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| missing(key))
    }

    fn get_bool(&self, key: &str) -> Result<bool> {
        match self.value(key) {
            Some(MetaValue::Bool(b)) => Ok(*b),
            _ => Err(missing(key)),
        }
    }

    fn get_values(&self, key: &str) -> Result<&[MetaValue]> {
        match self.value(key) {
            Some(MetaValue::Array(items)) => Ok(items),
            _ => Err(missing(key)),
        }
    }

    fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_values(key)?
            .iter()
            .map(|v| match v {
                MetaValue::String(s) => Ok(s.as_str()),
                _ => Err(missing(key)),
            })
            .collect()
    }

    fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.get_values(key)?
            .iter()
            .map(|v| v.as_i32().ok_or_else(|| missing(key)))
            .collect()
    }
}

fn missing(key: &str) -> TextError {
    TextError::MissingMetadata { key: key.into() }
}

/// A GGUF file's metadata, read on its own.
#[derive(Debug, Clone, Default)]
pub struct GgufMetadata {
    values: HashMap<String, MetaValue>,
}

impl Metadata for GgufMetadata {
    fn value(&self, key: &str) -> Option<&MetaValue> {
        self.values.get(key)
    }
}

/// Nesting allowed for arrays of arrays (the format allows it; the bound keeps recursion shallow).
const MAX_DEPTH: usize = 64;

impl GgufMetadata {
    /// Reads the header and metadata of the GGUF file at `path` (versions 1 to 3, little-endian).
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path)
            .map_err(|e| TextError::io(format!("cannot open model file {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| TextError::io(format!("cannot stat {}", path.display()), e))?
            .len();
        let invalid = |message: String| TextError::InvalidGguf {
            path: path.to_path_buf(),
            message,
        };
        let mut r = Reader {
            inner: BufReader::new(file),
            left: len,
            wide: true,
        };
        let magic = r
            .bytes(4)
            .map_err(|_| invalid("file is shorter than the 4-byte GGUF magic".into()))?;
        if magic != b"GGUF" {
            let shown = String::from_utf8_lossy(&magic).into_owned();
            return Err(invalid(format!(
                "wrong magic {shown:?} (expected \"GGUF\")"
            )));
        }
        let header = |e: String| invalid(format!("header: {e}"));
        let version = r.u32().map_err(header)?;
        if !matches!(version, 1..=3) {
            return Err(invalid(format!(
                "GGUF version {version} is not supported (1 to 3)"
            )));
        }
        // Version 1 wrote counts and lengths as 32-bit numbers.
        r.wide = version > 1;
        let _tensors = r.length().map_err(header)?;
        let count = r.length().map_err(header)?;
        // Each entry takes at least a key length, a type and one byte of value.
        if count > r.left / (r.length_bytes() + 5) {
            return Err(header(format!(
                "{count} metadata entries cannot fit in the file"
            )));
        }
        let mut values = HashMap::with_capacity(count as usize);
        for _ in 0..count {
            let key = r.string().map_err(header)?;
            let kind = r.u32().map_err(header)?;
            let value = r
                .value(kind, 0)
                .map_err(|e| header(format!("`{key}`: {e}")))?;
            values.insert(key, value);
        }
        Ok(Self { values })
    }

    /// Metadata from values already read (tests, and files written in memory).
    pub fn from_values(values: impl IntoIterator<Item = (String, MetaValue)>) -> Self {
        Self {
            values: values.into_iter().collect(),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// A little-endian reader that knows how many bytes the file has left.
struct Reader {
    inner: BufReader<File>,
    left: u64,
    /// Counts and lengths are 64-bit (versions 2 and 3).
    wide: bool,
}

type Step<T> = std::result::Result<T, String>;

impl Reader {
    fn bytes(&mut self, n: u64) -> Step<Vec<u8>> {
        if n > self.left {
            return Err(format!(
                "{n} bytes asked for, {} left in the file",
                self.left
            ));
        }
        let mut out = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut out)
            .map_err(|e| format!("read failed: {e}"))?;
        self.left -= n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Step<[u8; N]> {
        let v = self.bytes(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&v);
        Ok(out)
    }

    fn u32(&mut self) -> Step<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Step<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// The size of a count or length in this file.
    fn length_bytes(&self) -> u64 {
        if self.wide {
            8
        } else {
            4
        }
    }

    fn length(&mut self) -> Step<u64> {
        match self.wide {
            true => self.u64(),
            false => self.u32().map(u64::from),
        }
    }

    /// A length-prefixed string; trailing NULs dropped and invalid UTF-8 replaced, as llama.cpp's files need.
    fn string(&mut self) -> Step<String> {
        let n = self.length()?;
        let mut v = self.bytes(n)?;
        while v.last() == Some(&0) {
            v.pop();
        }
        Ok(match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    fn value(&mut self, kind: u32, depth: usize) -> Step<MetaValue> {
        Ok(match kind {
            0 => MetaValue::U8(self.array::<1>()?[0]),
            1 => MetaValue::I8(i8::from_le_bytes(self.array()?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.array()?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array()?)),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(i32::from_le_bytes(self.array()?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => return Err(format!("{b} is not a boolean")),
            },
            8 => MetaValue::String(self.string()?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(format!("arrays nested deeper than {MAX_DEPTH}"));
                }
                let item = self.u32()?;
                let n = self.length()?;
                let least = match item {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 => self.length_bytes(),
                    9 => 4 + self.length_bytes(),
                    _ => 8,
                };
                if n > self.left / least {
                    return Err(format!("an array of {n} items cannot fit in the file"));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(i64::from_le_bytes(self.array()?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array()?)),
            other => return Err(format!("unknown value type {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u32, entries: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(entries.to_le_bytes());
        b
    }

    fn string(b: &mut Vec<u8>, s: &str) {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    }

    fn open(bytes: &[u8]) -> Result<GgufMetadata> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, bytes).unwrap();
        GgufMetadata::open(&path)
    }

    #[test]
    fn reads_every_type_and_the_typed_getters() {
        let mut b = header(3, 6);
        string(&mut b, "general.architecture");
        b.extend(8u32.to_le_bytes());
        string(&mut b, "llama\0");
        string(&mut b, "llama.block_count");
        b.extend(10u32.to_le_bytes());
        b.extend(30u64.to_le_bytes());
        string(&mut b, "tokenizer.ggml.add_bos_token");
        b.extend(7u32.to_le_bytes());
        b.push(1);
        string(&mut b, "tokenizer.ggml.tokens");
        b.extend(9u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        string(&mut b, "a");
        b.extend(2u64.to_le_bytes());
        b.extend([0xff, b'b']);
        string(&mut b, "tokenizer.ggml.scores");
        b.extend(9u32.to_le_bytes());
        b.extend(6u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(0.5f32.to_le_bytes());
        b.extend((-1.0f32).to_le_bytes());
        string(&mut b, "tokenizer.ggml.token_type");
        b.extend(9u32.to_le_bytes());
        b.extend(5u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(3i32.to_le_bytes());
        let m = open(&b).unwrap();
        assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(m.get_u32("llama.block_count").unwrap(), 30);
        assert!(m.get_bool("tokenizer.ggml.add_bos_token").unwrap());
        assert_eq!(
            m.get_str_array("tokenizer.ggml.tokens").unwrap(),
            ["a", "\u{fffd}b"]
        );
        let scores: Vec<_> = m
            .get_values("tokenizer.ggml.scores")
            .unwrap()
            .iter()
            .map(|v| v.as_f32())
            .collect();
        assert_eq!(scores, [Some(0.5), Some(-1.0)]);
        assert_eq!(m.get_i32_array("tokenizer.ggml.token_type").unwrap(), [3]);
        let e = m.get_u32("general.architecture").unwrap_err();
        assert!(e.to_string().contains("general.architecture"), "{e}");
        assert!(m.get_str("absent").is_err());
        assert_eq!(m.keys().count(), 6);
    }

    #[test]
    fn version_one_has_32_bit_lengths() {
        let mut b = b"GGUF".to_vec();
        b.extend(1u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        b.extend(3u32.to_le_bytes());
        b.extend(b"key");
        b.extend(4u32.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        assert_eq!(open(&b).unwrap().get_u32("key").unwrap(), 7);
    }

    #[test]
    fn hostile_headers_are_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"GG".to_vec(), "shorter than"),
            (b"GGML0000".to_vec(), "wrong magic"),
            (header(9, 0), "version 9"),
            (header(3, u64::MAX), "cannot fit"),
            (
                {
                    let mut b = header(3, 1);
                    b.extend(u64::MAX.to_le_bytes());
                    b.extend([0; 32]);
                    b
                },
                "left in the file",
            ),
            (
                {
                    let mut b = header(3, 1);
                    string(&mut b, "k");
                    b.extend(9u32.to_le_bytes());
                    b.extend(10u32.to_le_bytes());
                    b.extend((1u64 << 60).to_le_bytes());
                    b
                },
                "cannot fit",
            ),
            (
                {
                    let mut b = header(3, 1);
                    string(&mut b, "k");
                    b.extend(13u32.to_le_bytes());
                    b
                },
                "unknown value type 13",
            ),
            (
                {
                    let mut b = header(3, 1);
                    string(&mut b, "k");
                    b.extend(7u32.to_le_bytes());
                    b.push(2);
                    b
                },
                "not a boolean",
            ),
            (
                {
                    let mut b = header(3, 1);
                    string(&mut b, "k");
                    b.extend(9u32.to_le_bytes());
                    for _ in 0..=MAX_DEPTH {
                        b.extend(9u32.to_le_bytes());
                        b.extend(1u64.to_le_bytes());
                    }
                    b.extend([0; 64]);
                    b
                },
                "nested deeper",
            ),
        ];
        for (bytes, expected) in cases {
            let e = open(&bytes).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
    }
}
