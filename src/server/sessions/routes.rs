//! The agent-session routes:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/sessions` | create: `{model?, system_prompt?, tools?, policy?, workspace?, max_turns?, max_tokens?, temperature?, seed?, resume?}` → 201 (`resume`: the id of a saved session to continue) |
//! | `GET /v1/sessions` | the live sessions |
//! | `GET /v1/sessions/saved?workspace=DIR` | the saved session files of a workspace (default: the server's), newest first; reopen one with `POST /v1/sessions {resume: id}` |
//! | `GET /v1/sessions/{id}` | one session and its status |
//! | `DELETE /v1/sessions/{id}` | abort it and forget it (its file stays) |
//! | `POST /v1/sessions/{id}/prompt` | `{content}` → SSE of `AgentEvent`s (`{"type": "agent_start", …}`) until `agent_end`, then `[DONE]` (see `prompt_stream`); 409 while a prompt runs |
//! | `POST /v1/sessions/{id}/steer` | `{content}`: delivered after the current tool batch → 202 |
//! | `POST /v1/sessions/{id}/follow_up` | `{content}`: delivered when the agent would stop → 202 |
//! | `POST /v1/sessions/{id}/abort` | cancel the running prompt → 202 |
//! | `GET /v1/sessions/{id}/messages` | the transcript |
//! | `GET /v1/sessions/{id}/entries` | the session tree's entries and the current leaf |
//! | `POST /v1/sessions/{id}/branch` | `{entry_id, summary?, summarize?}` (`null`: a new root): continue from that entry; the transcript becomes its path (`summarize`: the model summarises the branch left) |
//! | `POST /v1/sessions/{id}/rewind` | `{n, summarize?}`: drop the last `n` messages from the current path (the next prompt branches there) |
//! | `POST /v1/sessions/{id}/approve` | `{id, decision: allow\|always\|deny, reason?}`: answer an `approval_request` → 200; 404 when no such request waits |
//!
//! Approvals: `approvals` at creation (`"write=ask,exec=ask"` or `{"write": "ask", "exec": "deny"}`; default:
//! every tag the policy allows runs) makes the tools of `ask` tags wait for the client: the prompt stream
//! carries `{"type": "approval_request", "id", "tool_call_id", "tool_name", "arguments", "tags", "preview"}`
//! and the call runs once `approve` says `allow` (or `always`: that tool for the rest of the session). A
//! denied call is an error result the model sees; an abort (or a closed stream) denies what waits.
//!
//! A client that closes the prompt stream aborts the run (as closing a completion stream cancels it). The last
//! `agent_end` comes once the run has let the session go: the next request may follow it at once.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{prompt_stream, GatedProvider, Session, SessionInfo};
use crate::agent::AgentEvent;
use crate::app::approvals::{Approval, ApprovalPolicy, ApprovalRequest, Decision};
use crate::app::{sessions, Backend, CodingSession, SessionChoice, SessionSettings, RECALL_TOOL};
use crate::env::now_unix;
use crate::server::error::ApiError;
use crate::server::{parse_json, sse, AppState};
use crate::session::sessions_dir;
use crate::tools::policy::{FileScope, Policy};
use crate::tools::registry::{ToolRegistry, BUILTIN_TOOL_NAMES};
use crate::tools::tool::PolicyTag;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(saved))
        .routes(routes!(show, remove))
        .routes(routes!(prompt))
        .routes(routes!(steer))
        .routes(routes!(follow_up))
        .routes(routes!(abort))
        .routes(routes!(messages))
        .routes(routes!(entries))
        .routes(routes!(branch))
        .routes(routes!(rewind))
        .routes(routes!(approve))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    #[serde(default)]
    model: String,
    #[serde(default)]
    system_prompt: Option<String>,
    /// Built-in tool names (default: all of them).
    #[serde(default)]
    tools: Option<Vec<String>>,
    /// `read_only`, `read_only,write`, `all`, `none`, … (default: `read_only`).
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    workspace: Option<PathBuf>,
    #[serde(default)]
    max_turns: Option<usize>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    seed: Option<u64>,
    /// The id of a saved session (in the sessions directory) to continue instead of starting a new one.
    #[serde(default)]
    resume: Option<String>,
    /// Per tag: allow | ask | deny, as `"write=ask,exec=ask"` or `{"write": "ask"}` (default: allow).
    #[serde(default)]
    approvals: Option<Value>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Approve {
    id: String,
    /// `allow`, `always` (this tool for the rest of the session) or `deny`.
    #[schema(value_type = String)]
    decision: Decision,
    #[serde(default)]
    reason: Option<String>,
}

