//! Speculative decoding's drafts: where a sequence's next tokens are guessed before the model confirms them.
//!
//! **Prompt lookup** (vLLM's `ngram` method, llama.cpp's `--spec-type ngram-simple`): the last `n` tokens of the
//! sequence (prompt + output, `prompt_lookup_min ≤ n ≤ prompt_lookup_max`, longest first) are searched for
//! earlier in the same sequence, and the tokens that followed their most recent earlier occurrence are the
//! draft. An agent's output copies its input — an edit quotes the file it read, a rewrite repeats most of it — so
//! such drafts are often right, and the scheduler verifies all of them in one forward pass
//! ([`Sequence::sample`](crate::engine::runtime::sequence::Sequence::sample) keeps exactly the tokens plain decoding would have produced).
//!
//! **Re-indented copies**: white-space-only tokens match each other in the lookup, and a drafter learns how the
//! copy rewrites its source's indentation (an edit quoting a nested block one level up, code moved into a new
//! `if`), so such drafts carry the copy's own indentation instead of being refuted at every line. Exact drafting
//! (vLLM's rule, where one changed indentation token breaks every n-gram that spans it) misses these.
//!
//! **Adaptive**: a draft costs a verify step more than a plain one, so each sequence's [`Drafter`] drafts only as
//! many tokens as its recent acceptance says will pay at the price the scheduler's [`StepCost`] measures for this
//! device and batch, and backs off (1, 2, 4, … up to [`MAX_SKIP`] steps) after a draft of which nothing was
//! accepted — so open-ended text, where lookups rarely match or are wrong, pays almost nothing.
//!
//! The interface is the [`Drafter`]'s `propose`/`record`: a draft model (another GGUF of the same vocabulary) would
//! propose through the same two calls.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How drafts are made (`--speculative`; vLLM's `speculative_config.method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SpecMethod {
    /// No drafting: one decode token per step.
    Off,
    /// Prompt lookup: n-grams of the sequence itself.
    #[default]
    Ngram,
}

impl std::str::FromStr for SpecMethod {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "none" => Ok(Self::Off),
            "ngram" | "prompt_lookup" => Ok(Self::Ngram),
            other => Err(format!(
                "unknown speculative method {other:?} (expected ngram or off)"
            )),
        }
    }
}

/// Speculative decoding settings, with vLLM's `speculative_config` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeculativeConfig {
    pub method: SpecMethod,
    /// The most draft tokens verified per step.
    pub num_speculative_tokens: usize,
    /// The shortest n-gram a lookup may match.
    pub prompt_lookup_min: usize,
    /// The longest n-gram a lookup tries first.
    pub prompt_lookup_max: usize,
}

/// Draft tokens per step by default: the adaptive drafter shortens them where they do not pay.
pub const DEFAULT_NUM_SPECULATIVE_TOKENS: usize = 8;
pub const DEFAULT_PROMPT_LOOKUP_MIN: usize = 2;
pub const DEFAULT_PROMPT_LOOKUP_MAX: usize = 5;
/// The upper bound on `num_speculative_tokens` (a verify step feeds 1 + k tokens of one sequence).
pub const MAX_SPECULATIVE_TOKENS: usize = 32;
/// The longest back-off, in steps, after drafts that were all rejected.
pub const MAX_SKIP: u32 = 32;

impl Default for SpeculativeConfig {
    fn default() -> Self {
        Self {
            method: SpecMethod::Ngram,
            num_speculative_tokens: DEFAULT_NUM_SPECULATIVE_TOKENS,
            prompt_lookup_min: DEFAULT_PROMPT_LOOKUP_MIN,
            prompt_lookup_max: DEFAULT_PROMPT_LOOKUP_MAX,
        }
    }
}

impl SpeculativeConfig {
    /// No drafting.
    pub fn off() -> Self {
        Self {
            method: SpecMethod::Off,
            ..Self::default()
        }
    }

    /// Whether drafts are made at all.
    pub fn enabled(&self) -> bool {
        self.method != SpecMethod::Off && self.num_speculative_tokens > 0
    }

    /// Checks the settings against each other.
    pub fn validate(&self) -> Result<(), String> {
        if self.num_speculative_tokens > MAX_SPECULATIVE_TOKENS {
            return Err(format!(
                "num_speculative_tokens ({}) must be at most {MAX_SPECULATIVE_TOKENS}",
                self.num_speculative_tokens
            ));
        }
        if self.prompt_lookup_min == 0 {
            return Err("prompt_lookup_min must be at least 1".into());
        }
        if self.prompt_lookup_max < self.prompt_lookup_min {
            return Err(format!(
                "prompt_lookup_max ({}) must be at least prompt_lookup_min ({})",
                self.prompt_lookup_max, self.prompt_lookup_min
            ));
        }
        Ok(())
    }
}

