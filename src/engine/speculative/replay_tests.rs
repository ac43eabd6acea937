//! The drafter replayed offline on the real Qwen2.5-Coder tokenizer: a re-indented copy needs far fewer
//! verification steps with white space matched loosely than with exact lookup. (Moved here from the integration
//! suite, where the same edit runs through the engine with and without drafting: `Drafter` is the scheduler's
//! own, not the engine's API.)

use std::sync::Arc;

use super::{Drafter, SpeculativeConfig};
use crate::engine::test_models;
use crate::schema::ToolChoice;

/// Greedy verification of `tokens[prompt_len..]` replayed offline with a drafter of 8 tokens a step: how many
/// steps it takes (a step yields the confirmed drafts and one token of the model's own).
fn replay_steps(tokens: &[u32], prompt_len: usize, blank: Arc<[bool]>) -> usize {
    let mut d = Drafter::new(&SpeculativeConfig::default(), blank).unwrap();
    let (mut pos, mut steps) = (prompt_len, 0);
    while pos < tokens.len() {
        let draft = d.propose(&tokens[..pos], 8, 0.0);
        let actual = &tokens[pos..];
        let accepted = actual
            .iter()
            .zip(&draft)
            .take_while(|(a, b)| a == b)
            .count();
        let produced = &actual[..(accepted + 1).min(actual.len())];
        assert_eq!(d.record(&draft, produced), accepted);
        pos += produced.len();
        steps += 1;
    }
    steps
}

/// An edit that quotes the nested `match` block of a file one level up (every line 4 spaces less, as Qwen does):
/// with white space matched loosely and the copy's indentation learnt, drafting needs far fewer steps than exact
/// lookup, whose every n-gram across a line break fails. The replay runs on the real tokenizer's tokens of such a
/// reply after the chat prompt that asks for it (so it does not hang on the model's exact wording on this
/// processor).
#[test]
fn a_reindented_copy_needs_fewer_steps_with_white_space_matched_loosely() {
    // The file `bench tool-calls`' edit workload shows.
    let file = include_str!("../../bench/tool_calls/copy_heavy_file.rs.txt");
    let engine = test_models::cpu_engine(test_models::qwen_path());
    let user = format!(
        "Here is src/main.rs:\n\n```rust\n{file}```\n\nThe error message should start with \"error: \". Reply \
         with one SEARCH/REPLACE block: the whole `match` block as it is now, then the changed block, in this \
         form:\n\nsrc/main.rs\n<<<<<<< SEARCH\n(old lines)\n=======\n(new lines)\n>>>>>>> REPLACE"
    );
    let msgs = [serde_json::json!({"role": "user", "content": user})];
    let prompt = engine
        .chat_prompt(&msgs, &[], &ToolChoice::Auto, None)
        .unwrap();

    let block: Vec<&str> = file
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("match "))
        .take_while(|l| *l != "}")
        .collect();
    assert!(block.len() > 10, "the match block of the file");
    let quoted: String = block
        .iter()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let reply = format!("src/main.rs\n<<<<<<< SEARCH\n{quoted}=======\n");
    let ids = engine.tokenizer().encode(&reply, false).unwrap();
    let tokens = [prompt.clone(), ids].concat();
    let loose = replay_steps(&tokens, prompt.len(), engine.tokenizer().blank_tokens());
    let exact = replay_steps(&tokens, prompt.len(), Arc::from([]));
    assert!(
        loose * 4 <= exact * 3,
        "{loose} steps with white space matched loosely, {exact} with exact lookup"
    );
}
