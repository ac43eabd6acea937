//! `agentd config show`: the effective settings of `chat` / `run` (defaults, `~/.agentd/settings.toml`,
//! `.agentd/settings.toml`, flags) with where each value came from.

use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::json;

use super::agent_setup::effective::Door;
use super::agent_setup::{current_dir, finish, AgentArgs};

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print the effective settings and the source of each (default, user file, project file, flag).
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// Whose defaults to show: chat, print (`run -p`) or rpc (`run --mode rpc`).
    #[arg(long = "for", value_enum, default_value = "chat")]
    pub door: Door,
    /// One JSON object per setting instead of TOML lines.
    #[arg(long)]
    pub json: bool,
    /// The same flags as `chat` / `run`: see what they change.
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn run(cmd: ConfigCommand) -> anyhow::Result<()> {
    match cmd {
        ConfigCommand::Show(args) => finish(show(&args).map(|()| 0)),
    }
}

fn show(args: &ShowArgs) -> anyhow::Result<()> {
    let mut text = String::new();
    write_settings(args, &mut text)?;
    // A reader that stops early (`| head`) is not an error.
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn write_settings(args: &ShowArgs, out: &mut String) -> anyhow::Result<()> {
    let eff = args.agent.effective(args.door)?;
    let rows = eff.rows();
    if args.json {
        for (key, value, source) in rows {
            let value = match value.strip_prefix("# ") {
                Some(what) => json!({"unset": what}),
                None => toml::from_str::<toml::Table>(&format!("v = {value}"))
                    .ok()
                    .and_then(|t| t.get("v").and_then(|v| serde_json::to_value(v).ok()))
                    .unwrap_or(json!(value)),
            };
            writeln!(
                out,
                "{}",
                json!({"key": key, "value": value, "source": source})
            )?;
        }
        return Ok(());
    }
    let user = agentd::app::settings::user_path();
    let project = agentd::app::settings::project_path(&current_dir()?);
    for (label, path) in [("user", &user), ("project", &project)] {
        let state = if path.is_file() { "" } else { " (absent)" };
        writeln!(out, "# {label} settings: {}{state}", path.display())?;
    }
    let width = rows
        .iter()
        .map(|(k, v, _)| k.len() + v.len() + 3)
        .max()
        .unwrap_or(0);
    for (key, value, source) in rows {
        // An unset value is a comment saying what happens instead.
        let line = match value.strip_prefix("# ") {
            Some(what) => format!("# {key}: {what}"),
            None => format!("{key} = {value}"),
        };
        writeln!(out, "{line:<width$}  # {source}")?;
    }
    Ok(())
}
