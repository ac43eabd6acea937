//! The engine actor: the model lives on its own OS thread; each request carries its own reply channel and a
//! cancellation token checked every token. One sequence runs at a time; KV state is kept per sequence (keyed by
//! the request's `cache_key`) so that a later request with the same key only prefills what is new.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use super::device::{self, DeviceSpec};
use super::error::{EngineError, Result};
use super::fetch::{self, FetchOptions, ModelSelector};
use super::generate::{self, GenerateEvent, GenerateRequest, GenerateSummary, TokenEvent};
use super::gguf::GgufFile;
use super::kv::SeqKv;
use super::manifest::ModelManifest;
use super::model::{Model, WeightFormat};
use super::template::ChatTemplate;
use super::tokenizer::Tokenizer;

/// How many keyed sequences keep their KV state between requests (least recently used is dropped first).
const KEPT_SEQUENCES: usize = 4;

/// Everything needed to start an engine.
pub struct EngineOptions {
    pub model: ModelSelector,
    pub device: DeviceSpec,
    pub weight_format: WeightFormat,
    pub fetch: FetchOptions,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            model: ModelSelector::Name(super::manifest::DEFAULT_MODEL.into()),
            device: DeviceSpec::Auto,
            weight_format: WeightFormat::Auto,
            fetch: FetchOptions::default(),
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
    pub load_secs: f64,
    #[serde(skip)]
    pub manifest: Option<ModelManifest>,
}

struct Shared {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    info: ModelInfo,
}

struct Job {
    req: GenerateRequest,
    cache_key: Option<String>,
    cancel: CancellationToken,
    reply: tokio_mpsc::UnboundedSender<GenerateEvent>,
}

/// A handle to the engine thread. Cheap to clone; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
    jobs: mpsc::Sender<Job>,
}

impl Engine {
    /// Resolves the model (fetching it if needed), builds tokenizer and template, and loads the weights on a
    /// new engine thread. Returns once the model is ready or has failed to load.
    pub fn load(opts: EngineOptions) -> Result<Self> {
        let started = Instant::now();
        let resolved = fetch::resolve(&opts.model, &opts.fetch)?;
        let gguf = GgufFile::open(&resolved.path)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let template = ChatTemplate::from_gguf(&gguf, &tokenizer)?;
        let selected = device::select(opts.device);
        let device_name = selected.describe();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(usize, usize, usize, String)>>();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let thread_tokenizer = tokenizer.clone();
        let format = opts.weight_format;
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
                let _ = ready_tx.send(Ok((
                    model.config.context_length,
                    model.vocab_size,
                    model.weight_bytes,
                    model.config.arch.name().to_string(),
                )));
                serve(model, thread_tokenizer, jobs_rx);
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
            device_note: device::select_note_for(opts.device),
            weight_bytes,
            tool_call_format: manifest
                .as_ref()
                .map(|m| m.tool_call_format.clone())
                .unwrap_or_else(|| "hermes".into()),
            load_secs: started.elapsed().as_secs_f64(),
            manifest,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                tokenizer,
                template,
                info,
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

    pub fn info(&self) -> &ModelInfo {
        &self.shared.info
    }

    /// Queues a request; events arrive on the returned channel, ending with `Done` or `Error`.
    /// `cache_key` names the sequence whose KV state may be reused (an agent session, say).
    pub fn generate(
        &self,
        req: GenerateRequest,
        cache_key: Option<String>,
        cancel: CancellationToken,
    ) -> tokio_mpsc::UnboundedReceiver<GenerateEvent> {
        let (tx, rx) = tokio_mpsc::unbounded_channel();
        if let Err(e) = generate::validate(&req, self.shared.info.context_length) {
            let _ = tx.send(GenerateEvent::Error(e));
            return rx;
        }
        let job = Job {
            req,
            cache_key,
            cancel,
            reply: tx,
        };
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            let _ = job
                .reply
                .send(GenerateEvent::Error(EngineError::EngineGone));
        }
        rx
    }

    /// Runs a request to completion from synchronous code, calling `on_token` for every token.
    pub fn generate_blocking(
        &self,
        req: GenerateRequest,
        cancel: CancellationToken,
        mut on_token: impl FnMut(&TokenEvent),
    ) -> Result<GenerateSummary> {
        let mut rx = self.generate(req, None, cancel);
        while let Some(ev) = rx.blocking_recv() {
            match ev {
                GenerateEvent::Token(t) => on_token(&t),
                GenerateEvent::Done(s) => return Ok(s),
                GenerateEvent::Error(e) => return Err(e),
            }
        }
        Err(EngineError::EngineGone)
    }
}

/// The engine thread's loop: one job at a time until every handle is dropped.
fn serve(model: Model, tokenizer: Tokenizer, jobs: mpsc::Receiver<Job>) {
    let mut kept: VecDeque<(String, SeqKv)> = VecDeque::new();
    while let Ok(job) = jobs.recv() {
        if job.cancel.is_cancelled() || job.reply.is_closed() {
            continue;
        }
        let mut kv = match &job.cache_key {
            Some(key) => match kept.iter().position(|(k, _)| k == key) {
                Some(i) => kept
                    .remove(i)
                    .map(|(_, kv)| kv)
                    .unwrap_or_else(|| model.new_sequence()),
                None => model.new_sequence(),
            },
            None => model.new_sequence(),
        };
        let reply = job.reply.clone();
        let mut emit = |ev: GenerateEvent| reply.send(ev).is_ok();
        // A panic inside a tensor op must not take the engine down with it: report it as an error.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            generate::run(
                &model,
                &tokenizer,
                &job.req,
                &mut kv,
                &job.cancel,
                &mut emit,
            )
        }));
        let event = match outcome {
            Ok(Ok(summary)) => GenerateEvent::Done(summary),
            Ok(Err(e)) => {
                kv.truncate(0);
                GenerateEvent::Error(e)
            }
            Err(_) => {
                kv = model.new_sequence();
                GenerateEvent::Error(EngineError::Internal(
                    "the engine panicked during generation".into(),
                ))
            }
        };
        let _ = job.reply.send(event);
        if let Some(key) = job.cache_key {
            kept.push_back((key, kv));
            while kept.len() > KEPT_SEQUENCES {
                kept.pop_front();
            }
        }
    }
}
