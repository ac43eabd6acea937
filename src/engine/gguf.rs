//! Opening GGUF files and reading their metadata with errors that name the missing key; the file mapped into
//! memory, so tensors used as stored are read in place ([`SharedBytes`]) instead of copied out at load.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

use crate::engine::error::{EngineError, Result};
pub use crate::text::gguf_meta::MetaValue;
use crate::text::gguf_meta::{GgufMetadata, Metadata};

/// An opened GGUF file: its parsed header (metadata + tensor index) and the path to read tensors from.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
    /// The metadata in the text layer's types (the tokenizer and template read it through [`Metadata`]).
    meta: GgufMetadata,
    /// The file mapped read-only, once asked for ([`GgufFile::mapped`]).
    map: Mutex<Option<Arc<memmap2::Mmap>>>,
}

/// Read-only bytes that clone cheaply: a range of a mapped file (weights read in place, shared with the page
/// cache and with every process that maps the same file), or an owned buffer.
#[derive(Clone)]
pub struct SharedBytes {
    /// Keeps the memory alive and unchanged while `ptr..ptr + len` is read.
    _owner: Owner,
    ptr: *const u8,
    len: usize,
}

#[derive(Clone)]
enum Owner {
    Map(Arc<memmap2::Mmap>),
    Buf(Arc<Vec<u8>>),
}

// SAFETY: the bytes are never written through this type (or by anyone while an owner lives: a shared `Vec` is
// immutable, a map is read-only); `_owner` keeps them alive, so sharing the pointer across threads is sound.
unsafe impl Send for SharedBytes {}
// SAFETY: as above; only shared reads happen.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    fn new(owner: Owner, range: Range<usize>) -> Self {
        let base = match &owner {
            Owner::Map(m) => &m[range.clone()],
            Owner::Buf(b) => &b[range.clone()],
        };
        let (ptr, len) = (base.as_ptr(), base.len());
        Self {
            _owner: owner,
            ptr,
            len,
        }
    }

    /// Whether the bytes are read in place from a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self._owner, Owner::Map(_))
    }

    /// Hands the whole pages of a mapped range back to the kernel (`MADV_DONTNEED`) once their bytes have
    /// been copied elsewhere (weights repacked at load), so that they stop counting in the process's RSS.
    /// Nothing changes for readers: a read-only file mapping faults the same bytes back in from the file.
    /// A no-op for owned buffers and where the advice is refused.
    pub fn release_pages(&self) {
        let Owner::Map(map) = &self._owner else {
            return;
        };
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = if page > 0 { page as usize } else { 4096 };
        let offset = self.ptr as usize - map.as_ptr() as usize;
        let start = offset.next_multiple_of(page);
        let end = (offset + self.len) / page * page;
        if end > start {
            // SAFETY: DONTNEED on a private read-only file mapping only drops resident pages; later reads
            // of them (by any clone of this map) fault the file's unchanged bytes back in, so no reference
            // into the map ever sees different data.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(v: Vec<u8>) -> Self {
        let len = v.len();
        Self::new(Owner::Buf(Arc::new(v)), 0..len)
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies inside the owner's memory (checked by the slicing in `new`), which
        // `_owner` keeps alive and nobody writes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
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
        // candle's reader divides by the file's `general.alignment` and trusts a few other values; a panic in it
        // on a hostile header is this file's error, not the process's.
        let mut content =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)))
                .map_err(|_| invalid(path, "header: malformed (the reader gave up on it)"))?
                .map_err(|e| invalid(path, format!("header: {e}")))?;
        // A truncated download parses its header fine; check that every tensor's bytes are present. (A file
        // without tensors, such as llama.cpp's vocabulary-only files, need not pad up to the data offset.)
        let mut needed = match content.tensor_infos.is_empty() {
            true => 0,
            false => content.tensor_data_offset,
        };
        for (name, info) in &content.tensor_infos {
            // Checked: a file's dimensions and offsets may be anything, and a product that wraps would pass.
            let end = tensor_bytes(info)
                .and_then(|b| content.tensor_data_offset.checked_add(info.offset)?.checked_add(b as u64))
                .ok_or_else(|| {
                    invalid(
                        path,
                        format!(
                            "tensor `{name}`: dimensions {:?} of {:?} or its offset {} are not a size",
                            info.shape.dims(),
                            info.ggml_dtype,
                            info.offset
                        ),
                    )
                })?;
            needed = needed.max(end);
        }
        if needed > file_len {
            return Err(invalid(
                path,
                format!("truncated: tensors need {needed} bytes but the file has {file_len}"),
            ));
        }
        // Moved out of candle's header, not copied: the vocabulary is held once.
        let metadata = std::mem::take(&mut content.metadata);
        let meta = GgufMetadata::from_values(metadata.into_iter().map(|(k, v)| (k, meta_value(v))));
        Ok(Self {
            path: path.to_path_buf(),
            content,
            meta,
            map: Mutex::new(None),
        })
    }

    /// Tensor `name`'s type, shape (rows first) and byte range in the file.
    pub fn tensor_range(&self, name: &str) -> Result<(GgmlDType, Vec<usize>, Range<usize>)> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| invalid(&self.path, format!("tensor `{name}` is missing")))?;
        // Checked when the file was opened.
        let bytes = tensor_bytes(info).unwrap_or(0);
        let start = (self.content.tensor_data_offset + info.offset) as usize;
        Ok((
            info.ggml_dtype,
            info.shape.dims().to_vec(),
            start..start + bytes,
        ))
    }

    /// Tensor `name`'s bytes as stored, read in place from the mapped file.
    pub fn mapped(&self, name: &str) -> Result<SharedBytes> {
        let (_, _, range) = self.tensor_range(name)?;
        let mut slot = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let map = match &*slot {
            Some(m) => m.clone(),
            None => {
                let file = File::open(&self.path).map_err(|e| {
                    EngineError::io(format!("cannot open {}", self.path.display()), e)
                })?;
                // SAFETY: the map is read-only and model files are never changed in place (the cache writes
                // a new file and renames it over); a file truncated under a running server is outside what
                // any mmap-based loader (llama.cpp's included) can defend against.
                let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| {
                    EngineError::io(format!("cannot map {}", self.path.display()), e)
                })?;
                // Read ahead: every weight is touched by the first forward pass anyway.
                let _ = map.advise(memmap2::Advice::WillNeed);
                slot.insert(Arc::new(map)).clone()
            }
        };
        if range.end > map.len() {
            return Err(invalid(
                &self.path,
                format!("tensor `{name}` ends past the end of the file"),
            ));
        }
        Ok(SharedBytes::new(Owner::Map(map), range))
    }

    pub fn get(&self, key: &str) -> Result<&MetaValue> {
        self.meta.value(key).ok_or_else(|| missing(key))
    }

    pub fn has(&self, key: &str) -> bool {
        self.meta.has(key)
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.meta.get_str(key).map_err(|_| missing(key))
    }

    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.meta.get_u32(key).map_err(|_| missing(key))
    }

    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.get(key)?.as_f32().ok_or_else(|| missing(key))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.meta.get_bool(key).map_err(|_| missing(key))
    }

    pub fn get_array(&self, key: &str) -> Result<&[MetaValue]> {
        self.meta.get_values(key).map_err(|_| missing(key))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.meta.get_str_array(key).map_err(|_| missing(key))
    }

    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.meta.get_i32_array(key).map_err(|_| missing(key))
    }

    /// The metadata alone, as the text layer reads it.
    pub fn metadata(&self) -> &GgufMetadata {
        &self.meta
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

/// Bytes a tensor's data takes in the file (whole blocks of its type); `None` when its element count overflows
/// or is not a whole number of blocks.
fn tensor_bytes(info: &candle_core::quantized::gguf_file::TensorInfo) -> Option<usize> {
    let elems = info
        .shape
        .dims()
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))?;
    let block = info.ggml_dtype.block_size();
    if !elems.is_multiple_of(block) {
        return None;
    }
    (elems / block).checked_mul(info.ggml_dtype.type_size())
}

