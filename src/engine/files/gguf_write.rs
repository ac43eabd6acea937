//! Writing GGUF v3 files (llama.cpp's layout, 32-byte alignment): the metadata, the tensor table, then each
//! tensor's bytes streamed by the caller, so a file of any size needs no more memory than the caller's buffer.
//! The file is written beside its target (`.partial`), synced and renamed: a half-written file never has the
//! final name. Synthetic checkpoints (`synth/`) and converted Hugging Face folders (`hf_folder/`) use it.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;

use candle_core::quantized::gguf_file::Value;

use crate::engine::error::{EngineError, Result};

/// Tensor data alignment (llama.cpp's default; `general.alignment` is written with it).
pub const ALIGNMENT: u64 = 32;

/// One tensor's entry in the table: dims with `ne0` (a row's length) first, GGUF's type id, and its data size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub bytes: u64,
}

/// Writes `out`: `metadata` (with `general.alignment` added unless given; it must be [`ALIGNMENT`]), the `tensors` table, then for each tensor in
/// order the bytes `data(index, writer)` writes (exactly `bytes` of them; the padding is added here). Returns
/// the file's size.
pub fn write(
    out: &Path,
    metadata: &[(String, Value)],
    tensors: &[TensorEntry],
    mut data: impl FnMut(usize, &mut dyn Write) -> std::io::Result<()>,
) -> Result<u64> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let partial = out.with_extension("gguf.partial");
    let file = File::create(&partial).map_err(io_err(&partial))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let alignment = (
        "general.alignment".to_string(),
        Value::U32(ALIGNMENT as u32),
    );
    let given = metadata.iter().any(|(k, _)| k == "general.alignment");
    let metadata: Vec<&(String, Value)> = metadata
        .iter()
        .chain((!given).then_some(&alignment))
        .collect();
    let header = (|| -> std::io::Result<()> {
        w.write_all(b"GGUF")?;
        w.write_all(&3u32.to_le_bytes())?;
        w.write_all(&(tensors.len() as u64).to_le_bytes())?;
        w.write_all(&(metadata.len() as u64).to_le_bytes())?;
        for (key, value) in &metadata {
            write_str(&mut w, key)?;
            w.write_all(&value_type(value).to_le_bytes())?;
            write_value(&mut w, value)?;
        }
        let mut offset = 0u64;
        for t in tensors {
            write_str(&mut w, &t.name)?;
            w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                w.write_all(&d.to_le_bytes())?;
            }
            w.write_all(&t.type_id.to_le_bytes())?;
            w.write_all(&offset.to_le_bytes())?;
            offset += t.bytes.div_ceil(ALIGNMENT) * ALIGNMENT;
        }
        pad(&mut w)
    })();
    header.map_err(io_err(&partial))?;
    for (i, t) in tensors.iter().enumerate() {
        let start = w.stream_position().map_err(io_err(&partial))?;
        data(i, &mut w).map_err(io_err(&partial))?;
        let written = w.stream_position().map_err(io_err(&partial))? - start;
        if written != t.bytes {
            return Err(EngineError::Internal(format!(
                "tensor {} wrote {written} bytes, its entry says {}",
                t.name, t.bytes
            )));
        }
        pad(&mut w).map_err(io_err(&partial))?;
    }
    let file = w
        .into_inner()
        .map_err(|e| io_err(&partial)(e.into_error()))?;
    file.sync_all().map_err(io_err(&partial))?;
    let bytes = file.metadata().map_err(io_err(&partial))?.len();
    drop(file);
    std::fs::rename(&partial, out).map_err(io_err(out))?;
    Ok(bytes)
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::io(format!("cannot write {}", path.display()), e)
}

fn write_str<W: Write>(w: &mut W, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

/// GGUF's value type id of a metadata value.
fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn write_value<W: Write>(w: &mut W, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[u8::from(*x)]),
        Value::String(s) => write_str(w, s),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Array(items) => {
            // An empty array's element type is not knowable from the value; u32 is what llama.cpp reads fine.
            let elem = items.first().map_or(4, value_type);
            w.write_all(&elem.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|i| write_value(w, i))
        }
    }
}

fn pad<W: Write + Seek>(w: &mut W) -> std::io::Result<()> {
    let pos = w.stream_position()?;
    let rem = pos % ALIGNMENT;
    if rem != 0 {
        w.write_all(&vec![0u8; (ALIGNMENT - rem) as usize])?;
    }
    Ok(())
}
