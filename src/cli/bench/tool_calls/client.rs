//! Where the bench sends its requests: a URL, or agentd's own server started in this process (`--local`) on a
//! loopback port, so the bench measures the real HTTP path, SSE framing included. Also the model id each
//! endpoint is asked for.

use agentd::bench::ChatClient;
use agentd::server::{AppState, ServerOptions};
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::engine_args::EngineArgs;

/// A running in-process agentd server; stops when dropped.
pub struct LocalServer {
    pub base_url: String,
    stop: CancellationToken,
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Loads the engine (`engine`'s model and device) and serves agentd's router on `127.0.0.1:0`.
pub async fn start_local(engine: EngineArgs) -> anyhow::Result<LocalServer> {
    let (provider, _) = tokio::task::spawn_blocking(move || engine.provider())
        .await
        .context("loading the model")??;
    let state = AppState::new(provider, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port for the local server")?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        let shutdown = async move { signal.cancelled().await };
        if let Err(e) = agentd::server::serve(listener, state, shutdown).await {
            tracing::error!(error = %e, "the local server stopped");
        }
    });
    Ok(LocalServer {
        base_url: format!("http://{addr}/v1"),
        stop,
    })
}

/// The model to ask `client` for: `requested`, else the first model the server lists.
pub async fn resolve_model(client: &ChatClient, requested: Option<&str>) -> anyhow::Result<String> {
    if let Some(m) = requested {
        return Ok(m.to_string());
    }
    let models = client.models().await.with_context(|| {
        format!(
            "asking {} for its models (is the server running? does the URL end in /v1?)",
            client.base_url()
        )
    })?;
    models
        .into_iter()
        .next()
        .with_context(|| format!("{} lists no model; pass --model", client.base_url()))
}
