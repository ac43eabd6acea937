//! `agentd export SESSION [--html|--md] [-o FILE]`: a session's whole tree as a self-contained HTML page or as
//! Markdown (see `app::export`). SESSION is a file path, or a session id (or unique prefix) among the sessions
//! of the workspace.

use std::path::PathBuf;

use agentd::app::export::{export, ExportFormat};
use agentd::app::sessions;
use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A session file, or a session id (or unique prefix) of the workspace's sessions.
    pub session: String,
    /// Write HTML (the default).
    #[arg(long, conflicts_with = "md")]
    pub html: bool,
    /// Write Markdown.
    #[arg(long)]
    pub md: bool,
    /// The output file (default: standard output).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The workspace whose sessions SESSION is looked up in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let cwd = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let path = sessions::find(&agentd::session::sessions_dir(&cwd), &args.session)?;
    let loaded = agentd::session::file::load(&path)?;
    if let Some(line) = loaded.torn_line {
        eprintln!(
            "note: {} has a torn line {line} (an interrupted write); it is left out",
            path.display()
        );
    }
    let format = if args.md {
        ExportFormat::Markdown
    } else {
        ExportFormat::Html
    };
    let text = export(&loaded.tree, None, format);
    match &args.output {
        Some(out) => {
            std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
