//! The self-checks a coding-agent run does before it says "done": does each changed file still parse
//! ([`parse`]), did an edit drop top-level names that other code may use ([`defs`]) or change settings the task
//! does not name ([`settings`]), or took assertions out of a test file ([`kept_tests`]), which commands check
//! the work ([`commands`]: those the task names, its test files, else the repository's own test command), and
//! which examples a changed function's docstring gives ([`examples`]: run by the caller, as commands are).
//! Everything here is judged from texts the caller hands in; only [`parse`] runs programs (the languages' own
//! parsers, each under a time limit).
//!
//! Files: `lang` (a file's language from its name), `bounded` (running a checker with a time limit), `blank`
//! (comments and strings blanked, for reading structure), `parse`, `defs`, `settings`, `kept_tests`, `commands`, `examples` (with its script `examples.py`).

mod blank;
mod bounded;
pub mod commands;
pub mod defs;
pub mod examples;
mod kept_tests;
mod lang;
pub mod parse;
pub mod settings;

pub use commands::{check_commands, CheckCommand};
pub use defs::{lost_definitions, lost_unless_named, top_level_names, Names};
pub use examples::{changed_functions, examples_command};
pub use kept_tests::removed_assertions;
pub use parse::{breaks, parse_verdict, Verdict};
pub use settings::{keep_unasked_settings, unasked_settings};

#[cfg(test)]
mod tests;
