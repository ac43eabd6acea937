//! `agentd generate`: stream one completion of a prompt to stdout (chat-templated, or raw with `--raw`),
//! optionally constrained: `--json-schema FILE` / `--json-object` for structured output, `--tools FILE.json` with
//! `--tool-choice` for tool calls, which are printed as JSON lines after the text.

use std::io::Write;
use std::path::PathBuf;

use agentd::engine::{ConstraintSpec, GenerateRequest, OutputDelta, SamplingParams};
use agentd::schema::ToolSpec;
use agentd::schema::{ResponseFormat, ToolChoice};
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Tokenize the prompt as given (special tokens parsed) instead of applying the chat template.
    #[arg(long)]
    pub raw: bool,
    /// A system message (chat mode only).
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 disables.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when this text is generated (it is not printed). Repeatable.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Print token counts and speeds to stderr at the end.
    #[arg(long)]
    pub verbose: bool,
    /// Constrain the output to one JSON document of the schema in FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "json_object")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to one JSON object.
    #[arg(long)]
    pub json_object: bool,
    /// Tools the model may call: an OpenAI `tools` array in FILE.
    #[arg(long, value_name = "FILE.json")]
    pub tools: Option<PathBuf>,
    /// auto | required | none | NAME (call exactly that tool).
    #[arg(long, default_value = "auto", value_name = "CHOICE")]
    pub tool_choice: String,
    /// At most one tool call.
    #[arg(long)]
    pub no_parallel_tool_calls: bool,
    pub prompt: String,
}

/// The constraint the flags ask for (`None` when there is nothing to constrain).
fn constraint_from_args(args: &GenerateArgs) -> anyhow::Result<Option<ConstraintSpec>> {
    let tools = match &args.tools {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            ToolSpec::list_from_openai(&value)
                .with_context(|| format!("tools in {}", path.display()))?
        }
        None => Vec::new(),
    };
    let response_format = match (&args.json_schema, args.json_object) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            ResponseFormat::JsonSchema {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "schema".into()),
                schema,
                strict: true,
            }
        }
        (None, true) => ResponseFormat::JsonObject,
        (None, false) => ResponseFormat::Text,
    };
    let tool_choice = ToolChoice::from_cli(&args.tool_choice);
    if tools.is_empty()
        && response_format == ResponseFormat::Text
        && tool_choice == ToolChoice::Auto
    {
        return Ok(None);
    }
    Ok(Some(ConstraintSpec {
        tools,
        tool_choice,
        parallel_tool_calls: !args.no_parallel_tool_calls,
        response_format,
        format: None,
        reasoning: None,
    }))
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        seed: args.seed,
        ..SamplingParams::default()
    };
    sampling.validate()?;
    let constraint = constraint_from_args(&args)?;
    if let Some(spec) = &constraint {
        // Bad tools or schemas are reported before the model is loaded.
        spec.validate()?;
    }
    let engine = args.engine.load()?;
    let prompt = if args.raw {
        engine.tokenizer().encode_prompt(&args.prompt)?
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(serde_json::json!({"role": "system", "content": s}));
        }
        messages.push(serde_json::json!({"role": "user", "content": args.prompt}));
        let (tools, choice) = match &constraint {
            Some(spec) => (spec.tools.as_slice(), spec.tool_choice.clone()),
            None => (&[][..], ToolChoice::Auto),
        };
        engine.chat_prompt(&messages, tools, &choice, None)?
    };
    let req = GenerateRequest {
        prompt,
        sampling,
        max_tokens: Some(args.max_tokens),
        stop: args.stop.clone(),
        constraint,
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let ctrl_c = cancel.clone();
    // Ctrl-C stops the generation (within one token) instead of killing the process mid-line.
    let _ = ctrlc_watch(ctrl_c);
    let mut out = std::io::stdout().lock();
    let mut write_err = None;
    let mut wrote_text = false;
    let completion = engine
        .complete_blocking(req, cancel, |delta| {
            if write_err.is_some() {
                return;
            }
            let written = match delta {
                OutputDelta::Content { text } => {
                    wrote_text |= !text.is_empty();
                    out.write_all(text.as_bytes()).and_then(|_| out.flush())
                }
                OutputDelta::ToolCallEnd { call, .. } => {
                    let line = serde_json::json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    });
                    let sep = if wrote_text { "\n" } else { "" };
                    wrote_text = false;
                    writeln!(out, "{sep}{line}").and_then(|_| out.flush())
                }
                _ => Ok(()),
            };
            if let Err(e) = written {
                write_err = Some(e);
            }
        })
        .context("generation failed")?;
    if wrote_text {
        writeln!(out)?;
    }
    if let Some(e) = write_err {
        return Err(e).context("writing to stdout");
    }
    if let Some(text) = &completion.incomplete_call {
        eprintln!("warning: generation stopped inside a tool call: {text:?}");
    }
    let summary = completion.summary;
    if args.verbose {
        eprintln!(
            "[{} prompt tokens, {} generated, finish {:?}; prefill {:.1} tok/s, decode {:.1} tok/s]",
            summary.prompt_tokens,
            summary.completion_tokens,
            summary.finish,
            summary.prompt_tokens as f64 / summary.prefill_secs.max(1e-9),
            summary.completion_tokens.saturating_sub(1) as f64 / summary.decode_secs.max(1e-9),
        );
        if let Some(c) = &summary.constraint {
            let total: f64 = c.step_secs.iter().sum();
            eprintln!(
                "[grammar: compiled in {:.1} ms; {} sampled ({} masked), {} forced; {:.2} ms constraint time]",
                c.compile_secs * 1e3,
                c.sampled_tokens,
                c.masked_tokens,
                c.forced_tokens,
                total * 1e3
            );
        }
        if let Some(s) = &summary.speculative {
            eprintln!(
                "[speculative: {} drafts, {} draft tokens, {} accepted ({:.0}%)]",
                s.drafts,
                s.draft_tokens,
                s.accepted_tokens,
                100.0 * s.accepted_tokens as f64 / s.draft_tokens.max(1) as f64
            );
        }
    }
    Ok(())
}

/// Cancels `token` on Ctrl-C, on a small background runtime thread.
fn ctrlc_watch(token: CancellationToken) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || {
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    token.cancel();
                }
            })
        })?;
    Ok(())
}