/// What a [`prompt_lookup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup<'a> {
    /// The tokens that followed the match in its source.
    pub draft: &'a [u32],
    /// How long the matched suffix is (0: nothing found), and where its source occurrence ends.
    pub n: usize,
    pub source_end: usize,
}

/// The tokens that followed the most recent earlier occurrence of the longest suffix of `tokens` (between
/// `min_n` and `max_n` tokens long), at most `k` of them; an empty draft when no such suffix occurs earlier.
///
/// Tokens marked in `blank` (white space only: indentation, line breaks) all match each other, so a copy whose
/// indentation changed — code moved into or out of a block, quoted at another depth — still finds its source
/// (see [`Drafter::propose`] for how such a draft's white space is then written).
pub fn prompt_lookup<'a>(
    tokens: &'a [u32],
    min_n: usize,
    max_n: usize,
    k: usize,
    blank: &[bool],
) -> Lookup<'a> {
    let mut found = Lookup {
        draft: &[],
        n: 0,
        source_end: 0,
    };
    let len = tokens.len();
    if k == 0 || min_n == 0 || len < min_n + 1 {
        return found;
    }
    let is_blank = |t: u32| blank.get(t as usize).copied().unwrap_or(false);
    let same = |a: u32, b: u32| a == b || (is_blank(a) && is_blank(b));
    let max_n = max_n.min(len - 1);
    let last = tokens[len - 1];
    let (mut best_n, mut best_end) = (0, 0);
    // `end` is where a candidate occurrence ends; it must be followed by at least one token.
    for end in (0..len - 1).rev() {
        if !same(tokens[end], last) {
            continue;
        }
        let mut n = 1;
        while n < max_n && n <= end && same(tokens[end - n], tokens[len - 1 - n]) {
            n += 1;
        }
        if n > best_n {
            (best_n, best_end) = (n, end);
            if n == max_n {
                break;
            }
        }
    }
    if best_n < min_n {
        return found;
    }
    let start = best_end + 1;
    found.draft = &tokens[start..(start + k).min(len)];
    (found.n, found.source_end) = (best_n, best_end);
    found
}

/// What drafting did for one sequence (reported with its usage, summed into `/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecStats {
    /// Verify steps that carried drafts.
    pub drafts: usize,
    /// Draft tokens verified.
    pub draft_tokens: usize,
    /// Draft tokens the model confirmed (output tokens that cost no decode step of their own).
    pub accepted_tokens: usize,
}

/// How fast a sequence's recent acceptance record fades (per verified draft).
const DECAY: f64 = 0.8;

/// The most white-space tokens a drafter remembers the copy's rewriting of.
const INDENT_MAP: usize = 16;

/// One sequence's drafting state: its settings, its acceptance record, its back-off and what it proposed and
/// got accepted.
///
/// The record estimates `p`, the chance that a draft token is right given the one before it was (decayed counts
/// of confirmed and refuted draft tokens, starting from an optimistic 3 in 4). A draft's `j`-th token is worth
/// verifying when `p^j` — the chance it is reached and right, saving a whole step — is at least the price of
/// verifying one more token in units of a step (the scheduler's [`StepCost`]). So copying stretches get long
/// drafts, guesses get short ones or none: when even one token does not pay, a single-token probe is still made
/// now and then (after 1, 2, 4, … up to [`MAX_SKIP`] skipped steps) so that a new copying stretch is noticed.
#[derive(Debug, Clone)]
pub struct Drafter {
    config: SpeculativeConfig,
    /// The model's white-space-only tokens ([`prompt_lookup`] matches them with each other).
    blank: Arc<[bool]>,
    /// Decayed counts of evidence that the copy's white space is (is not) its source's: blank draft tokens
    /// confirmed (refuted), blank tokens of matched suffixes that were the same (different).
    indent_same: f64,
    indent_shifted: f64,
    /// What the copy writes for a white-space token of its source, as last seen (most recent first, at most
    /// [`INDENT_MAP`] entries).
    indent_map: Vec<(u32, u32)>,
    /// The source tokens of the last proposal (before white space was rewritten), to learn from its refutation.
    last_source: Vec<u32>,
    /// Decayed counts of confirmed and refuted draft tokens.
    hits: f64,
    misses: f64,
    /// Steps to skip before the next lookup.
    skip: u32,
    /// The next back-off after a fully rejected draft.
    backoff: u32,
    pub stats: SpecStats,
}