/// The `approvals` field of a create request.
fn approval_policy(value: Option<&Value>) -> Result<ApprovalPolicy, ApiError> {
    let bad = |e: String| ApiError::invalid_param("approvals", e);
    let mut policy = ApprovalPolicy::allow_all();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::String(spec)) => policy.apply(spec).map_err(|e| bad(e.to_string()))?,
        Some(Value::Object(map)) => {
            for (tags, mode) in map {
                let mode: Approval = mode
                    .as_str()
                    .ok_or_else(|| bad(format!("approvals.{tags} must be allow, ask or deny")))?
                    .parse()
                    .map_err(|e: crate::app::approvals::ApprovalParseError| bad(e.to_string()))?;
                policy
                    .set_tags(tags, mode)
                    .map_err(|e| bad(e.to_string()))?;
            }
        }
        Some(_) => return Err(bad(
            "approvals is a string (\"write=ask,exec=ask\") or an object ({\"write\": \"ask\"})"
                .into(),
        )),
    }
    Ok(policy)
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Text {
    content: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Branch {
    entry_id: Option<String>,
    /// A summary of the branch being left, recorded as a `branch_summary` entry.
    #[serde(default)]
    summary: Option<String>,
    /// Have the model summarise the branch being left (when no `summary` is given).
    #[serde(default)]
    summarize: bool,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Rewind {
    n: usize,
    /// Record the model's summary of the dropped messages at the new position.
    #[serde(default)]
    summarize: bool,
}

fn session(state: &AppState, id: &str) -> Result<Arc<Session>, ApiError> {
    state
        .sessions
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("no session `{id}`")))
}

fn describe(s: &Session) -> Value {
    let st = s.coding.agent().state();
    json!({
        "id": s.info.id, "object": "agent.session", "model": st.model, "tools": s.info.tools,
        "policy": s.info.policy, "workspace": s.info.workspace, "path": s.info.path,
        "created": s.info.created, "status": st.status, "message_count": st.messages.len(),
        "last_error": st.last_error, "approvals": s.coding.approvals().policy().to_string(),
        "pending_approvals": s.coding.approvals().pending(),
    })
}

#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = CreateSession,
    responses((status = 201, description = "The new session", body = Object), crate::server::openapi::OpenAiErrors))]
