//! The shortest way out of an unfinished call: when `max_tokens` is about to cut a constrained call, the decode
//! loop closes it in the fewest tokens it can find through the matcher, so the client still gets valid JSON
//! (flagged as truncated by `finish_reason: "length"`).
//!
//! The search is greedy over the grammar, not over guesses about JSON: from the current state it takes the
//! tokens the grammar forces, and where it has a choice the first allowed token of a fixed preference list of
//! single bytes that end things (`"`, `}`, `]`, `,`, then the shortest values `0`, `[`, `{`, then key letters). A
//! required property still missing, a `minItems` or a `minLength` is therefore filled with the shortest thing
//! the grammar accepts. The walk ends where the grammar accepts end of output (the call and its block closed).
//! The single-byte path is then re-tokenized greedily with the vocabulary and kept if the matcher accepts the
//! shorter form. Every probe is rolled back: computing a close changes nothing.

use crate::engine::constraint::Constraint;
use crate::engine::error::Result;

/// Single bytes tried, in order, where the grammar leaves a choice.
/// Closers first; `,` before digits so a number is not extended forever where a required key is missing.
pub const PREFERENCE: &[u8] =
    b"\"}],:0123456789[{-.ntfrueals bcdghijkmopqvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";

impl Constraint {
    /// Whether the output is inside a call (or a required call has not begun): ending here would leave the
    /// grammar unfinished.
    pub fn in_call(&mut self) -> Result<bool> {
        if self.matcher.is_stopped() {
            return Ok(false);
        }
        Ok(!self
            .matcher
            .is_accepting()
            .map_err(|e| self.grammar_error(e))?)
    }

    /// The fewest tokens found (at most `max`) that take the grammar from here to a state where the output may
    /// end; `None` if there is none within `max`. The matcher is left as it was.
    pub fn shortest_close(&mut self, max: usize) -> Result<Option<Vec<u32>>> {
        let mut path = Vec::new();
        let found = self.walk_close(max, &mut path);
        if !path.is_empty() {
            self.matcher
                .rollback(path.len())
                .map_err(|e| self.grammar_error(e))?;
        }
        if !found? {
            return Ok(None);
        }
        let compact = self.compact(&path)?;
        Ok(Some(if compact.len() < path.len() {
            compact
        } else {
            path
        }))
    }

    /// Feeds `tokens` (a close from [`Self::shortest_close`]) as generated output.
    pub fn force(&mut self, tokens: &[u32]) -> Result<()> {
        self.matcher
            .consume_tokens(tokens)
            .map_err(|e| self.grammar_error(e))?;
        self.stats.forced_tokens += tokens.len();
        Ok(())
    }

    /// Undoes the last `n` tokens fed to the grammar.
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        self.matcher.rollback(n).map_err(|e| self.grammar_error(e))
    }

    fn walk_close(&mut self, max: usize, path: &mut Vec<u32>) -> Result<bool> {
        loop {
            if !self.in_call()? {
                return Ok(true);
            }
            if path.len() >= max {
                return Ok(false);
            }
            let forced = self.matcher.compute_ff_tokens();
            if !forced.is_empty() {
                let n = forced.len().min(max - path.len());
                self.matcher
                    .consume_tokens(&forced[..n])
                    .map_err(|e| self.grammar_error(e))?;
                path.extend_from_slice(&forced[..n]);
                continue;
            }
            let mask = self
                .matcher
                .compute_mask()
                .map_err(|e| self.grammar_error(e))?;
            let pick = self
                .closers
                .iter()
                .copied()
                .find(|&t| mask.is_allowed(t))
                .or_else(|| mask.first_bit_set().map(|t| t as u32));
            let Some(tok) = pick else {
                return Ok(false);
            };
            self.matcher
                .consume_token(tok)
                .map_err(|e| self.grammar_error(e))?;
            path.push(tok);
        }
    }

    /// `path` with its runs of ordinary tokens re-tokenized greedily (longest vocabulary match), if the grammar
    /// accepts that form and ends accepting; else `path`.
    fn compact(&mut self, path: &[u32]) -> Result<Vec<u32>> {
        let Ok(env) = self.matcher.tok_env() else {
            return Ok(path.to_vec());
        };
        let trie = env.tok_trie();
        let mut out = Vec::new();
        let mut run: Vec<u8> = Vec::new();
        for &t in path {
            if trie.is_special_token(t) {
                out.extend(trie.greedy_tokenize(&run));
                run.clear();
                out.push(t);
            } else {
                run.extend_from_slice(trie.token(t));
            }
        }
        out.extend(trie.greedy_tokenize(&run));
        if out.len() >= path.len() {
            return Ok(path.to_vec());
        }
        let consumed = self
            .matcher
            .try_consume_tokens(&out)
            .map_err(|e| self.grammar_error(e))?;
        let ends = consumed == out.len() && !self.in_call()?;
        if consumed > 0 {
            self.rollback(consumed)?;
        }
        Ok(if ends { out } else { path.to_vec() })
    }
}
