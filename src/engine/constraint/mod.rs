//! Grammar-constrained decoding with llguidance: the request-level constraint types, the per-model
//! [`GrammarFactory`] (llguidance's `ParserFactory` over our tokenizer, built once) and the per-request
//! [`Constraint`] (a `Matcher`) the decode loop drives.
//!
//! The decode loop samples first and asks the matcher whether the token is allowed; only a rejected token costs a
//! full mask (then it resamples from the masked logits). After each accepted token the tokens the grammar forces
//! are returned so the loop can feed them in one forward pass. EOS is accepted only where the grammar accepts.
//!
//! Submodules: `grammar` (one grammar per request), `arguments` (argument rules the grammar adds), `close` (the
//! shortest way out of an unfinished call, used when `max_tokens` is about to cut one). The tool-call formats
//! are `text::call_format`'s table; splitting generated text into content and calls is `engine::tool_calls`.

pub(crate) mod arguments;
pub(crate) mod close;
pub(crate) mod grammar;
pub(crate) mod spec;

use std::sync::Arc;
use std::time::Instant;

use llguidance::{Matcher, ParserFactory};
use serde::{Deserialize, Serialize};
use toktrie_hf_tokenizers::ByteTokenizer;

use crate::engine::constraint::grammar::GrammarSource;
use crate::engine::error::{EngineError, Result};
use crate::engine::sampler::Sampler;
use crate::schema::compile as schema;
use crate::schema::SchemaError;
pub use crate::schema::{ResponseFormat, ToolChoice};
use crate::text::call_format::ToolCallFormat;
use crate::text::tokenizer::Tokenizer;
pub use spec::ConstraintSpec;

/// llguidance's `ParserFactory` for one model: built once (tokenizer trie, all end-of-generation ids), then used
/// to compile every request's grammar.
pub struct GrammarFactory {
    factory: ParserFactory,
    eos: Vec<u32>,
    /// The single-byte tokens of [`close::PREFERENCE`] this vocabulary has, in that order.
    closers: Arc<[u32]>,
    build_secs: f64,
}

impl GrammarFactory {
    /// Builds the factory over `tokenizer`, with `n_vocab` the length of the model's logits (may exceed the
    /// tokenizer's vocabulary; the extra ids are never allowed).
    pub fn new(tokenizer: &Tokenizer, n_vocab: usize) -> Result<Self> {
        let started = Instant::now();
        let setup = |e: anyhow::Error| EngineError::Internal(format!("llguidance setup: {e:#}"));
        let mut bytes = ByteTokenizer::from_tokenizer(tokenizer.hf().clone()).map_err(setup)?;
        let vocab = bytes.tokrx_info().vocab_size as usize;
        let eos: Vec<u32> = tokenizer
            .eos_ids()
            .iter()
            .copied()
            .filter(|&id| (id as usize) < vocab.min(n_vocab))
            .collect();
        // By default the trie knows only `<|endoftext|>`; chat models end turns with `<|im_end|>`.
        if !eos.is_empty() {
            bytes.set_eos_tokens(&eos);
        }
        let env = bytes
            .into_tok_env(Some(n_vocab.max(vocab)))
            .map_err(setup)?;
        let closers: Arc<[u32]> = close::PREFERENCE
            .iter()
            .filter_map(|b| env.tok_trie().token_id(&[*b]))
            .collect();
        let mut factory = ParserFactory::new_simple(&env).map_err(setup)?;
        factory.set_stderr_log_level(0);
        Ok(Self {
            factory,
            eos,
            closers,
            build_secs: started.elapsed().as_secs_f64(),
        })
    }

    /// How long building took (tokenizer trie and lexer slices).
    pub fn build_secs(&self) -> f64 {
        self.build_secs
    }

