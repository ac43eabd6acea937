//! agentd: a GPU-local inference-plus-agent appliance (see `../shared/DESIGN.md`).
//!
//! The library holds every boundary; the binary (`main.rs`, `cli/`) only parses flags and wires them.

pub mod agent;
pub mod app;
pub mod bench;
pub mod clients;
pub mod config;
#[cfg(feature = "local")]
pub mod engine;
pub mod env;
pub mod logging;
pub mod mcp;
pub mod model_files;
pub mod provider;
pub mod schema;
pub mod server;
pub mod session;
pub mod text;
pub mod tools;
pub mod transcript;

/// The system's allocator, counting the allocations of threads given a memory budget (chat template renders;
/// see `text::render_budget`).
#[global_allocator]
static ALLOCATOR: text::render_budget::BudgetAllocator = text::render_budget::BudgetAllocator;
