//! `agentd bench bfcl`: tool calls on the Berkeley Function Calling Leaderboard's functions, against any
//! OpenAI-compatible endpoint. Flags, the progress line, and the Markdown table (and `--json`); loading the data,
//! asking and judging are the library's `agentd::bench::bfcl`.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use agentd::bench::bfcl::{self, Choice, QuestionResult, Report, Row, RunPlan};
use agentd::bench::ChatClient;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `--tool-choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ChoiceArg {
    Auto,
    Required,
    /// auto, then required.
    Both,
}

impl ChoiceArg {
    fn choices(self) -> Vec<Choice> {
        match self {
            ChoiceArg::Auto => vec![Choice::Auto],
            ChoiceArg::Required => vec![Choice::Required],
            ChoiceArg::Both => vec![Choice::Auto, Choice::Required],
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct BfclBenchArgs {
    /// The API root of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (a bare host:port gets /v1).
    #[arg(long, value_name = "URL", alias = "endpoint")]
    url: String,
    /// The model to ask for (default: the first one the server lists).
    #[arg(long)]
    model: Option<String>,
    /// BFCL's data folder: the `bfcl_eval/data` of the `bfcl-eval` wheel (or the unzipped wheel's root).
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Categories (BFCL file names without `BFCL_v4_` and `.json`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "simple_python,multiple")]
    category: Vec<String>,
    /// Ask only the first N entries of each category.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// The tool_choice of the requests; `both` runs every category under auto, then under required.
    #[arg(long, value_enum, default_value = "both")]
    tool_choice: ChoiceArg,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 256)]
    max_tokens: u32,
    /// Also write the report (every answer included) as JSON to FILE (`-`: print it instead of the table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Sent as `Authorization: Bearer KEY`.
    #[arg(
        long,
        value_name = "KEY",
        env = "AGENTD_API_KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
    /// Seconds before one request counts as failed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

/// `url` as an API root: a URL without a path gets `/v1`.
fn api_root(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(u) if u.path().trim_matches('/').is_empty() => format!("{trimmed}/v1"),
        _ => trimmed.to_string(),
    }
}

pub fn run(args: BfclBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.max_tokens >= 1, "--max-tokens must be at least 1");
    anyhow::ensure!(args.timeout >= 1, "--timeout must be at least 1 second");
    anyhow::ensure!(
        args.limit != Some(0),
        "--limit must be at least 1 (leave it out for every entry)"
    );
    let categories = args
        .category
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
        .map(|c| bfcl::load_category(&args.data, c, args.limit))
        .collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(!categories.is_empty(), "--category names no category");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let url = api_root(&args.url);
    let client = ChatClient::new(&url, args.api_key.clone())?
        .with_timeout(Duration::from_secs(args.timeout));
    let plan = RunPlan {
        choices: args.tool_choice.choices(),
        max_tokens: args.max_tokens,
    };
    let total: usize =
        categories.iter().map(|c| c.questions.len()).sum::<usize>() * plan.choices.len();
    let report = runtime.block_on(async {
        let model = super::tool_calls::resolve_model(&client, args.model.as_deref()).await?;
        let progress = Progress::new(total as u64);
        let on_answer = |r: &QuestionResult| progress.answer(r);
        let report = bfcl::run(&client, &model, &categories, &plan, args.limit, &on_answer).await;
        progress.bar.finish_and_clear();
        anyhow::Ok(report)
    })?;
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Some(path) => {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
            print!("{}", table(&report));
        }
        None => print!("{}", table(&report)),
    }
    Ok(())
}

/// A bar on a terminal; otherwise one line per answer on stderr (a long run logged to a file shows its pace).
struct Progress {
    bar: ProgressBar,
    total: u64,
    done: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{bar:40}] {pos}/{len} questions · {elapsed}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Self {
            bar,
            total,
            done: Default::default(),
        }
    }

    fn answer(&self, r: &QuestionResult) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if !self.bar.is_hidden() {
            self.bar.inc(1);
            return;
        }
        let what = match (&r.sample.error, r.sample.calls.first()) {
            (Some(e), _) => format!("failed: {e}"),
            (None, Some(call)) => format!(
                "{} call(s), first {}{}{}",
                r.calls,
                call.name,
                if r.valid_calls == r.calls {
                    ", valid"
                } else {
                    ", INVALID"
                },
                match r.right_function {
                    Some(true) => ", right",
                    Some(false) => ", WRONG function",
                    None => "",
                }
            ),
            (None, None) if r.call_in_text => "no call (a call written as text)".into(),
            (None, None) => "no call".into(),
        };
        eprintln!(
            "[{n}/{}] {} {} {}: {what}; finish {}; {:.0} ms",
            self.total,
            r.category,
            r.tool_choice.name(),
            r.id,
            r.sample.finish_reason.as_deref().unwrap_or("-"),
            r.sample.total_ms
        );
    }
}

fn percent(share: Option<f64>) -> String {
    share.map_or("-".into(), |s| format!("{:.1}%", 100.0 * s))
}

fn row_line(out: &mut String, r: &Row) {
    let right = match r.right_function {
        Some(n) => format!("{n} ({})", percent(r.right_share())),
        None => "-".into(),
    };
    let latency = r
        .latency_ms
        .map_or("- / -".into(), |d| format!("{:.0} / {:.0}", d.mean, d.p50));
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} ({}) | {}/{} ({}) | {} | {} | {} | {} | {} |",
        r.category,
        r.tool_choice.name(),
        r.questions,
        r.answered,
        percent(r.answered_share()),
        r.valid_calls,
        r.calls,
        percent(r.valid_share()),
        right,
        r.cut_by_length,
        r.call_in_text,
        r.failed,
        latency,
    );
}

/// The Markdown table, its header line and the skipped entries.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let run = &report.run;
    let _ = writeln!(
        out,
        "BFCL tool calls: model {} at {} · max_tokens {} · {} · temperature 0, one request at a time · {:.0} s\n",
        run.model,
        run.url,
        run.max_tokens,
        run.limit
            .map_or("every entry".into(), |n| format!("first {n} entries per category")),
        run.wall_s,
    );
    let _ = writeln!(
        out,
        "| category | tool_choice | questions | answered with a call | calls schema-valid | right function | \
         cut by length | call as text | failed | latency mean / p50 (ms) |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &report.rows {
        row_line(&mut out, r);
    }
    let _ = writeln!(
        out,
        "\nanswered: questions with ≥ 1 tool call · schema-valid: of all calls (JSON that validates against the \
         named tool) · right function: the first call names a ground-truth function, of all questions · call as \
         text: no tool call, but the content holds a call-shaped JSON object or <tool_call>"
    );
    for c in report.skipped.iter().filter(|c| !c.skipped.is_empty()) {
        let _ = writeln!(out, "\nskipped in {} ({}):", c.category, c.skipped.len());
        for s in &c.skipped {
            let _ = writeln!(out, "- {}: {}", s.id, s.reason);
        }
    }
    out
}
