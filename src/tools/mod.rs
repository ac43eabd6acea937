//! Tools the agent can call, one file per tool (`bash`, `edit`, `find`, `grep`, `ls`, `mcp`, `read`, `recall`,
//! `write`, `write_block`); the boundary they share: the tool trait, the registry, the error and the policy; and
//! what several tools use ([`support`]). The spec the model sees is [`crate::schema::ToolSpec`].

// The boundary.
pub mod error;
pub mod policy;
pub mod registry;
pub mod tool;

// The tools.
pub mod bash;
pub mod edit;
pub mod find;
pub mod grep;
pub mod ls;
pub mod mcp;
pub mod read;
pub mod recall;
pub mod write;
pub mod write_block;

pub mod support;