async fn create(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CreateSession = parse_json(body, state.options.max_body_bytes)?;
    if state.sessions.shutting_down() || state.draining.is_cancelled() {
        return Err(ApiError::unavailable("the server is shutting down", 1));
    }
    let model = state.resolve_model(&req.model)?;
    let tools = req
        .tools
        .unwrap_or_else(|| BUILTIN_TOOL_NAMES.iter().map(|s| s.to_string()).collect());
    let builtin: Vec<&String> = tools.iter().filter(|n| *n != RECALL_TOOL).collect();
    let registry = ToolRegistry::builtin(&builtin)
        .map_err(|e| ApiError::invalid_param("tools", e.to_string()))?;
    let approvals = approval_policy(req.approvals.as_ref())?;
    let policy: Policy = req
        .policy
        .as_deref()
        .unwrap_or("read_only")
        .parse()
        .map_err(|e: crate::tools::policy::ParsePolicyError| {
            ApiError::invalid_param("policy", e.to_string())
        })?;
    // Denied tags are not offered at all.
    let not_denied = approvals.policy();
    let policy = Policy::from_tags(policy.allowed().filter(|t| not_denied.allows(*t)));
    // Tools that write files or run commands are a shell for whoever reaches the port: not without a key.
    if state.options.api_key.is_none() && !state.options.allow_exec_without_key {
        let dangerous: Vec<&str> = registry
            .iter()
            .filter(|t| {
                t.tags().iter().any(|tag| {
                    matches!(tag, PolicyTag::Write | PolicyTag::Exec) && policy.allows(*tag)
                })
            })
            .map(|t| t.spec().name.as_str())
            .collect();
        if !dangerous.is_empty() {
            return Err(ApiError::forbidden(format!(
                "a session with tools that write or execute ({}) needs the server to have an API key \
                 (--api-key / AGENTD_API_KEY) or --allow-exec-without-key; or ask for read-only tools \
                 or policy `read_only`",
                dangerous.join(", ")
            )));
        }
    }
    let workspace = resolve_workspace(&state, req.workspace)?;
    if !workspace.is_dir() {
        return Err(ApiError::invalid_param(
            "workspace",
            format!("workspace {} is not a directory", workspace.display()),
        ));
    }
    if req.max_turns == Some(0) {
        return Err(ApiError::invalid_param(
            "max_turns",
            "max_turns must be at least 1",
        ));
    }
    let sampling =
        crate::server::request_fields::sampling(crate::server::request_fields::SamplingFields {
            temperature: req.temperature,
            seed: req.seed,
            ..Default::default()
        })?;
    let dir = saved_dir(&state, &workspace);
    let choice = match &req.resume {
        None => SessionChoice::CreateNow,
        Some(id) if state.sessions.get(id).is_some() => {
            // One writer per session file: a live session is used, not opened a second time.
            return Err(ApiError::conflict(format!(
                "session `{id}` is live; use /v1/sessions/{id} instead of resuming it"
            ))
            .with_param("resume"));
        }
        Some(id) => {
            let (d, wanted) = (dir.clone(), id.clone());
            let saved = tokio::task::spawn_blocking(move || sessions::list(&d))
                .await
                .map_err(|e| ApiError::internal(format!("listing sessions failed: {e}")))?
                .map_err(|e| ApiError::internal(e.to_string()))?
                .into_iter()
                .filter(|s| of_workspace(s, &workspace))
                .find(|s| s.id == wanted)
                .ok_or_else(|| {
                    ApiError::not_found(format!(
                        "no saved session `{id}` of workspace {}",
                        workspace.display()
                    ))
                    .with_param("resume")
                })?;
            SessionChoice::Open(saved.path.display().to_string())
        }
    };
    state.sessions.make_room()?;
    let mut settings = SessionSettings::new(workspace.clone());
    settings.tools = Some(tools);
    settings.policy = policy.clone();
    settings.approvals = approvals;
    settings.workspace = Some(workspace.clone());
    settings.system_prompt = req.system_prompt;
    settings.max_tokens = req.max_tokens;
    if let Some(n) = req.max_turns {
        settings.max_turns = n;
    }
    settings.sampling = sampling;
    settings.sessions_dir = Some(dir);
    settings.bash_timeout = state.sessions.options.bash_timeout;
    // MCP servers of the user's and the workspace's settings files, as `agentd chat` there would start them.
    settings.mcp_servers = crate::app::settings::load(&FileScope::within(&workspace))
        .map(|f| f.mcp_servers)
        .map_err(|e| ApiError::from_app(e, "workspace"))?;
    let provider: Arc<dyn crate::provider::Provider> = Arc::new(GatedProvider::new(
        state.provider.clone(),
        state.admission.clone(),
        state.metrics.clone(),
        state.shutdown.clone(),
    ));
    let label = provider.describe();
    let backend = Backend::given(provider, model.clone(), &label);
    let coding = CodingSession::start(settings, backend, &choice)
        .await
        .map_err(|e| ApiError::from_app(e, "workspace"))?;
    // A resumed session keeps its own model when this server serves it, unless the request names one.
    if req.resume.is_some() && !req.model.is_empty() && coding.agent().state().model != model {
        coding
            .set_model(&model)
            .await
            .map_err(|e| ApiError::from_app(e, "model"))?;
    }
    let (Some(id), Some(path)) = (coding.session_id(), coding.session_file()) else {
        return Err(ApiError::internal("the session has no file"));
    };
    let tool_names: Vec<String> = coding.tools().into_iter().map(|(name, _)| name).collect();
    let info = SessionInfo {
        id: id.clone(),
        model: coding.agent().state().model,
        tools: tool_names,
        policy: policy.name(),
        workspace,
        path,
        created: now_unix(),
    };
    let session = Session::new(coding, info);
    state.sessions.insert(session.clone());
    Ok((StatusCode::CREATED, Json(describe(&session))).into_response())
}

#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", 
    responses((status = 200, description = "The live sessions", body = Object), crate::server::openapi::OpenAiErrors))]