impl Metadata for GgufFile {
    fn value(&self, key: &str) -> Option<&MetaValue> {
        self.meta.value(key)
    }
}

/// The text layer's value as candle's (to write it into another GGUF).
pub(crate) fn candle_value(v: &MetaValue) -> Value {
    match v {
        MetaValue::U8(x) => Value::U8(*x),
        MetaValue::I8(x) => Value::I8(*x),
        MetaValue::U16(x) => Value::U16(*x),
        MetaValue::I16(x) => Value::I16(*x),
        MetaValue::U32(x) => Value::U32(*x),
        MetaValue::I32(x) => Value::I32(*x),
        MetaValue::U64(x) => Value::U64(*x),
        MetaValue::I64(x) => Value::I64(*x),
        MetaValue::F32(x) => Value::F32(*x),
        MetaValue::F64(x) => Value::F64(*x),
        MetaValue::Bool(x) => Value::Bool(*x),
        MetaValue::String(x) => Value::String(x.clone()),
        MetaValue::Array(items) => Value::Array(items.iter().map(candle_value).collect()),
    }
}

/// candle's value as the text layer's.
fn meta_value(v: Value) -> MetaValue {
    match v {
        Value::U8(x) => MetaValue::U8(x),
        Value::I8(x) => MetaValue::I8(x),
        Value::U16(x) => MetaValue::U16(x),
        Value::I16(x) => MetaValue::I16(x),
        Value::U32(x) => MetaValue::U32(x),
        Value::I32(x) => MetaValue::I32(x),
        Value::U64(x) => MetaValue::U64(x),
        Value::I64(x) => MetaValue::I64(x),
        Value::F32(x) => MetaValue::F32(x),
        Value::F64(x) => MetaValue::F64(x),
        Value::Bool(x) => MetaValue::Bool(x),
        Value::String(x) => MetaValue::String(x),
        Value::Array(items) => MetaValue::Array(items.into_iter().map(meta_value).collect()),
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
