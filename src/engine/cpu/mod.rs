//! The CPU engine's own kernels and forward pass: activations quantized once per matmul input, dot-product
//! kernels per weight type and instruction set (picked at run time), a thread pool that splits each matmul by
//! rows, and a forward pass over preallocated buffers for a batch of sequences over the paged KV store
//! (`engine::kv`). Its weights come from the shared loader (`arch::weights`); candle runs the other devices.

pub mod act;
pub(crate) mod attention;
mod embedding;
pub mod forward;
pub mod isa;
pub(crate) mod kernels;
pub mod pool;
pub mod qmatrix;
pub(crate) mod vector;
