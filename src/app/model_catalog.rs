//! The models `agentd serve` offers on the local engine: `[engine].model` (the default), each `[[models]]` entry
//! (or `--model` given more than once), and with `[router] available` every model already in the cache. Each
//! becomes a [`ModelSpec`]: the name requests use, its manifest's aliases, its window before it is loaded (the
//! manifest's, or the GGUF header's for a file; capped by `max_model_len`), the memory it will take (the file
//! and the KV cache), and a loader that starts its own engine.

use crate::provider::local::engine_error;
use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::engine::{Engine, EngineOptions, FimTokens, GgufFile};
use crate::model_files::fetch::{self, CacheStatus, ModelSelector};
use crate::model_files::manifest::{self, ModelTask};
use crate::provider::router::{Loader, Puller};
use crate::provider::{
    EncoderProvider, LocalProvider, ModelDetails, ModelRouter, ModelSpec, Provider, ProviderError,
    RouterOptions,
};

/// The router serving `config`'s models (none loaded yet: see [`ModelRouter::preload`]). Must be called inside a
/// tokio runtime (idle models are unloaded by a task on it).
pub fn router(config: &Config) -> Result<ModelRouter, ProviderError> {
    let options: RouterOptions = config.router.options().map_err(ProviderError::Config)?;
    ModelRouter::with_puller(specs(config)?, options, Some(puller(config)?))
}

/// Fetches a known model by name into the cache (from its manifest's sources, sha256 checked) and describes
/// it: what `POST /api/pull` runs.
fn puller(config: &Config) -> Result<Puller, ProviderError> {
    let mut base = config.engine_options().map_err(ProviderError::Config)?;
    base.fetch.progress = false;
    let cap = config.engine.max_model_len;
    Ok(Arc::new(move |name: &str| {
        let m = manifest::find(name)?;
        fetch::fetch_manifest(&m, &base.fetch)?;
        spec(&base, &m.name, None, cap, false)
    }))
}

/// Every model `config` offers, the default first.
pub fn specs(config: &Config) -> Result<Vec<ModelSpec>, ProviderError> {
    let base = config.engine_options().map_err(ProviderError::Config)?;
    let mut out = vec![spec(
        &base,
        &config.engine.model,
        None,
        config.engine.max_model_len,
        true,
    )?];
    for entry in &config.models {
        let cap = entry.max_model_len.or(config.engine.max_model_len);
        out.push(spec(
            &base,
            &entry.model,
            entry.name.clone(),
            cap,
            entry.preload,
        )?);
    }
    if config.router.available {
        for m in manifest::all() {
            let named = out
                .iter()
                .any(|s| s.id == m.name || s.aliases.contains(&m.name));
            if !named && fetch::cache_status(&base.fetch.home, &m) != CacheStatus::Missing {
                out.push(spec(
                    &base,
                    &m.name,
                    None,
                    config.engine.max_model_len,
                    false,
                )?);
            }
        }
    }
    Ok(out)
}

