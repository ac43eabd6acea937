//! Opening GGUF files and reading their metadata with errors that name the missing key.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};

use crate::engine::error::{EngineError, Result};

/// An opened GGUF file: its parsed header (metadata + tensor index) and the path to read tensors from.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
}

impl GgufFile {
    /// Reads and validates the header. Fails clearly on a missing file, wrong magic or a truncated file.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| {
            EngineError::io(format!("cannot open model file {}", path.display()), e)
        })?;
        let file_len = file
            .metadata()
            .map_err(|e| EngineError::io(format!("cannot stat {}", path.display()), e))?
            .len();
        let mut reader = BufReader::new(file);
        let mut magic = [0u8; 4];
        if reader.read_exact(&mut magic).is_err() {
            return Err(invalid(path, "file is shorter than the 4-byte GGUF magic"));
        }
        if &magic != b"GGUF" {
            return Err(invalid(
                path,
                format!(
                    "wrong magic {:?} (expected \"GGUF\")",
                    String::from_utf8_lossy(&magic)
                ),
            ));
        }
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| EngineError::io(format!("cannot seek {}", path.display()), e))?;
        let content =
            Content::read(&mut reader).map_err(|e| invalid(path, format!("header: {e}")))?;
        // A truncated download parses its header fine; check that every tensor's bytes are present. (A file
        // without tensors, such as llama.cpp's vocabulary-only files, need not pad up to the data offset.)
        let mut needed = match content.tensor_infos.is_empty() {
            true => 0,
            false => content.tensor_data_offset,
        };
        for info in content.tensor_infos.values() {
            let elems = info.shape.elem_count();
            let block = info.ggml_dtype.block_size();
            let bytes = elems / block * info.ggml_dtype.type_size();
            needed = needed.max(content.tensor_data_offset + info.offset + bytes as u64);
        }
        if needed > file_len {
            return Err(invalid(
                path,
                format!("truncated: tensors need {needed} bytes but the file has {file_len}"),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
        })
    }

    pub fn get(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| EngineError::MissingMetadata { key: key.into() })
    }

    pub fn has(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.get(key)?
            .to_string()
            .map(|s| s.as_str())
            .map_err(|_| missing(key))
    }

    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.get(key)?;
        // Integer metadata is stored with various widths in the wild; accept any non-negative integer.
        let n = match v {
            Value::U8(x) => *x as u64,
            Value::U16(x) => *x as u64,
            Value::U32(x) => *x as u64,
            Value::U64(x) => *x,
            Value::I8(x) if *x >= 0 => *x as u64,
            Value::I16(x) if *x >= 0 => *x as u64,
            Value::I32(x) if *x >= 0 => *x as u64,
            Value::I64(x) if *x >= 0 => *x as u64,
            _ => return Err(missing(key)),
        };
        u32::try_from(n).map_err(|_| missing(key))
    }

    pub fn get_f32(&self, key: &str) -> Result<f32> {
        match self.get(key)? {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            _ => Err(missing(key)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get(key)?.to_bool().map_err(|_| missing(key))
    }

    pub fn get_array(&self, key: &str) -> Result<&Vec<Value>> {
        self.get(key)?.to_vec().map_err(|_| missing(key))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_array(key)?
            .iter()
            .map(|v| v.to_string().map(|s| s.as_str()).map_err(|_| missing(key)))
            .collect()
    }

    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.get_array(key)?
            .iter()
            .map(|v| match v {
                Value::I32(x) => Ok(*x),
                Value::U32(x) => Ok(*x as i32),
                Value::I8(x) => Ok(*x as i32),
                Value::U8(x) => Ok(*x as i32),
                Value::I64(x) => Ok(*x as i32),
                _ => Err(missing(key)),
            })
            .collect()
    }

    /// `general.architecture`, e.g. `llama` or `qwen2`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// Reads one tensor's raw quantized data.
    pub fn reader(&self) -> Result<BufReader<File>> {
        let file = File::open(&self.path)
            .map_err(|e| EngineError::io(format!("cannot open {}", self.path.display()), e))?;
        Ok(BufReader::new(file))
    }
}

fn missing(key: &str) -> EngineError {
    EngineError::MissingMetadata { key: key.into() }
}

fn invalid(path: &Path, message: impl Into<String>) -> EngineError {
    EngineError::InvalidGguf {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
