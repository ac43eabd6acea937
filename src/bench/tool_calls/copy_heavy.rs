//! The workloads of `agentd bench tool-calls` where the answer copies its prompt (what speculative decoding's
//! prompt lookup is for), and open-ended text as the control. The edits are written the way agentd's own agent
//! writes them on the local engine and aider does — as text blocks, not JSON tool arguments: a small model asked
//! for a `write` or `edit` *call* with the whole file or block puts a few words in the argument instead
//! (`"content": "This is a test file."`), so a tool-call form would not copy anything.
//!
//! - `edit`: the prompt shows a 31-line Rust file and asks for one SEARCH/REPLACE block (aider's diff format)
//!   whose SEARCH part quotes the 16-line `match` block and whose REPLACE part repeats it with one message
//!   changed.
//! - `rewrite`: the same file, and the whole updated file in one fenced block (one value changed): a whole-file
//!   rewrite, as agentd's file blocks and aider's whole format.
//! - `chat`: a short story, where the output copies nothing.
//!
//! Greedy sampling, no tools, so every endpoint and repetition sees the same request.

use crate::bench::BenchError;
use crate::provider::{CompletionRequest, Message, Sampling, ToolChoice};

/// The file the `edit` and `rewrite` prompts show (a data file: the engine's drafting test replays an edit of it
/// too).
pub const FILE: &str = include_str!("copy_heavy_file.rs.txt");

const EDIT_TASK: &str =
    "The error message should start with \"error: \". Reply with one SEARCH/REPLACE \
block: the whole `match` block as it is now, then the changed block, in this form:\n\nsrc/main.rs\n\
<<<<<<< SEARCH\n(old lines)\n=======\n(new lines)\n>>>>>>> REPLACE";

const REWRITE_TASK: &str =
    "Change the default number of words from 10 to 20. Reply with the whole updated file in one ```rust block.";

const CHAT_TASK: &str =
    "Write a short story, about 200 words, about a lighthouse keeper who finds a message \
in a bottle.";

/// Which copy-heavy request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Edit,
    Rewrite,
    Chat,
}

/// The request of `kind` with `system` as its system message.
pub fn request(
    kind: Kind,
    system: String,
    max_tokens: u32,
) -> Result<CompletionRequest, BenchError> {
    let shown = format!("Here is src/main.rs:\n\n```rust\n{FILE}```\n\n");
    let user = match kind {
        Kind::Edit => format!("{shown}{EDIT_TASK}"),
        Kind::Rewrite => format!("{shown}{REWRITE_TASK}"),
        Kind::Chat => CHAT_TASK.to_string(),
    };
    Ok(CompletionRequest {
        system: Some(system),
        messages: vec![Message::user(user)],
        tool_choice: ToolChoice::None,
        sampling: Sampling::greedy(),
        max_tokens: Some(max_tokens),
        ..CompletionRequest::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edit_block_is_in_the_file_and_the_prompts_show_it() {
        let start = FILE.find("    match std::fs").unwrap();
        let block = &FILE[start..FILE.rfind("    }\n}").unwrap() + 6];
        assert_eq!(block.lines().count(), 16, "{block}");
        assert_eq!(FILE.lines().count(), 31);
        assert!(FILE.contains("unwrap_or(10)") && FILE.contains("eprintln!(\"{path}: {e}\")"));
        for kind in [Kind::Edit, Kind::Rewrite, Kind::Chat] {
            let r = request(kind, "s".into(), 64).unwrap();
            let shown = serde_json::to_string(&r.messages).unwrap().contains(
                &serde_json::to_string(block)
                    .unwrap()
                    .trim_matches('"')
                    .to_string(),
            );
            assert_eq!(shown, kind != Kind::Chat);
            assert!(r.tools.is_empty());
        }
    }
}