    /// The end-of-generation ids the grammar knows.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The id of the control token whose text is `text`, if the vocabulary has one (a grammar names it as
    /// `<[id]>`).
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.factory.tok_env().tok_trie().get_special_token(text)
    }

    /// Whether the format's canonical markers and closer are control tokens here.
    pub fn special_delimiters(&self, format: ToolCallFormat) -> bool {
        let like = format.token_like();
        !like.is_empty() && like.iter().all(|t| self.special_id(t).is_some())
    }

    /// Validates `spec` and compiles its grammar; `None` when the output is unconstrained.
    pub fn compile(
        &self,
        spec: &ConstraintSpec,
        model_format: ToolCallFormat,
    ) -> Result<Option<Constraint>> {
        spec.validate_for(model_format)?;
        let format = spec.format.unwrap_or(model_format);
        let Some(source) = grammar::plan(spec, format, &|t| self.special_id(t)) else {
            return Ok(None);
        };
        let what = match &spec.response_format {
            ResponseFormat::JsonSchema { name, .. } if !spec.calls_possible() => {
                format!("response_format `{name}`")
            }
            ResponseFormat::Regex { .. } => "the regex".to_string(),
            ResponseFormat::Choice { .. } => "the choice".to_string(),
            ResponseFormat::Grammar { .. } => "the grammar".to_string(),
            _ => "the tool-call grammar".to_string(),
        };
        self.constraint_for(&source, &what).map(Some)
    }

    /// A matcher for a grammar (tests and the schema suite use this directly).
    pub fn constraint_for(&self, source: &GrammarSource, what: &str) -> Result<Constraint> {
        let started = Instant::now();
        let parser = self
            .factory
            .create_parser(source.to_top_level())
            .map_err(|e| {
                EngineError::from(schema::classify_llguidance_error(&format!("{e:#}"), what))
            })?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(schema::classify_llguidance_error(&e, what).into());
        }
        // An empty language shows as a first step that allows nothing.
        let first = matcher.compute_mask().map_err(|e| {
            EngineError::from(schema::classify_llguidance_error(&format!("{e:#}"), what))
        })?;
        if first.is_zero() {
            return Err(SchemaError::EmptyLanguage {
                what: what.into(),
                message: "no first token is allowed".into(),
            }
            .into());
        }
        Ok(Constraint {
            matcher,
            eos: self.eos.clone(),
            closers: self.closers.clone(),
            pending_secs: 0.0,
            stats: ConstraintStats {
                compile_secs: started.elapsed().as_secs_f64(),
                ..ConstraintStats::default()
            },
        })
    }
}

/// What the constraint cost one generation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConstraintStats {
    /// Grammar compilation and the first mask.
    pub compile_secs: f64,
    /// Tokens the model sampled (checked by the grammar).
    pub sampled_tokens: usize,
    /// Sampled tokens the grammar rejected (a full mask was computed, then a resample).
    pub masked_tokens: usize,
    /// Tokens the grammar forced (fed without sampling).
    pub forced_tokens: usize,
    /// Constraint time per sampled token (check, mask if needed, commit, forced tokens), seconds.
    pub step_secs: Vec<f64>,
    /// Time of each full mask computation (only for rejected tokens), seconds.
    pub mask_secs: Vec<f64>,
    /// `max_tokens` was about to cut a call, and the output was closed early with the shortest completion the
    /// grammar allows (see [`close`]); the generation still ends with `length`.
    #[serde(default)]
    pub closed_call: bool,
    /// Tokens of that early close.
    #[serde(default)]
    pub close_tokens: usize,
    /// `max_tokens` left no room for the next call to close, so the output ended before it (after the calls
    /// and text already complete, or with nothing at all); the generation ends with `length`.
    #[serde(default)]
    pub ended_before_call: bool,
}

/// One request's grammar state.
pub struct Constraint {
    matcher: Matcher,
    eos: Vec<u32>,
    closers: Arc<[u32]>,
    pending_secs: f64,
    pub stats: ConstraintStats,
}

impl Constraint {
    fn grammar_error(&self, e: impl std::fmt::Display) -> EngineError {
        let detail = self.matcher.get_error().unwrap_or_else(|| e.to_string());
        EngineError::Internal(format!("grammar: {detail}"))
    }

