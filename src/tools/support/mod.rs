//! What the tools share and own no tool of their own: opening files safely, truncating output, matching and
//! placing edits, checking syntax, following renames, the workspace the argument grammars see, the stream of
//! partial output, and the processes and logs a session cleans up.

pub mod block_place;
pub mod edit_match;
pub mod file_access;
pub mod rename_follow;
pub mod session_resources;
pub mod syntax_check;
pub mod truncate;
pub mod update_channel;
pub mod workspace;