impl Drafter {
    /// A drafter for one sequence; `None` when drafting is off. `blank`: the model's white-space-only tokens
    /// ([`Tokenizer::blank_tokens`](crate::text::tokenizer::Tokenizer::blank_tokens)).
    pub fn new(config: &SpeculativeConfig, blank: Arc<[bool]>) -> Option<Self> {
        config.enabled().then(|| Self {
            config: config.clone(),
            blank,
            indent_same: 0.0,
            indent_shifted: 0.0,
            indent_map: Vec::new(),
            last_source: Vec::new(),
            hits: 0.0,
            misses: 0.0,
            skip: 0,
            backoff: 1,
            stats: SpecStats::default(),
        })
    }

    /// The estimated chance that a draft token is right (given the previous one was).
    pub fn acceptance(&self) -> f64 {
        (self.hits + 3.0) / (self.hits + self.misses + 4.0)
    }

    /// How many draft tokens pay when verifying one costs `price` of a step: the largest `k` with
    /// `acceptance^k ≥ price`, at most `num_speculative_tokens`.
    pub fn worth(&self, price: f64) -> usize {
        let p = self.acceptance();
        let cap = self.config.num_speculative_tokens;
        if price <= 0.0 || p >= 1.0 {
            return cap;
        }
        if price >= 1.0 {
            return 0;
        }
        ((price.ln() / p.ln()).floor() as usize).min(cap)
    }

    /// Draft tokens to follow `tokens` (the sequence so far, pending tokens included), at most `limit` of them,
    /// when verifying one more token costs `price` of a step; empty while backing off.
    ///
    /// When the copy is indented differently from its source — this match paired two different white-space
    /// tokens, or the record says the source's white space has been wrong more often than right — a white-space
    /// token of the draft is written as the copy last wrote it (a deeper or shallower indentation learned from
    /// matched suffixes and refuted drafts), and the draft stops before one the copy has not rewritten yet.
    /// So a re-indented copy costs about one step per line, not a refuted draft per line.
    pub fn propose(&mut self, tokens: &[u32], limit: usize, price: f64) -> Vec<u32> {
        self.last_source.clear();
        if self.skip > 0 {
            self.skip -= 1;
            return Vec::new();
        }
        // Where not even one token pays, a probe of one.
        let k = self.worth(price).max(1).min(limit);
        let c = &self.config;
        let found = prompt_lookup(
            tokens,
            c.prompt_lookup_min,
            c.prompt_lookup_max,
            k,
            &self.blank,
        );
        let (mut same, mut shifted) = (0.0, 0.0);
        for i in 0..found.n {
            let (source, copy) = (tokens[found.source_end - i], tokens[tokens.len() - 1 - i]);
            if self.is_blank(copy) {
                if source == copy {
                    same += 1.0;
                } else {
                    shifted += 1.0;
                }
                self.learn_indent(source, copy);
            }
        }
        self.indent_same = self.indent_same * DECAY + same;
        self.indent_shifted = self.indent_shifted * DECAY + shifted;
        let rewrite = shifted > 0.0 || self.indent_shifted > self.indent_same;
        let mut draft = Vec::with_capacity(found.draft.len());
        for &t in found.draft {
            if rewrite && self.is_blank(t) {
                match self.indent_map.iter().find(|(s, _)| *s == t) {
                    Some(&(_, copy)) => draft.push(copy),
                    None => break,
                }
            } else {
                draft.push(t);
            }
            self.last_source.push(t);
        }
        draft
    }

    fn is_blank(&self, t: u32) -> bool {
        self.blank.get(t as usize).copied().unwrap_or(false)
    }

    /// Remembers that the copy wrote `copy` where its source has the white-space token `source`.
    fn learn_indent(&mut self, source: u32, copy: u32) {
        self.indent_map.retain(|(s, _)| *s != source);
        self.indent_map.insert(0, (source, copy));
        self.indent_map.truncate(INDENT_MAP);
    }

