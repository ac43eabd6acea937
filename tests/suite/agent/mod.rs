//! The agent layer: the loop and `Agent` on scripted providers, and the sessions it records (trees, budget,
//! compaction, cache, export, logs).

mod agent_loop;
mod session;