    /// Sample, then check: `logits` (already penalised) are sampled; a token the grammar rejects costs a full
    /// mask (written into `logits` as −∞) and a resample.
    pub fn sample(&mut self, sampler: &mut Sampler, logits: &mut [f32]) -> Result<u32> {
        let first = sampler.pick(logits).ok_or_else(|| {
            EngineError::Internal("every logit is -inf; nothing can be sampled".into())
        })?;
        let started = Instant::now();
        let allowed = if self.eos.contains(&first) {
            self.matcher
                .is_accepting()
                .map_err(|e| self.grammar_error(e))?
        } else {
            self.matcher
                .validate_tokens(&[first])
                .map_err(|e| self.grammar_error(e))?
                == 1
        };
        self.stats.sampled_tokens += 1;
        if allowed {
            self.pending_secs = started.elapsed().as_secs_f64();
            return Ok(first);
        }
        self.stats.masked_tokens += 1;
        let mask_started = Instant::now();
        let mask = self
            .matcher
            .compute_mask()
            .map_err(|e| self.grammar_error(e))?;
        self.stats
            .mask_secs
            .push(mask_started.elapsed().as_secs_f64());
        let n = logits.len();
        mask.iter_unset_entries(|i| {
            if i < n {
                logits[i] = f32::NEG_INFINITY;
            }
        });
        for l in logits.iter_mut().skip(mask.len()) {
            *l = f32::NEG_INFINITY;
        }
        let tok = sampler.pick(logits).ok_or_else(|| {
            EngineError::Internal("the grammar allows no token the model can produce".into())
        })?;
        self.pending_secs = started.elapsed().as_secs_f64();
        Ok(tok)
    }

    /// How many of `tokens` (in order, from the current state) the grammar accepts, without consuming them:
    /// speculative drafts are cut there.
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> Result<usize> {
        if self.matcher.is_stopped() {
            return Ok(0);
        }
        self.matcher
            .validate_tokens(tokens)
            .map_err(|e| self.grammar_error(e))
    }

    /// Whether `tok` ends generation (an EOS the grammar accepted).
    pub fn is_eos(&self, tok: u32) -> bool {
        self.eos.contains(&tok)
    }

    /// Advances the grammar by the sampled token; returns the tokens it now forces (already consumed), at most
    /// `limit` of them.
    pub fn commit(&mut self, tok: u32, limit: usize) -> Result<Vec<u32>> {
        let started = Instant::now();
        self.matcher
            .consume_token(tok)
            .map_err(|e| self.grammar_error(e))?;
        let mut forced = Vec::new();
        if limit > 0 && !self.matcher.is_stopped() {
            forced = self
                .matcher
                .compute_ff_tokens()
                .into_iter()
                .take(limit)
                .collect();
            if !forced.is_empty() {
                self.matcher
                    .consume_tokens(&forced)
                    .map_err(|e| self.grammar_error(e))?;
            }
        }
        if let Some(e) = self.matcher.get_error() {
            return Err(EngineError::Internal(format!("grammar: {e}")));
        }
        self.stats.forced_tokens += forced.len();
        self.stats
            .step_secs
            .push(self.pending_secs + started.elapsed().as_secs_f64());
        self.pending_secs = 0.0;
        Ok(forced)
    }

    /// The grammar is complete: nothing but EOS can follow.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    /// Feeds `tokens` without sampling; `Ok(true)` when every one is allowed and the grammar then accepts the
    /// output as complete (used to test grammars with tokenized strings).
    pub fn accepts_tokens(&mut self, tokens: &[u32]) -> Result<bool> {
        let consumed = self
            .matcher
            .try_consume_tokens(tokens)
            .map_err(|e| self.grammar_error(e))?;
        if consumed < tokens.len() {
            return Ok(false);
        }
        if self.matcher.is_stopped() {
            return Ok(!self.matcher.is_error());
        }
        self.matcher
            .is_accepting()
            .map_err(|e| self.grammar_error(e))
    }
}
