//! Model files the engine makes: Hugging Face folders converted to GGUF (`hf_folder/`, written by
//! `gguf_write.rs`), synthetic models for tests and benchmarks (`synth/`), and [`resolve`], which finds a model
//! with `crate::model_files` and converts a folder into the GGUF the engine loads. Finding, fetching and
//! verifying files needs no tensor library and lives in `crate::model_files`.

pub mod gguf_write;
pub mod hf_folder;
pub mod synth;

use crate::engine::error::Result;
use crate::model_files::fetch::{self, FetchOptions, ModelOrigin, ModelSelector, ResolvedModel};

/// [`fetch::resolve`], with a model folder converted once into a GGUF in the cache (see [`hf_folder`]): the path
/// returned is always a GGUF file.
pub fn resolve(selector: &ModelSelector, opts: &FetchOptions) -> Result<ResolvedModel> {
    let mut resolved = fetch::resolve(selector, opts)?;
    if resolved.origin == ModelOrigin::Folder {
        resolved.path = hf_folder::convert(&resolved.path, &opts.home)?;
    }
    Ok(resolved)
}
