//! Tools the agent can call: the spec the model sees (`spec`), the tool trait, registry and implementations.

pub mod bash;
pub mod edit;
pub mod find;
pub mod grep;
pub mod ls;
pub mod policy;
pub mod read;
pub mod recall;
pub mod registry;
pub mod spec;
pub mod tool;
pub mod truncate;
pub mod write;
