//! The app layer: the coding session's rules (loop rules, edit format, reply revision) and its doors (`agentd
//! run` and the HTTP sessions API), confined to a workspace.

#[cfg(feature = "local")]
mod blocks_grammar;
mod confinement;
mod doors;
mod edit_format;
mod loop_rules;
mod second_choice;
