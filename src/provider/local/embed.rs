//! Embeddings from local models. [`EncoderProvider`]: an embedding model (an encoder, see `engine::encoder`) as
//! a [`Provider`]. It serves [`Provider::embed`], tokenizing and detokenizing; a chat or completion request to
//! it is refused as invalid (it cannot generate). A chat model's [`LocalProvider`] embeds too when its engine
//! was loaded with a pooling (`--pooling`; see `engine::decoder_embed`), else it refuses with a 400 naming the
//! flag. Inputs are checked here, before they reach the model's thread: no inputs, too many, an empty text or
//! token list, a token id outside the vocabulary, and an input over the window without `truncate` are invalid
//! requests naming the input.

use super::engine_error;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::super::{
    cannot_embed, named_or_default, CompletionRequest, EmbedInput, EmbedRequest, Embeddings,
    ErrorKind, ErrorReason, ModelDescriptor, Provider, ProviderError, ProviderEvent,
    ProviderStream, RawCompletionRequest, TokenCount, TokenizeInput, TokenizeRequest, Tokenized,
    Usage, MAX_EMBED_INPUTS,
};
use super::LocalProvider;
use crate::engine::{select_device, DeviceSpec, Encoder, EncoderHandle, EngineError};
use crate::model_files::fetch::{self, FetchOptions, ModelSelector};
use crate::model_files::manifest;

/// An encoder as a provider. Cheap to clone.
#[derive(Clone)]
pub struct EncoderProvider {
    handle: EncoderHandle,
    id: Arc<str>,
}

impl EncoderProvider {
    /// Loads the encoder `model` names (a known model, fetched and unpacked when needed, or a folder) on
    /// `device`, serving it as `id`.
    pub fn load(
        model: &ModelSelector,
        fetch_options: &FetchOptions,
        device: DeviceSpec,
        id: &str,
    ) -> Result<Self, ProviderError> {
        let folder = match model {
            ModelSelector::Path(p) => p.clone(),
            ModelSelector::Name(name) => {
                let m = manifest::find(name)?;
                fetch::fetch_manifest(&m, fetch_options)?.path
            }
        };
        Self::from_folder(&folder, device, id)
    }

    /// Loads the encoder in `folder`.
    pub fn from_folder(folder: &Path, device: DeviceSpec, id: &str) -> Result<Self, ProviderError> {
        let selected = select_device(device);
        if let Some(note) = &selected.fallback_note {
            tracing::warn!("{note}");
        }
        let encoder = Encoder::load(folder, &selected.device).map_err(engine_error)?;
        let handle = EncoderHandle::spawn(encoder).map_err(engine_error)?;
        Ok(Self {
            handle,
            id: id.into(),
        })
    }

    fn check_model(&self, name: &str) -> Result<(), ProviderError> {
        if name.is_empty() || name == &*self.id {
            Ok(())
        } else {
            Err(ProviderError::UnknownModel {
                model: name.to_string(),
                message: format!("this provider serves `{}`", self.id),
            })
        }
    }

    fn refusal(&self) -> String {
        format!(
            "the model `{}` is an embedding model: it cannot generate text; ask it for embeddings \
             (/v1/embeddings, /api/embed)",
            self.id
        )
    }

    /// The ids of every input, checked (see the module docs).
    fn input_ids(&self, request: &EmbedRequest) -> Result<Vec<Vec<u32>>, ProviderError> {
        let info = self.handle.info();
        let tokenizer = self.handle.tokenizer();
        checked_inputs(request, info.window, info.vocab_size, &|text, truncate| {
            tokenizer.encode(text, truncate)
        })
    }
}

/// Tokenizes one text, cut at the window when the flag says so.
type Encode<'a> = dyn Fn(&str, bool) -> Result<Vec<u32>, EngineError> + Sync + 'a;

/// The ids of every input of `request`, checked: at least one and at most [`MAX_EMBED_INPUTS`], none empty,
/// token ids within `vocab`, none over `window` tokens unless the request truncates. `encode(text, truncate)`
/// tokenizes a text the model's way (a text over the window without truncation is `PromptTooLong`).
pub(super) fn checked_inputs(
    request: &EmbedRequest,
    window: usize,
    vocab: usize,
    encode: &Encode<'_>,
) -> Result<Vec<Vec<u32>>, ProviderError> {
    let invalid = |message: String| ProviderError::InvalidRequest {
        status: 400,
        message,
    };
    if request.inputs.is_empty() {
        return Err(invalid("input is empty: give at least one text".into()));
    }
    if request.inputs.len() > MAX_EMBED_INPUTS {
        return Err(invalid(format!(
            "input has {} items; at most {MAX_EMBED_INPUTS} are allowed",
            request.inputs.len()
        )));
    }
    request
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match input {
            EmbedInput::Text(text) if text.is_empty() => {
                Err(invalid(format!("input[{i}] is an empty string")))
            }
            EmbedInput::Text(text) => encode(text, request.truncate).map_err(|e| match e {
                EngineError::PromptTooLong { tokens, limit } => ProviderError::ContextOverflow {
                    message: format!(
                        "input[{i}] is {tokens} tokens, but the model's window is {limit} tokens \
                         (shorten it, or ask for truncation)"
                    ),
                },
                other => engine_error(other),
            }),
            EmbedInput::Tokens(ids) if ids.is_empty() => {
                Err(invalid(format!("input[{i}] is an empty list of tokens")))
            }
            EmbedInput::Tokens(ids) => {
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                    return Err(invalid(format!(
                        "input[{i}] holds token {bad}, outside the vocabulary of {vocab}"
                    )));
                }
                match ids.len() > window {
                    true if request.truncate => Ok(ids[..window].to_vec()),
                    true => Err(ProviderError::ContextOverflow {
                        message: format!(
                            "input[{i}] is {} tokens, but the model's window is {window} tokens",
                            ids.len()
                        ),
                    }),
                    false => Ok(ids.clone()),
                }
            }
        })
        .collect()
}

