//! Tools the agent can call: the tool trait, registry, policy and implementations (the spec the model sees is
//! [`crate::schema::ToolSpec`]).

pub mod bash;
pub mod block_place;
pub mod edit;
pub mod edit_match;
pub mod error;
pub mod file_access;
pub mod find;
pub mod grep;
pub mod ls;
pub mod mcp;
pub mod policy;
pub mod read;
pub mod recall;
pub mod registry;
pub mod rename_follow;
pub mod resources;
pub mod syntax_check;
pub mod tool;
pub mod truncate;
pub mod updates;
pub mod workspace;
pub mod write;
pub mod write_block;