/// One model: `model` is a known name or a path; `name` the name requests use instead of its own.
fn spec(
    base: &EngineOptions,
    model: &str,
    name: Option<String>,
    max_model_len: Option<usize>,
    preload: bool,
) -> Result<ModelSpec, ProviderError> {
    let selector = ModelSelector::parse(model);
    // An encoder (an embedding model) loads as one and serves only embeddings.
    let encoder = match &selector {
        ModelSelector::Name(n) => manifest::find(n).is_ok_and(|m| m.task == ModelTask::Embed),
        ModelSelector::Path(p) => crate::engine::is_encoder_folder(p),
    };
    let (own, mut aliases, window, file, mut details) = match &selector {
        ModelSelector::Name(n) => {
            let m = manifest::find(n)?;
            let file = fetch::cached_path(&base.fetch.home, &m);
            let header = gguf_header(&file);
            let details = ModelDetails {
                family: m.architecture.clone(),
                quantization: quantization_of(&m.file_name),
                digest: m.sha256.clone(),
                template: header.template,
                parameter_count: header.parameter_count,
                fill_in_middle: header.fill_in_middle,
                ..ModelDetails::default()
            };
            (
                m.name.clone(),
                m.aliases.clone(),
                m.context_length,
                file,
                details,
            )
        }
        ModelSelector::Path(p) => {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| model.to_string());
            let header = gguf_header(p);
            let details = ModelDetails {
                family: header.family,
                quantization: quantization_of(&stem),
                template: header.template,
                parameter_count: header.parameter_count,
                fill_in_middle: header.fill_in_middle,
                ..ModelDetails::default()
            };
            (stem, Vec::new(), header.window, p.clone(), details)
        }
    };
    let id = match name {
        Some(n) if n != own => {
            aliases.push(own);
            n
        }
        _ => own,
    };
    let window = match max_model_len {
        Some(n) if window > 0 => n.min(window),
        Some(n) => n,
        None => window,
    };
    let meta = std::fs::metadata(&file).ok();
    let file_bytes = meta.as_ref().map_or(0, |m| m.len());
    details.file_bytes = file_bytes;
    details.modified_unix = meta
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    details.embedding_only = encoder;
    details.pooled_embeddings = !encoder && base.pooling.is_some();
    if encoder && details.quantization.is_empty() {
        details.quantization = "F32".into();
    }
    let size_bytes = match encoder {
        true => file_bytes,
        false => file_bytes + base.scheduler.kv_cache_bytes as u64,
    };
    let mut opts = base.clone();
    opts.model = selector;
    opts.scheduler.max_model_len = max_model_len;
    let loader: Loader = if encoder {
        let served = id.clone();
        Arc::new(move || {
            let p = EncoderProvider::load(&opts.model, &opts.fetch, opts.device, &served)?;
            Ok(Arc::new(p) as Arc<dyn Provider>)
        })
    } else {
        chat_loader(opts)
    };
    Ok(ModelSpec {
        id,
        aliases,
        context_window: window as u64,
        size_bytes,
        preload,
        details: Some(details),
        loader,
    })
}

/// The loader of a chat or completion model: its own engine.
fn chat_loader(opts: EngineOptions) -> Loader {
    Arc::new(move || {
        let engine = Engine::load(opts.clone()).map_err(engine_error)?;
        if let Some(note) = &engine.info().device_note {
            tracing::warn!("{note}");
        }
        Ok(Arc::new(LocalProvider::new(engine)) as Arc<dyn Provider>)
    })
}

/// The weight type a file name carries (`…-q4_k_m.gguf` → `Q4_K_M`), else empty.
fn quantization_of(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    lower
        .split(['-', '.'])
        .find(|part| {
            let p = part.as_bytes();
            (p.len() >= 2 && (p[0] == b'q' || p[0] == b'f') && p[1].is_ascii_digit())
                || *part == "bf16"
        })
        .map(str::to_ascii_uppercase)
        .unwrap_or_default()
}

/// What a GGUF file's header tells about its model (empty when it is no readable GGUF: a model folder, or a
/// file not fetched yet).
#[derive(Default)]
struct Header {
    window: usize,
    family: String,
    template: Option<String>,
    parameter_count: Option<u64>,
    fill_in_middle: bool,
}

fn gguf_header(path: &Path) -> Header {
    let Ok(gguf) = GgufFile::open(path) else {
        return Header::default();
    };
    let Ok(arch) = gguf.architecture() else {
        return Header::default();
    };
    let window = gguf
        .get_u32(&format!("{arch}.context_length"))
        .map_or(0, |n| n as usize);
    let parameter_count = gguf
        .content
        .tensor_infos
        .values()
        .map(|t| t.shape.elem_count() as u64)
        .sum();
    Header {
        window,
        family: arch.to_string(),
        template: gguf
            .get_str("tokenizer.chat_template")
            .ok()
            .map(str::to_string),
        parameter_count: Some(parameter_count),
        fill_in_middle: has_fim_tokens(&gguf),
    }
}

/// Whether the file's vocabulary has the tokens of a fill-in-the-middle prompt.
fn has_fim_tokens(gguf: &GgufFile) -> bool {
    let Ok(tokens) = gguf.get_str_array("tokenizer.ggml.tokens") else {
        return false;
    };
    let tokens: Vec<String> = tokens.into_iter().map(str::to_string).collect();
    matches!(FimTokens::detect(gguf, &tokens), Ok(Some(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_type_comes_from_the_file_name() {
        assert_eq!(quantization_of("gemma-3-270m-q4_k_m.gguf"), "Q4_K_M");
        assert_eq!(quantization_of("SmolLM2-135M-Instruct-Q4_1.gguf"), "Q4_1");
        assert_eq!(quantization_of("model-f16.gguf"), "F16");
        assert_eq!(quantization_of("model-bf16"), "BF16");
        assert_eq!(quantization_of("qwen2.5-coder"), "");
    }
}