async fn list(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = state.sessions.list().iter().map(|s| describe(s)).collect();
    Json(json!({"object": "list", "data": data}))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SavedQuery {
    /// The workspace whose saved sessions to list (default: the server's).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    workspace: Option<PathBuf>,
}

/// The sessions directory of `workspace` (the server's `--sessions-dir`, shared by every workspace, when set).
fn saved_dir(state: &AppState, workspace: &std::path::Path) -> PathBuf {
    match &state.sessions.options.dir {
        Some(dir) => dir.clone(),
        None => sessions_dir(workspace),
    }
}

/// Whether saved session `s` was a session of `workspace` (its working directory inside it): a sessions
/// directory may hold other workspaces' sessions (a shared `--sessions-dir`, two workspaces whose directory
/// names give the same slug), and those are neither listed nor resumed.
fn of_workspace(s: &crate::session::SessionInfo, workspace: &std::path::Path) -> bool {
    std::path::Path::new(&s.cwd).starts_with(workspace)
}

/// The workspace a request names, else the server's default, else the working directory; canonical.
fn resolve_workspace(state: &AppState, workspace: Option<PathBuf>) -> Result<PathBuf, ApiError> {
    let workspace = match workspace.or_else(|| state.sessions.options.default_workspace.clone()) {
        Some(w) => w,
        None => std::env::current_dir()
            .map_err(|e| ApiError::internal(format!("no working directory: {e}")))?,
    };
    workspace.canonicalize().map_err(|e| {
        ApiError::invalid_param(
            "workspace",
            format!("workspace {} is not usable: {e}", workspace.display()),
        )
    })
}

#[utoipa::path(get, path = "/v1/sessions/saved", tag = "sessions", params(SavedQuery),
    responses((status = 200, description = "The saved sessions of the workspace, newest first", body = Object), crate::server::openapi::OpenAiErrors))]
async fn saved(
    State(state): State<AppState>,
    query: Result<axum::extract::Query<SavedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::invalid_param("workspace", e.body_text()))?;
    let workspace = resolve_workspace(&state, query.workspace)?;
    let dir = saved_dir(&state, &workspace);
    let list = tokio::task::spawn_blocking(move || sessions::list(&dir))
        .await
        .map_err(|e| ApiError::internal(format!("listing sessions failed: {e}")))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let data: Vec<Value> = list
        .into_iter()
        .filter(|s| of_workspace(s, &workspace))
        .map(|s| {
            json!({"id": s.id, "object": "agent.saved_session", "name": s.name, "cwd": s.cwd,
                   "created": s.created, "modified": s.modified, "message_count": s.message_count,
                   "first_message": s.first_message})
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The session and its status", body = Object), crate::server::openapi::OpenAiErrors))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = session(&state, &id)?;
    Ok(Json(describe(&s)))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "Aborted and forgotten (its file stays)", body = Object), crate::server::openapi::OpenAiErrors))]
async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = state
        .sessions
        .remove(&id)
        .ok_or_else(|| ApiError::not_found(format!("no session `{id}`")))?;
    s.coding.close();
    Ok(Json(
        json!({"id": id, "object": "agent.session", "deleted": true}),
    ))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/prompt", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Text,
    responses((status = 200, description = "Server-sent agent events until `agent_end`, then `[DONE]`", content_type = "text/event-stream", body = crate::server::openapi::SseEvent), crate::server::openapi::BusyError, crate::server::openapi::OpenAiErrors))]
async fn prompt(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id)?;
    let req: Text = parse_json(body, state.options.max_body_bytes)?;
    if state.draining.is_cancelled() {
        return Err(ApiError::unavailable("the server is shutting down", 1));
    }
    let Ok(guard) = s.prompt_lock.clone().try_lock_owned() else {
        return Err(ApiError::conflict(
            "the session is already running a prompt; steer, follow up, abort, or wait for it",
        ));
    };
    let (tx, rx) = mpsc::channel::<AgentEvent>(super::EVENT_BUFFER);
    s.listen(tx.clone());
    let (approvals_tx, approvals_rx) = mpsc::unbounded_channel::<ApprovalRequest>();
    s.coding.approvals().set_sink(Some(Arc::new(move |request| {
        let _ = approvals_tx.send(request);
    })));
    let coding = s.coding.clone();
    let session = s.clone();
    let (finished_tx, finished) = oneshot::channel();
    tokio::spawn(async move {
        let outcome = coding.prompt(&req.content).await;
        session.touch();
        if let Err(e) = outcome {
            // Nothing ran: end the stream with the reason.
            let _ = tx
                .send(AgentEvent::AgentEnd {
                    reason: crate::agent::AgentEndReason::Error,
                    messages: Vec::new(),
                    error: Some(e.to_string()),
                })
                .await;
        }
        drop(guard);
        // The stream sends `agent_end` only now: the session is free for the client's next request.
        let _ = finished_tx.send(());
    });
    let channels = prompt_stream::RunChannels {
        events: rx,
        approvals: approvals_rx,
        finished,
    };
    let coding = s.coding.clone();
    let events = prompt_stream::events(channels, move || coding.abort());
    Ok(sse::response(events))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/approve", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Approve,
    responses((status = 200, description = "The decision was delivered", body = Object), crate::server::openapi::OpenAiErrors))]
