//! The in-process engine as the app builds it: load one model, or a router over every model a server offers.
//! In a build without the `local` feature (in front of a remote server only) the same functions refuse with a
//! message saying so, and [`LocalHandle`] is a type with no values, so nothing else needs a `cfg`.

use std::sync::Arc;

use crate::config::Config;
use crate::provider::response_cache::{CachingProvider, ResponseCache};
use crate::provider::{ModelRouter, Provider, ProviderError};

#[cfg(feature = "local")]
mod imp {
    use super::*;
    use crate::engine::{init_threads, Engine};
    use crate::provider::local::engine_error;
    use crate::provider::LocalProvider;

    /// The engine's own provider (model information for people, exact-token cache keys).
    pub type LocalHandle = LocalProvider;

    /// Loads the model `[engine]` names (setting the CPU thread count first); blocks while it loads.
    pub fn load(config: &Config) -> Result<(Arc<dyn Provider>, LocalHandle), ProviderError> {
        let opts = config.engine_options().map_err(ProviderError::Config)?;
        set_threads(config);
        let engine = Engine::load(opts).map_err(engine_error)?;
        let local = LocalProvider::new(engine);
        Ok((Arc::new(local.clone()), local))
    }

    /// A router over every model the configuration offers, each in its own engine.
    pub fn router(config: &Config) -> Result<ModelRouter, ProviderError> {
        set_threads(config);
        crate::app::model_catalog::router(config)
    }

    /// Why the engine runs on another device than asked, if it does.
    pub fn device_note(local: &LocalHandle) -> Option<String> {
        local.engine().info().device_note.clone()
    }

    /// `local` behind the response cache, keyed by the prompt's exact tokens.
    pub fn caching(local: LocalHandle, cache: Arc<ResponseCache>) -> CachingProvider {
        CachingProvider::local(local, cache)
    }

    fn set_threads(config: &Config) {
        if config.engine.threads > 0 {
            init_threads(Some(config.engine.threads));
        }
    }
}

#[cfg(not(feature = "local"))]
mod imp {
    use super::*;

    /// No engine in this build: a type with no values.
    #[derive(Clone)]
    pub enum LocalHandle {}

    fn no_engine() -> ProviderError {
        ProviderError::Config(crate::config::NO_LOCAL_ENGINE.into())
    }

    pub fn load(_: &Config) -> Result<(Arc<dyn Provider>, LocalHandle), ProviderError> {
        Err(no_engine())
    }

    pub fn router(_: &Config) -> Result<ModelRouter, ProviderError> {
        Err(no_engine())
    }

    pub fn device_note(local: &LocalHandle) -> Option<String> {
        match *local {}
    }

    pub fn caching(local: LocalHandle, _: Arc<ResponseCache>) -> CachingProvider {
        match local {}
    }
}

pub use imp::{caching, device_note, load, router, LocalHandle};