impl LocalProvider {
    /// [`Provider::embed`] on the chat engine: its final hidden states pooled as its `--pooling` says; a model
    /// loaded without one refuses.
    pub(super) async fn embed_pooled(
        &self,
        request: EmbedRequest,
    ) -> Result<Embeddings, ProviderError> {
        self.check_model(&request.model)?;
        let engine = self.engine().clone();
        let model = engine.info().name.clone();
        if engine.pooling().is_none() {
            return Err(cannot_embed(&model));
        }
        let ids = tokio::task::spawn_blocking(move || {
            let info = engine.info();
            let tokenizer = engine.tokenizer();
            checked_inputs(
                &request,
                info.context_length,
                info.vocab_size,
                &|text, truncate| {
                    let mut ids = tokenizer.encode_prompt(text)?;
                    if ids.len() > info.context_length {
                        if !truncate {
                            return Err(EngineError::PromptTooLong {
                                tokens: ids.len(),
                                limit: info.context_length,
                            });
                        }
                        ids.truncate(info.context_length);
                    }
                    Ok(ids)
                },
            )
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))??;
        let prompt_tokens = ids.iter().map(|s| s.len() as u64).sum();
        let vectors = self.engine().embed(ids).await.map_err(engine_error)?;
        Ok(Embeddings {
            model,
            vectors,
            prompt_tokens,
            load_secs: 0.0,
        })
    }
}

fn refused_stream(message: String) -> ProviderStream {
    Box::pin(futures::stream::iter([ProviderEvent::Error {
        reason: ErrorReason::Error,
        kind: ErrorKind::InvalidRequest,
        message,
        usage: Usage::default(),
        partial: Default::default(),
    }]))
}

#[async_trait::async_trait]
impl Provider for EncoderProvider {
    fn stream(&self, _request: CompletionRequest, _cancel: CancellationToken) -> ProviderStream {
        refused_stream(self.refusal())
    }

    fn stream_raw(
        &self,
        _request: RawCompletionRequest,
        _cancel: CancellationToken,
    ) -> ProviderStream {
        refused_stream(self.refusal())
    }

    async fn count_tokens(
        &self,
        _request: &CompletionRequest,
    ) -> Result<TokenCount, ProviderError> {
        Err(ProviderError::InvalidRequest {
            status: 400,
            message: self.refusal(),
        })
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        let info = self.handle.info();
        vec![ModelDescriptor {
            id: self.id.to_string(),
            context_window: info.window as u64,
            max_output_tokens: 0,
            device: Some(info.device.clone()),
        }]
    }

    fn describe(&self) -> String {
        "local encoder".into()
    }

    fn concurrency(&self) -> Option<usize> {
        Some(crate::engine::ENCODER_MAX_BATCH)
    }

    fn model_identity(&self, model: &str) -> String {
        format!("{model}|{}", self.handle.info().folder.display())
    }

    async fn tokenize(&self, request: TokenizeRequest) -> Result<Tokenized, ProviderError> {
        self.check_model(&request.model)?;
        let TokenizeInput::Text { text, .. } = request.input else {
            return Err(ProviderError::InvalidRequest {
                status: 400,
                message: self.refusal(),
            });
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let tokenizer = this.handle.tokenizer();
            let tokens = tokenizer.ids(&text).map_err(engine_error)?;
            Ok(Tokenized {
                token_strs: Some(tokenizer.token_strs(&tokens)),
                tokens,
                max_model_len: this.handle.info().window as u64,
            })
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))?
    }

    async fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, ProviderError> {
        self.check_model(model)?;
        self.handle.tokenizer().decode(tokens).map_err(engine_error)
    }

    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, ProviderError> {
        self.check_model(&request.model)?;
        let this = self.clone();
        let ids = tokio::task::spawn_blocking(move || this.input_ids(&request))
            .await
            .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))??;
        let prompt_tokens = ids.iter().map(|s| s.len() as u64).sum();
        let vectors = self.handle.encode(ids).await.map_err(engine_error)?;
        Ok(Embeddings {
            model: named_or_default("", &self.models()),
            vectors,
            prompt_tokens,
            load_secs: 0.0,
        })
    }
}
