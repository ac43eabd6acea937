//! The engine actor: the model lives on its own OS thread, driven by the engine loop (`engine_loop.rs`: the
//! scheduler's continuous batching over a paged KV cache with shared prefixes); each request carries its own
//! reply channel and a cancellation token, checked before every step (a request whose reply channel was dropped
//! counts as cancelled too). Validation, grammar compilation and tokenizing happen on the caller's thread so the
//! model never waits for them.

use std::path::PathBuf;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::arch::weights::WeightFormat;
use crate::engine::backend::Model;
use crate::engine::constraint::{Constraint, GrammarFactory};
use crate::engine::device::{self, DeviceSpec};
use crate::engine::encoder::Pooling;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;
use crate::engine::kv::blocks::PrefixCacheStats;
use crate::engine::request::{self, GenerateEvent, GenerateRequest, GenerateSummary, TokenEvent};
use crate::engine::runtime::engine_loop::{EmbedJob, EngineLoop, Job, Work};
use crate::engine::runtime::scheduler::{SchedulerConfig, SchedulerStats};
use crate::engine::tool_calls::assembler::{OutputAssembler, OutputDelta, ToolCall};
use crate::model_files::fetch::{FetchOptions, ModelSelector};
use crate::model_files::manifest::ModelManifest;
use crate::text::call_format::ToolCallFormat;
use crate::text::reasoning::{ThinkBlock, ThinkMarkers};
use crate::text::template::ChatTemplate;
use crate::text::tokenizer::Tokenizer;

/// Everything needed to start an engine.
#[derive(Clone)]
pub struct EngineOptions {
    pub model: ModelSelector,
    pub device: DeviceSpec,
    pub weight_format: WeightFormat,
    pub fetch: FetchOptions,
    /// Batching, KV memory and prefix caching.
    pub scheduler: SchedulerConfig,
    /// A Jinja chat template (its text) used instead of the manifest's or the GGUF's (`--chat-template`).
    pub chat_template: Option<String>,
    /// The ops of candle's forward pass, instead of the device's default (`AGENTD_CANDLE_OPS`); an error on
    /// the CPU engine.
    pub kernels: Option<crate::engine::candle::fused::Kernels>,
    /// How the model's hidden states become an embedding (`--pooling`, llama.cpp's flag); `None`: the model
    /// serves no embeddings.
    pub pooling: Option<Pooling>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            model: ModelSelector::Name(crate::model_files::manifest::DEFAULT_MODEL.into()),
            device: DeviceSpec::Auto,
            weight_format: WeightFormat::Auto,
            fetch: FetchOptions::default(),
            scheduler: SchedulerConfig::default(),
            chat_template: None,
            kernels: None,
            pooling: None,
        }
    }
}

/// What a loaded engine serves.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The manifest name, or the file stem for a GGUF given by path.
    pub name: String,
    pub path: PathBuf,
    pub architecture: String,
    pub context_length: usize,
    pub vocab_size: usize,
    pub device: String,
    pub device_note: Option<String>,
    /// Weight bytes read per decoded token, after any requantisation.
    pub weight_bytes: usize,
    pub tool_call_format: String,
    /// How quantized weights are kept (`--weights`).
    pub weight_format: String,
    pub load_secs: f64,
    #[serde(skip)]
    pub manifest: Option<ModelManifest>,
}

struct Shared {
    prefix_stats: Arc<PrefixCacheStats>,
    scheduler_stats: Arc<SchedulerStats>,
    scheduler: SchedulerConfig,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    /// The think-block markers, when the template writes reasoning (see [`crate::text::reasoning`]).
    think: Option<ThinkMarkers>,
    info: ModelInfo,
    pooling: Option<Pooling>,
    /// Built on the first constrained request (the error, if building failed, as text).
    grammar: OnceLock<std::result::Result<Arc<GrammarFactory>, String>>,
}

/// A finished generation with its output assembled into content and tool calls.
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// The text of a call cut short (length, stop string, cancel), if any.
    pub incomplete_call: Option<String>,
    pub summary: GenerateSummary,
}