    /// Records a verified draft: `produced` are the tokens the verify step appended (the confirmed drafts, then
    /// the model's own token where it differed). Returns how many drafts were confirmed.
    pub fn record(&mut self, draft: &[u32], produced: &[u32]) -> usize {
        let accepted = produced
            .iter()
            .zip(draft)
            .take_while(|(a, b)| a == b)
            .count();
        let proposed = draft.len();
        if proposed == 0 {
            return 0;
        }
        self.stats.drafts += 1;
        self.stats.draft_tokens += proposed;
        self.stats.accepted_tokens += accepted;
        self.hits = self.hits * DECAY + accepted as f64;
        self.misses = self.misses * DECAY + f64::from(u8::from(accepted < proposed));
        // Confirmed white space is evidence for how the copy indents: as the source does where the draft held
        // the source's own token, differently where it held a rewritten one.
        for (i, &t) in draft[..accepted].iter().enumerate() {
            if self.is_blank(t) {
                match self.last_source.get(i) {
                    Some(&source) if source != t => self.indent_shifted += 1.0,
                    _ => self.indent_same += 1.0,
                }
            }
        }
        if draft.get(accepted).is_some_and(|&t| self.is_blank(t)) {
            // What the copy wrote instead (learnt for the source token, not for a rewritten one).
            if let (Some(&source), Some(&copy)) =
                (self.last_source.get(accepted), produced.get(accepted))
            {
                if source == draft[accepted] {
                    self.indent_shifted += 1.0;
                }
                if self.is_blank(source) && self.is_blank(copy) {
                    self.learn_indent(source, copy);
                }
            }
        }
        if accepted == 0 {
            self.skip = self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_SKIP);
        } else {
            self.backoff = 1;
        }
        accepted
    }
}

/// What a forward pass costs, learned from the engine's own decode steps: `secs ≈ fixed + per_token · tokens`
/// (least squares over recent steps, older ones fading). A verify step's extra token costs `per_token`; a plain
/// step of a batch of `b` decoding sequences costs `fixed / b + per_token` per sequence. Until steps of
/// different sizes have been seen, the engine's prior guess of the ratio is used.
#[derive(Debug, Clone)]
pub struct StepCost {
    /// `per_token / (fixed + per_token)` before anything is measured.
    prior: f64,
    /// Decayed sums for the fit.
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

/// How fast old steps fade from the fit (per step observed).
const COST_DECAY: f64 = 0.98;

impl StepCost {
    /// A model of a device where one extra token costs `prior` of a single-token step (on a GPU, where decode is
    /// bound by memory bandwidth, far less than on a CPU).
    pub fn new(prior: f64) -> Self {
        Self {
            prior: prior.clamp(0.0, 1.0),
            n: 0.0,
            sx: 0.0,
            sy: 0.0,
            sxx: 0.0,
            sxy: 0.0,
        }
    }

    /// Records a decode step (no prompt chunks) that fed `tokens` tokens in `secs` seconds.
    pub fn observe(&mut self, tokens: usize, secs: f64) {
        let (x, y) = (tokens as f64, secs);
        let d = COST_DECAY;
        self.n = self.n * d + 1.0;
        self.sx = self.sx * d + x;
        self.sy = self.sy * d + y;
        self.sxx = self.sxx * d + x * x;
        self.sxy = self.sxy * d + x * y;
    }

    /// `(fixed, per_token)` from the steps seen, when they vary enough in size to tell the two apart.
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.n < 4.0 {
            return None;
        }
        let mx = self.sx / self.n;
        let var = self.sxx / self.n - mx * mx;
        if var < 0.25 {
            return None;
        }
        let slope = (self.sxy / self.n - mx * self.sy / self.n) / var;
        let fixed = self.sy / self.n - slope * mx;
        (slope > 0.0 && fixed > 0.0).then_some((fixed, slope))
    }

    /// The price of verifying one more token for one of `batch` decoding sequences, in units of what a step
    /// costs that sequence per token it yields.
    pub fn price(&self, batch: usize) -> f64 {
        let b = batch.max(1) as f64;
        // per_token / fixed.
        let ratio = match self.fit() {
            Some((fixed, per_token)) => per_token / fixed,
            None if self.prior >= 1.0 => return 1.0,
            None => self.prior / (1.0 - self.prior),
        };
        ratio / (1.0 / b + ratio)
    }
}

