//! `agentd clients [NAME]`: ready-to-use settings for the coding clients, for the model a running server serves
//! (asked at `/v1/models`: its id and the window it serves), or — with no server — for a known model's own
//! window. Printed as text, `--json` for scripts, or `--markdown` (README's section).

use std::time::Duration;

use agentd::clients::{self, Served};
use anyhow::{bail, Context};

#[derive(Debug, clap::Args)]
pub struct ClientsArgs {
    /// One client: claude-code, codex, pi, aider, continue, opencode (default: all of them).
    pub name: Option<String>,
    /// The model the clients use (default: the server's first; with no server, a known model's own window).
    #[arg(long)]
    pub model: Option<String>,
    /// The server's host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The server's port.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The server's address instead of --host and --port (`http://HOST:PORT`).
    #[arg(long)]
    pub url: Option<String>,
    /// The server's API key, which the clients must send.
    #[arg(long, env = "AGENTD_API_KEY")]
    pub api_key: Option<String>,
    /// The window to configure, instead of the one the server serves.
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,
    /// Print JSON: `{"served", "clients": [{name, env, files: [{path, content, …}], command, …}]}`.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the Markdown of README's client section.
    #[arg(long)]
    pub markdown: bool,
}

/// How long the server may take to list its models.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(args: ClientsArgs) -> anyhow::Result<()> {
    let root = match &args.url {
        Some(url) => url
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string(),
        None => format!("http://{}:{}", args.host, args.port),
    };
    let api_key = args.api_key.clone().filter(|k| !k.is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (model, window) = match runtime.block_on(ask_server(&root, api_key.as_deref()))? {
        Some(models) => pick(&models, args.model.as_deref(), &root)?,
        None => {
            let Some(name) = &args.model else {
                bail!(
                    "no agentd server answers at {root}: start `agentd serve` (or give --port/--url), or name a \
                     model with --model"
                );
            };
            let manifest = agentd::model_files::manifest::find(name)?;
            eprintln!(
                "note: no server at {root}; {} serves {} tokens unless `agentd serve --max-model-len` says less",
                manifest.name, manifest.context_length
            );
            (manifest.name, manifest.context_length as u64)
        }
    };
    let served = Served {
        root,
        model,
        window: args.window.unwrap_or(window),
        api_key,
    };
    if served.window == 0 {
        bail!("the server does not say its model's window: give it with --window");
    }
    let setups = match &args.name {
        Some(name) => vec![clients::one(&served, name).with_context(|| {
            format!(
                "no client `{name}` (known: {})",
                clients::CLIENT_NAMES.join(", ")
            )
        })?],
        None => clients::all(&served),
    };
    if args.json {
        let value = serde_json::json!({"served": served, "clients": setups});
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if args.markdown {
        print!("{}", clients::markdown(&served, &setups));
    } else {
        print!("{}", clients::text(&served, &setups));
    }
    Ok(())
}

/// `(id, window)` of each model the server at `root` lists; `None` when nothing answers there.
async fn ask_server(root: &str, key: Option<&str>) -> anyhow::Result<Option<Vec<(String, u64)>>> {
    let client = reqwest::Client::builder().timeout(ASK_TIMEOUT).build()?;
    let mut request = client.get(format!("{root}/v1/models"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() || e.is_timeout() => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("asking {root}/v1/models")),
    };
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED {
        bail!("{root} wants an API key: give it with --api-key (or AGENTD_API_KEY)");
    }
    if !status.is_success() {
        bail!("{root}/v1/models answered HTTP {status}");
    }
    let body: serde_json::Value = response
        .json()
        .await
        .with_context(|| format!("{root}/v1/models did not answer with JSON"))?;
    let models = body["data"]
        .as_array()
        .map(|data| {
            data.iter()
                .filter_map(|m| {
                    let id = m["id"].as_str()?.to_string();
                    Some((id, m["max_model_len"].as_u64().unwrap_or(0)))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(models))
}

/// The model `wanted` names among the server's (default: its first).
fn pick(
    models: &[(String, u64)],
    wanted: Option<&str>,
    root: &str,
) -> anyhow::Result<(String, u64)> {
    let found = match wanted {
        Some(name) => models.iter().find(|(id, _)| id == name),
        None => models.first(),
    };
    match found {
        Some(m) => Ok(m.clone()),
        None => bail!(
            "{root} does not serve {}; it serves: {}",
            wanted.unwrap_or("any model"),
            models
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
