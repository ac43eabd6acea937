//! The micro-benchmark surface: exactly the entry points `benches/*.rs` time (`cargo bench --bench NAME`, see
//! `benches/README.md`), re-exported from the engine's folders, which are otherwise private. It is not an API:
//! nothing else in or out of the crate uses it, and a bench that needs another kernel adds its name here.

// `cpu_matmul`: the CPU engine's quantized matmul (weights from raw GGUF bytes, activations quantized once, rows
// split over the thread pool).
pub use crate::engine::cpu::act::Acts;
pub use crate::engine::cpu::isa::Isa;
pub use crate::engine::cpu::pool::ThreadPool;
pub use crate::engine::cpu::qmatrix::{matmul_many, QMatrix};
pub use crate::engine::gguf::SharedBytes;

// `sampler` and `constraint_mask`: one sampling step, alone and under a request's grammar.
pub use crate::engine::constraint::Constraint;
pub use crate::engine::sampler::Sampler;

// `verify_step`: one batched forward step of the CPU engine over its paged KV store.
pub use crate::engine::cpu::forward::CpuModel;
pub use crate::engine::kv::{BatchSeq, KvBlocks};