async fn approve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id)?;
    let req: Approve = parse_json(body, state.options.max_body_bytes)?;
    s.coding
        .approvals()
        .resolve(&req.id, req.decision, req.reason)
        .map_err(|e| ApiError::not_found(e.to_string()).with_param("id"))?;
    s.touch();
    Ok(Json(json!({"id": req.id, "decision": req.decision})).into_response())
}

async fn queue_message(
    state: AppState,
    id: String,
    body: Result<Bytes, BytesRejection>,
    steer: bool,
) -> Result<Response, ApiError> {
    let s = session(&state, &id)?;
    let req: Text = parse_json(body, state.options.max_body_bytes)?;
    if steer {
        s.coding.steer(&req.content);
    } else {
        s.coding.follow_up(&req.content);
    }
    let kind = if steer { "steer" } else { "follow_up" };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "queued": kind})),
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/sessions/{id}/steer", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Text,
    responses((status = 202, description = "Queued: delivered after the current tool batch", body = Object), crate::server::openapi::OpenAiErrors))]
async fn steer(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    queue_message(state, id, body, true).await
}

#[utoipa::path(post, path = "/v1/sessions/{id}/follow_up", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Text,
    responses((status = 202, description = "Queued: delivered when the agent would stop", body = Object), crate::server::openapi::OpenAiErrors))]
async fn follow_up(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    queue_message(state, id, body, false).await
}

#[utoipa::path(post, path = "/v1/sessions/{id}/abort", tag = "sessions", params(("id" = String, Path, description = "The session id")),
    responses((status = 202, description = "The running prompt is cancelled", body = Object), crate::server::openapi::OpenAiErrors))]
async fn abort(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id)?;
    let running = s.coding.is_running();
    s.coding.abort();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "aborted": running})),
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "sessions", params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The transcript", body = Object), crate::server::openapi::OpenAiErrors))]
async fn messages(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = session(&state, &id)?;
    let st = s.coding.agent().state();
    Ok(Json(
        json!({"id": id, "status": st.status, "messages": st.messages}),
    ))
}

#[utoipa::path(get, path = "/v1/sessions/{id}/entries", tag = "sessions", params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The session tree's entries and the current leaf", body = Object), crate::server::openapi::OpenAiErrors))]
async fn entries(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = session(&state, &id)?;
    let (entries, leaf) = s.coding.entries();
    Ok(Json(json!({"id": id, "leaf": leaf, "entries": entries})))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/branch", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Branch,
    responses((status = 200, description = "The transcript of the new branch", body = Object), crate::server::openapi::BusyError, crate::server::openapi::OpenAiErrors))]
async fn branch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let s = session(&state, &id)?;
    let req: Branch = parse_json(body, state.options.max_body_bytes)?;
    // Hold the prompt lock so no run starts while the transcript is replaced.
    let Ok(_guard) = s.prompt_lock.clone().try_lock_owned() else {
        return Err(ApiError::conflict(
            "the session is running; abort it or wait before branching",
        ));
    };
    let from = req.entry_id.as_deref();
    let summary = if req.summarize && req.summary.is_none() {
        s.coding.branch_from_summarized(from).await
    } else {
        s.coding
            .branch(from, req.summary.clone())
            .await
            .map(|()| req.summary)
    }
    .map_err(|e| ApiError::from_app(e, "entry_id"))?;
    let messages = s.coding.agent().state().messages;
    Ok(Json(
        json!({"id": id, "leaf": from, "summary": summary, "messages": messages}),
    ))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/rewind", tag = "sessions", params(("id" = String, Path, description = "The session id")), request_body = Rewind,
    responses((status = 200, description = "The transcript after the rewind", body = Object), crate::server::openapi::BusyError, crate::server::openapi::OpenAiErrors))]
async fn rewind(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let s = session(&state, &id)?;
    let req: Rewind = parse_json(body, state.options.max_body_bytes)?;
    let Ok(_guard) = s.prompt_lock.clone().try_lock_owned() else {
        return Err(ApiError::conflict(
            "the session is running; abort it or wait before rewinding",
        ));
    };
    let (leaf, summary) = if req.summarize {
        s.coding.rewind_summarized(req.n).await
    } else {
        s.coding.rewind(req.n).map(|leaf| (leaf, None))
    }
    .map_err(|e| ApiError::from_app(e, "n"))?;
    Ok(Json(
        json!({"id": id, "leaf": leaf, "summary": summary, "messages": s.coding.agent().state().messages}),
    ))
}
