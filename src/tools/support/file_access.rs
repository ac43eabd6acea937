//! Opening files the model names without hanging: the file tools (`read`, `edit`, `grep`) only open regular files.
//! The kind is checked with metadata (symlinks followed) before anything opens the path — opening a FIFO for
//! reading blocks until a writer comes, a character device may never end — and again on the open descriptor, which
//! is opened non-blocking so that a path swapped for a FIFO in between cannot block the open either.

use std::fs::{File, FileType, Metadata};
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use crate::tools::error::ToolError;

/// What kind of thing a file type is, for messages.
pub fn kind_name(file_type: &FileType) -> &'static str {
    if file_type.is_file() {
        "regular file"
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "named pipe (FIFO)"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// The refusal for a path that is not a regular file (`shown` is the path as the model gave it).
fn not_regular(shown: &str, tool: &str, file_type: &FileType) -> ToolError {
    if file_type.is_dir() {
        return ToolError::RespondToModel(format!(
            "{shown} is a directory, not a file. Use ls to list it."
        ));
    }
    ToolError::RespondToModel(format!(
        "{shown} is a {}, not a regular file; {tool} only opens regular files.",
        kind_name(file_type)
    ))
}

/// The metadata of `path` (symlinks followed) when it is a regular file, else an error for the model. Nothing is
/// opened.
pub fn require_regular(path: &Path, shown: &str, tool: &str) -> Result<Metadata, ToolError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| ToolError::RespondToModel(format!("Cannot read {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(not_regular(shown, tool, &meta.file_type()));
    }
    Ok(meta)
}

/// Opens `path` for reading when it is a regular file: checked before opening ([`require_regular`]), opened
/// non-blocking (an open never waits, even if the path became a FIFO in between), checked again on the descriptor,
/// then switched back to blocking reads. Returns the file and the descriptor's metadata.
pub fn open_regular(path: &Path, shown: &str, tool: &str) -> Result<(File, Metadata), ToolError> {
    require_regular(path, shown, tool)?;
    let cannot = |e: std::io::Error| ToolError::RespondToModel(format!("Cannot read {shown}: {e}"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular(shown, tool, &meta.file_type()));
    }
    set_blocking(&file).map_err(cannot)?;
    Ok((file, meta))
}

/// Clears `O_NONBLOCK` on an open file.
fn set_blocking(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl(2) on a descriptor we own; F_GETFL/F_SETFL touch no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a whole regular file of at most `max_bytes` (checked on the size first, and while reading, in case it
/// grows). `Ok(None)` when it is larger.
pub fn read_at_most(file: &File, max_bytes: u64) -> std::io::Result<Option<Vec<u8>>> {
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0);
    if hint > max_bytes {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Ok(None);
    }
    Ok(Some(bytes))
}