#[cfg(test)]
mod replay_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_proposes_what_followed_the_longest_most_recent_match() {
        // "1 2 3 4 5 … 1 2 3" → "4 5" (k = 2).
        let t = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        assert_eq!(prompt_lookup(&t, 1, 3, 2, &[]).draft, &[4, 5]);
        // The longest match wins over a more recent shorter one: "7 3" occurs later, "2 3" earlier.
        let t = [1, 2, 3, 4, 7, 3, 8, 2, 3];
        assert_eq!(prompt_lookup(&t, 1, 3, 1, &[]).draft, &[4]);
        // Equal lengths: the most recent.
        let t = [2, 3, 4, 2, 3, 5, 2, 3];
        assert_eq!(prompt_lookup(&t, 2, 2, 1, &[]).draft, &[5]);
        // Fewer than k tokens follow: what there is.
        let t = [1, 2, 1];
        assert_eq!(prompt_lookup(&t, 1, 2, 5, &[]).draft, &[2, 1]);
    }

    #[test]
    fn blank_tokens_match_each_other_and_a_reindented_copy_gets_its_own_indentation() {
        // Tokens 10, 11 and 13 are white space (say 12, 8 and 16 spaces), 12 a line break; the copy is indented
        // 4 spaces less than its source.
        let mut blank = vec![false; 16];
        for b in [10, 11, 12, 13] {
            blank[b] = true;
        }
        // source: `; ⏎ ␣×12 println ! ( x ⏎ ␣×16 y`  …  copy so far: `; ⏎ ␣×8`
        let t = [5, 12, 10, 6, 7, 8, 9, 12, 13, 3, 1, 2, 5, 12, 11];
        let found = prompt_lookup(&t, 2, 5, 8, &blank);
        assert_eq!(found.draft, &[6, 7, 8, 9, 12, 13, 3, 1]);
        assert_eq!((found.n, found.source_end), (3, 2));
        // Without the classes there is no 2-token match: the indentation differs.
        assert!(prompt_lookup(&t, 2, 5, 8, &[]).draft.is_empty());
        // The drafter keeps the line break (seen the same in the copy) and stops before the 16 spaces, whose
        // rewriting it has not seen yet.
        let config = SpeculativeConfig::default();
        let mut d = Drafter::new(&config, Arc::from(blank.clone())).unwrap();
        assert_eq!(d.propose(&t, 8, 0.0), vec![6, 7, 8, 9, 12]);
        // The model writes 12 spaces there (refuting nothing drafted); say a later draft carried the source's
        // 16 spaces and the model wrote 12: from then on 16 spaces are drafted as 12.
        d.record(&[6, 7, 8, 9, 12], &[6, 7, 8, 9, 12, 10]);
        d.last_source = vec![9, 12, 13];
        assert_eq!(d.record(&[9, 12, 13], &[9, 12, 10]), 2);
        assert_eq!(d.propose(&t, 8, 0.0), vec![6, 7, 8, 9, 12, 10, 3, 1]);
        // An exact match (same indentation) drafts the source's white space as it is.
        let t = [5, 12, 10, 6, 7, 8, 9, 12, 13, 3, 1, 2, 5, 12, 10];
        let mut d = Drafter::new(&config, Arc::from(blank.clone())).unwrap();
        assert_eq!(d.propose(&t, 8, 0.0), vec![6, 7, 8, 9, 12, 13, 3, 1]);
        // Once the source's white space keeps being refuted (the model wrote 8 spaces for 16), drafts rewrite it
        // as the copy writes it, even on exact matches.
        for _ in 0..5 {
            d.last_source = vec![6, 13];
            d.record(&[6, 13], &[6, 11]);
        }
        assert_eq!(d.propose(&t, 8, 0.0), vec![6, 7, 8, 9, 12, 11, 3, 1]);
        // Ordinary tokens match only themselves; of equally long matches the most recent one is used.
        let t = [5, 10, 6, 3, 5, 11, 7, 4, 5, 11];
        assert_eq!(prompt_lookup(&t, 2, 5, 1, &blank).draft, &[7]);
    }

    #[test]
    fn lookup_finds_nothing_below_min_n() {
        let t = [1, 2, 3, 4, 9, 3];
        assert!(prompt_lookup(&t, 2, 4, 3, &[]).draft.is_empty());
        assert_eq!(prompt_lookup(&t, 1, 4, 3, &[]).draft, &[4, 9, 3]);
        assert!(prompt_lookup(&[], 1, 3, 3, &[]).draft.is_empty());
        assert!(prompt_lookup(&[5], 1, 3, 3, &[]).draft.is_empty());
        assert!(prompt_lookup(&[1, 2, 1, 2], 1, 3, 0, &[]).draft.is_empty());
    }

    #[test]
    fn drafter_backs_off_after_rejections_and_recovers_on_acceptance() {
        let mut d = Drafter::new(&SpeculativeConfig::default(), Arc::from([])).unwrap();
        let t = [1, 2, 3, 4, 1, 2, 3];
        assert_eq!(d.propose(&t, 8, 0.0), vec![4, 1, 2, 3]);
        d.record(&[7; 4], &[8]);
        assert!(d.propose(&t, 8, 0.0).is_empty(), "one step skipped");
        assert!(!d.propose(&t, 8, 0.0).is_empty());
        d.record(&[7; 4], &[8]);
        assert!(d.propose(&t, 8, 0.0).is_empty());
        assert!(d.propose(&t, 8, 0.0).is_empty(), "two steps skipped");
        assert!(!d.propose(&t, 8, 0.0).is_empty());
        d.record(&[7; 4], &[7, 7, 8]);
        d.record(&[7; 4], &[8]);
        assert!(
            d.propose(&t, 8, 0.0).is_empty(),
            "acceptance reset the back-off to one"
        );
        assert!(!d.propose(&t, 8, 0.0).is_empty());
        assert_eq!(d.propose(&t, 2, 0.0).len(), 2, "limit caps the draft");
        assert_eq!(
            d.stats,
            SpecStats {
                drafts: 4,
                draft_tokens: 16,
                accepted_tokens: 2
            }
        );
        assert!(Drafter::new(&SpeculativeConfig::off(), Arc::from([])).is_none());
    }

    #[test]
    fn draft_length_follows_acceptance_and_price() {
        let mut d = Drafter::new(&SpeculativeConfig::default(), Arc::from([])).unwrap();
        // Optimistic start (p = 0.75): at a price of 0.5 two tokens pay (0.75² ≥ 0.5 > 0.75³).
        assert_eq!(d.worth(0.5), 2);
        assert_eq!(d.worth(0.0), 8, "free verification: the whole cap");
        assert_eq!(d.worth(1.0), 0);
        // A copying stretch: every draft confirmed.
        for _ in 0..6 {
            d.record(&[7; 8], &[7; 9]);
        }
        assert!(d.acceptance() > 0.95, "{}", d.acceptance());
        assert_eq!(d.worth(0.5), 8);
        // Guesses: refuted at the first token.
        for _ in 0..12 {
            d.record(&[7; 1], &[8]);
        }
        assert_eq!(d.worth(0.5), 0, "p = {}", d.acceptance());
        // Still a probe of one token where one does not pay.
        d.skip = 0;
        let t = [1, 2, 3, 4, 1, 2, 3];
        assert_eq!(d.propose(&t, 8, 0.5), vec![4]);
    }

    #[test]
    fn step_cost_learns_the_price_of_a_token() {
        let mut c = StepCost::new(0.5);
        // The prior: an extra token costs what the fixed part does (ratio 1); alone, half a step; in a batch of
        // eight, 1 / (1/8 + 1) of a sequence's share.
        assert!((c.price(1) - 0.5).abs() < 1e-9);
        assert!((c.price(8) - 8.0 / 9.0).abs() < 1e-9);
        // Steps of one token all alike: nothing to fit, still the prior.
        for _ in 0..10 {
            c.observe(1, 0.030);
        }
        assert!(c.fit().is_none());
        let mut c = StepCost::new(0.5);
        // Steps of 1 and 9 tokens: fixed 30 ms, 5 ms per token → one extra token is 5/35 of a step alone.
        for _ in 0..10 {
            c.observe(1, 0.035);
            c.observe(9, 0.075);
        }
        let (fixed, per) = c.fit().unwrap();
        assert!(
            (fixed - 0.030).abs() < 2e-3 && (per - 0.005).abs() < 5e-4,
            "{fixed} {per}"
        );
        assert!((c.price(1) - 5.0 / 35.0).abs() < 0.02, "{}", c.price(1));
    }

    #[test]
    fn settings_are_checked() {
        assert!(SpeculativeConfig::default().validate().is_ok());
        let bad = SpeculativeConfig {
            prompt_lookup_min: 4,
            prompt_lookup_max: 2,
            ..SpeculativeConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = SpeculativeConfig {
            num_speculative_tokens: 100,
            ..SpeculativeConfig::default()
        };
        assert!(bad.validate().is_err());
        assert_eq!("off".parse::<SpecMethod>(), Ok(SpecMethod::Off));
        assert!("eagle".parse::<SpecMethod>().is_err());
    }
}