/// A handle to the engine thread. Cheap to clone; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
    jobs: mpsc::Sender<Work>,
}

impl Engine {
    /// Resolves the model (fetching it if needed), builds tokenizer and template, and loads the weights on a
    /// new engine thread. Returns once the model is ready or has failed to load.
    pub fn load(opts: EngineOptions) -> Result<Self> {
        let started = Instant::now();
        opts.scheduler.validate().map_err(EngineError::Config)?;
        let resolved = crate::engine::files::resolve(&opts.model, &opts.fetch)?;
        let gguf = GgufFile::open(&resolved.path)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let template_override = opts.chat_template.clone().or_else(|| {
            resolved
                .manifest
                .as_ref()
                .and_then(|m| m.chat_template.clone())
        });
        let template = match template_override {
            Some(source) => ChatTemplate::from_gguf_with(&gguf, &source)?,
            None => ChatTemplate::from_gguf(&gguf, &tokenizer)?,
        };
        let think = ThinkMarkers::detect(template.source());
        let selected = device::select(opts.device);
        let device_name = selected.describe();
        let device_note = selected.fallback_note.clone();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(usize, usize, usize, String)>>();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Work>();
        let thread_tokenizer = tokenizer.clone();
        let prefix_stats = Arc::new(PrefixCacheStats::default());
        let thread_stats = prefix_stats.clone();
        let scheduler_stats = Arc::new(SchedulerStats::default());
        let thread_sched_stats = scheduler_stats.clone();
        let sched_config = opts.scheduler.clone();
        let format = opts.weight_format;
        let kernels = opts.kernels;
        std::thread::Builder::new()
            .name("agentd-engine".into())
            .spawn(move || {
                let model = match Model::load(&gguf, &selected.device, format) {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut model = model;
                if let Some(k) = kernels {
                    if let Err(e) = model.set_kernels(k) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let served = match sched_config.served_context(model.config.context_length) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = ready_tx.send(Err(EngineError::Config(e)));
                        return;
                    }
                };
                let ready = (
                    served,
                    model.vocab_size,
                    model.weight_bytes,
                    model.config.arch.name().to_string(),
                );
                let engine_loop = match EngineLoop::new(
                    model,
                    thread_tokenizer,
                    sched_config,
                    jobs_rx,
                    thread_stats,
                    thread_sched_stats,
                ) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(ready));
                engine_loop.run();
            })
            .map_err(|e| EngineError::io("cannot start the engine thread", e))?;
        let (context_length, vocab_size, weight_bytes, architecture) =
            ready_rx.recv().map_err(|_| EngineError::EngineGone)??;
        let manifest = resolved.manifest.clone();
        let name = manifest
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_else(|| {
                resolved
                    .path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "model".into())
            });
        let info = ModelInfo {
            name,
            path: resolved.path,
            architecture,
            context_length,
            vocab_size,
            device: device_name,
            device_note,
            weight_bytes,
            // The manifest's, else the one the chat template speaks, else Hermes.
            tool_call_format: manifest
                .as_ref()
                .map(|m| m.tool_call_format.clone())
                .or_else(|| ToolCallFormat::detect(template.source()).map(|f| f.name().to_string()))
                .unwrap_or_else(|| ToolCallFormat::HERMES.name().to_string()),
            weight_format: opts.weight_format.to_string(),
            load_secs: started.elapsed().as_secs_f64(),
            manifest,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                prefix_stats,
                scheduler_stats,
                scheduler: opts.scheduler,
                tokenizer,
                template,
                think,
                info,
                pooling: opts.pooling,
                grammar: OnceLock::new(),
            }),
            jobs: jobs_tx,
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.shared.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.shared.template
    }

    /// Prefix-cache counters (tokens queried, tokens reused, evictions) and the block pool's use.
    pub fn prefix_cache_stats(&self) -> &PrefixCacheStats {
        &self.shared.prefix_stats
    }

    /// The scheduler's live counts (running, waiting, preemptions, steps).
    pub fn scheduler_stats(&self) -> &SchedulerStats {
        &self.shared.scheduler_stats
    }

    /// How the scheduler batches.
    pub fn scheduler_config(&self) -> &SchedulerConfig {
        &self.shared.scheduler
    }

    pub fn info(&self) -> &ModelInfo {
        &self.shared.info
    }

    /// How this model writes tool calls (its manifest's `tool_call_format`; for a bare GGUF the family its chat
    /// template speaks, else Hermes).
    pub fn tool_call_format(&self) -> ToolCallFormat {
        ToolCallFormat::from_name(&self.shared.info.tool_call_format).unwrap_or_default()
    }

    /// The prompt tokens of a chat (OpenAI-shaped `messages`, the tools shown unless `tool_choice` is `none`),
    /// rendered with the model's template and tokenized so that only the template's own markup becomes control
    /// tokens (see [`crate::text::chat_prompt::chat_prompt_tokens`]).
    pub fn chat_prompt(
        &self,
        messages: &[serde_json::Value],
        tools: &[crate::schema::ToolSpec],
        tool_choice: &crate::schema::ToolChoice,
        enable_thinking: Option<bool>,
    ) -> Result<Vec<u32>> {
        crate::text::chat_prompt::chat_prompt_tokens(
            &self.shared.template,
            &self.shared.tokenizer,
            messages,
            tools,
            tool_choice,
            self.tool_call_format(),
            enable_thinking,
        )
        .map_err(Into::into)
    }

    /// Whether the model's template writes think blocks (a reasoning model).
    pub fn thinks(&self) -> bool {
        self.shared.think.is_some()
    }

    /// The think block a generation from `prompt` (chat prompt ids) starts with or may open; `None` for models
    /// that do not reason and for prompts whose template closed the block (thinking off).
    pub fn think_block(&self, prompt: &[u32]) -> Option<ThinkBlock> {
        let markers = self.shared.think.as_ref()?;
        // The generation prompt is short: its last tokens decide.
        let tail = &prompt[prompt.len().saturating_sub(32)..];
        let text = self.shared.tokenizer.decode(tail, false).ok()?;
        markers.start_of(&text).map(|start| markers.block(start))
    }

    /// The model's grammar factory, built on first use (~0.1–0.3 s; see [`GrammarFactory::build_secs`]).
    pub fn grammar_factory(&self) -> Result<Arc<GrammarFactory>> {
        let built = self.shared.grammar.get_or_init(|| {
            GrammarFactory::new(&self.shared.tokenizer, self.shared.info.vocab_size)
                .map(|f| {
                    tracing::info!(secs = f.build_secs(), "built the llguidance parser factory");
                    Arc::new(f)
                })
                .map_err(|e| e.to_string())
        });
        built.clone().map_err(EngineError::Internal)
    }

    /// Validates the request's constraint and compiles its grammar (`None`: unconstrained).
    fn compile_constraint(&self, req: &GenerateRequest) -> Result<Option<Box<Constraint>>> {
        let Some(spec) = &req.constraint else {
            return Ok(None);
        };
        if grammar_free(spec) {
            // Nothing to compile, but bad input is still reported.
            spec.validate()?;
            return Ok(None);
        }
        // `compile` validates the spec first.
        let factory = self.grammar_factory()?;
        Ok(factory
            .compile(spec, self.tool_call_format())?
            .map(Box::new))
    }

    /// The assembler for a request's output (content only when it cannot hold calls).
    pub fn assembler(&self, req: &GenerateRequest) -> OutputAssembler {
        match &req.constraint {
            Some(spec) => OutputAssembler::for_request(spec, self.tool_call_format()),
            None => OutputAssembler::new(self.tool_call_format(), false),
        }
    }

    /// Queues a request; events arrive on the returned channel, ending with `Done` or `Error` (a request
    /// cancelled before it started ends with `Done` and [`FinishReason::Cancelled`](request::FinishReason)).
    /// KV prefixes are shared by content (full blocks) within the request's
    /// [`cache_scope`](GenerateRequest::cache_scope).
    pub fn generate(
        &self,
        req: GenerateRequest,
        cancel: CancellationToken,
    ) -> tokio_mpsc::UnboundedReceiver<GenerateEvent> {
        let (tx, rx) = tokio_mpsc::unbounded_channel();
        let info = &self.shared.info;
        if let Err(e) = request::validate(&req, info.context_length)
            .and_then(|()| req.sampling.validate_tokens(info.vocab_size))
        {
            let _ = tx.send(GenerateEvent::Error(e));
            return rx;
        }
        let constraint = match self.compile_constraint(&req) {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(GenerateEvent::Error(e));
                return rx;
            }
        };
        let job = Job {
            req,
            constraint,
            cancel,
            reply: tx,
        };
        if let Err(mpsc::SendError(Work::Generate(job))) =
            self.jobs.send(Work::Generate(Box::new(job)))
        {
            let _ = job
                .reply
                .send(GenerateEvent::Error(EngineError::EngineGone));
        }
        rx
    }

    /// How embeddings pool this model's hidden states (`None`: it serves none).
    pub fn pooling(&self) -> Option<Pooling> {
        self.shared.pooling
    }

    /// One pooled, L2-normalised vector per sequence of ids (each non-empty, within the window and the
    /// vocabulary), computed on the engine thread between generation steps; an error when the model was loaded
    /// without a pooling.
    pub async fn embed(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>> {
        let pooling = self.shared.pooling.ok_or_else(|| {
            EngineError::Config(format!(
                "the model `{}` was loaded without a pooling for embeddings (--pooling mean|last|cls)",
                self.shared.info.name
            ))
        })?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Work::Embed(EmbedJob {
                inputs,
                pooling,
                reply,
            }))
            .map_err(|_| EngineError::EngineGone)?;
        answer.await.map_err(|_| EngineError::EngineGone)?
    }

    /// Runs a request to completion from synchronous code, calling `on_token` for every token.
    pub fn generate_blocking(
        &self,
        req: GenerateRequest,
        cancel: CancellationToken,
        mut on_token: impl FnMut(&TokenEvent),
    ) -> Result<GenerateSummary> {
        let mut rx = self.generate(req, cancel);
        while let Some(ev) = rx.blocking_recv() {
            match ev {
                GenerateEvent::Token(t) => on_token(&t),
                GenerateEvent::Done(s) => return Ok(s),
                GenerateEvent::Error(e) => return Err(e),
            }
        }
        Err(EngineError::EngineGone)
    }

    /// Runs a request to completion and assembles its output, calling `on_delta` for every piece of content
    /// and every tool-call event as it is produced.
    pub fn complete_blocking(
        &self,
        req: GenerateRequest,
        cancel: CancellationToken,
        mut on_delta: impl FnMut(&OutputDelta),
    ) -> Result<Completion> {
        let mut assembler = self.assembler(&req);
        let mut failure = None;
        let mut incomplete_call = None;
        let mut feed =
            |deltas: Result<Vec<OutputDelta>>, failure: &mut Option<EngineError>| match deltas {
                Ok(deltas) => {
                    for d in &deltas {
                        if let OutputDelta::ToolCallIncomplete { text, .. } = d {
                            incomplete_call = Some(text.clone());
                        }
                        on_delta(d);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            };
        let summary = self.generate_blocking(req, cancel.clone(), |t| {
            if failure.is_none() {
                let deltas = assembler.push(&t.text);
                feed(deltas, &mut failure);
                if failure.is_some() {
                    cancel.cancel();
                }
            }
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        let mut deltas = assembler.push(&summary.trailing_text)?;
        deltas.extend(assembler.finish(summary.finish)?);
        feed(Ok(deltas), &mut failure);
        Ok(Completion {
            content: assembler.content().to_string(),
            tool_calls: assembler.tool_calls().to_vec(),
            incomplete_call,
            summary,
        })
    }
}

/// A spec that constrains nothing: no tools, plain text (validation still runs).
fn grammar_free(spec: &crate::engine::constraint::ConstraintSpec) -> bool {
    spec.tools.is_empty() && spec.response_format == crate::engine::constraint::ResponseFormat::Text
}
