//! The coding-agent harness: what a run does around the model's turns (for now, the self-checks in [`checks`]).
pub mod checks;
