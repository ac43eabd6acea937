//! `agentd bench agent`: the coding-task suite (`benches/agent_tasks`, its `dev` part by default) under agentd's harness and/or Pi's, at the
//! defaults (N seeds) and at temperature 0; prints pass rate, tool calls, tool errors and time per category (a
//! Markdown table), optionally every run, and writes everything as JSON. `--selftest` checks the checks.

use std::path::PathBuf;
use std::time::Duration;

use agentd::app::harness::RuleId;
use agentd::bench::agent_suite::{self, report, Harness, Setting};
use anyhow::{bail, Context};

#[derive(Debug, clap::Args)]
pub struct AgentBenchArgs {
    /// The task folder (with the parts `dev/` and `heldout/`).
    #[arg(long, value_name = "DIR", default_value = "benches/agent_tasks")]
    pub tasks: PathBuf,
    /// Which part: `dev` (tune on it), `heldout` (measure only; do not read its tasks or runs while tuning) or
    /// `all`.
    #[arg(long, default_value = "dev", value_parser = ["dev", "heldout", "all"])]
    pub part: String,
    /// The model (a known name or a GGUF file), loaded offline.
    #[arg(long, default_value = "qwen2.5-coder-0.5b-instruct")]
    pub model: String,
    /// agentd (its own agent, `agentd run`), pi (Pi's coding agent against `agentd serve` of the same model), or
    /// both.
    #[arg(long, default_value = "agentd", value_parser = ["agentd", "pi", "both"])]
    pub harness: String,
    /// Pi's `pi` executable (default: `pi` on PATH, else $AGENTD_HOME/npm/node_modules/.bin/pi).
    #[arg(long, value_name = "PATH")]
    pub pi: Option<PathBuf>,
    /// Sampling settings, comma-separated: `defaults` (the harness's own sampling, run --repeat times with seeds
    /// 1…N) and `t=T` (temperature T, run once; deterministic at 0).
    #[arg(long, default_value = "defaults,t=0")]
    pub settings: String,
    /// Runs per task at `defaults`.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Only these tasks (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only the tasks of these categories (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub category: Vec<String>,
    /// Only the tasks of this difficulty.
    #[arg(long, value_parser = ["simple", "medium"])]
    pub difficulty: Option<String>,
    /// Seconds per agent run; the run's whole process group is killed after it.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Save every run (calls, diffs, answers, check output) and the figures as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Save each run's raw event stream (stdout) and stderr here.
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Also print one row per run.
    #[arg(long)]
    pub runs: bool,
    /// Keep the temporary workspaces (their folder is printed).
    #[arg(long)]
    pub keep: bool,
    /// One more argument for `agentd run` (repeatable).
    #[arg(long = "extra", value_name = "ARG", allow_hyphen_values = true)]
    pub extra: Vec<String>,
    /// Also run agentd with each of these harness rules turned off, one at a time (comma-separated rule names,
    /// or `all`): one column per rule, beside the run with every rule, shows what each buys.
    #[arg(long, value_delimiter = ',', value_name = "RULE")]
    pub ablate: Vec<String>,
    /// Run every task in each ablation column. By default, at t=0 a task whose run with every rule shows the
    /// rule never acted is not run again without it: the run would be the same, token for token.
    #[arg(long)]
    pub ablate_every_run: bool,
    /// Run agentd with `--blocks-grammar` (each reply constrained to the file-blocks grammar).
    #[arg(long)]
    pub blocks_grammar: bool,
    /// Check the checks instead: each must fail on the untouched workspace and pass on solution/. Runs no model.
    #[arg(long)]
    pub selftest: bool,
}

fn parse_settings(text: &str, repeat: usize) -> anyhow::Result<Vec<Setting>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "defaults" {
            for seed in 1..=repeat.max(1) as u64 {
                out.push(Setting {
                    temperature: None,
                    seed: (repeat > 1).then_some(seed),
                });
            }
        } else if let Some(t) = item.strip_prefix("t=") {
            let t: f32 = t
                .parse()
                .with_context(|| format!("--settings: `{item}` is not t=NUMBER"))?;
            if !(0.0..=2.0).contains(&t) {
                bail!("--settings: temperature {t} is outside 0…2");
            }
            out.push(Setting {
                temperature: Some(t),
                seed: None,
            });
        } else {
            bail!("--settings: `{item}` is neither `defaults` nor `t=T`");
        }
    }
    if out.is_empty() {
        bail!("--settings names nothing to run");
    }
    Ok(out)
}

fn find_pi(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("pi"))
            .find(|p| p.is_file())
    });
    let cached = agentd::env::agentd_home().join("npm/node_modules/.bin/pi");
    on_path
        .or_else(|| cached.is_file().then_some(cached))
        .context(
            "Pi's `pi` was not found: install it (npm install @mariozechner/pi-coding-agent in \
             $AGENTD_HOME/npm) or pass --pi PATH",
        )
}

pub fn run(args: AgentBenchArgs) -> anyhow::Result<()> {
    let parts: Vec<&str> = match args.part.as_str() {
        "all" => agent_suite::PARTS.to_vec(),
        one => vec![one],
    };
    let mut tasks = agent_suite::load_suite(&args.tasks, &parts, &args.only)
        .with_context(|| format!("loading the tasks in {}", args.tasks.display()))?;
    if !args.category.is_empty() {
        tasks.retain(|t| args.category.contains(&t.category));
    }
    if let Some(d) = &args.difficulty {
        tasks.retain(|t| t.difficulty.name() == d);
    }
    if tasks.is_empty() {
        bail!("no task to run");
    }
    let root = tempfile::Builder::new()
        .prefix("agentd-bench-agent-")
        .tempdir()?;
    if args.selftest {
        let mut bad = 0;
        for task in &tasks {
            let problems = agent_suite::tasks::selftest(task, &root.path().join(&task.name));
            if problems.is_empty() {
                println!(
                    "ok    {:28} {:8} {:7} {}",
                    task.name,
                    task.part,
                    task.difficulty.name(),
                    task.category
                );
            } else {
                bad += 1;
                println!("FAIL  {:28} {}", task.name, problems.join("; "));
            }
        }
        if bad > 0 {
            bail!("{bad} of {} tasks failed their self-test", tasks.len());
        }
        for part in agent_suite::PARTS {
            let mine: Vec<_> = tasks.iter().filter(|t| t.part == part).collect();
            if !mine.is_empty() {
                let medium = mine
                    .iter()
                    .filter(|t| t.difficulty == agent_suite::Difficulty::Medium)
                    .count();
                println!("{part}: {} tasks, {medium} medium", mine.len());
            }
        }
        println!(
            "{} tasks: every check fails untouched and passes on its solution",
            tasks.len()
        );
        return Ok(());
    }
    let settings = parse_settings(&args.settings, args.repeat)?;
    let bin = std::env::current_exe().context("locating this agentd binary")?;
    let ablations = ablations(&args.ablate)?;
    let mut harnesses: Vec<(&str, Option<RuleId>)> = match args.harness.as_str() {
        "both" => vec![("agentd", None), ("pi", None)],
        one => vec![(one, None)],
    };
    if harnesses.iter().any(|(h, _)| *h == "agentd") {
        harnesses.extend(ablations.into_iter().map(|r| ("agentd", Some(r))));
    }
    let pi = if harnesses.iter().any(|(h, _)| *h == "pi") {
        Some(find_pi(args.pi.clone())?)
    } else {
        None
    };
    if let Some(dir) = &args.logs {
        std::fs::create_dir_all(dir)?;
    }
    let timeout = Duration::from_secs(args.timeout.max(1));
    let mut results = Vec::new();
    for (name, off) in &harnesses {
        for setting in &settings {
            let harness = match (*name, &pi) {
                ("pi", Some(pi)) => {
                    // Pi sends no sampling of its own: the server's defaults are the setting.
                    let mut serve = Vec::new();
                    if let Some(t) = setting.temperature {
                        serve.push("--override-generation-config".to_string());
                        serve.push(serde_json::json!({"temperature": t}).to_string());
                    }
                    if let Some(s) = setting.seed {
                        serve.push("--override-generation-config".to_string());
                        serve.push(serde_json::json!({"seed": s}).to_string());
                    }
                    Harness::pi(&bin, pi.clone(), &args.model, &serve)?
                }
                _ => {
                    let mut extra = args.extra.clone();
                    if args.blocks_grammar {
                        extra.push("--blocks-grammar".to_string());
                    }
                    let mut label = "agentd".to_string();
                    if let Some(rule) = off {
                        extra.extend(["--ablate".to_string(), rule.name().to_string()]);
                        label = format!("agentd -{}", rule.name());
                    }
                    Harness::Agentd {
                        bin: bin.clone(),
                        model: args.model.clone(),
                        extra,
                        label,
                    }
                }
            };
            let attempt = setting.seed.map_or(1, |s| s as usize);
            for task in &tasks {
                let full = off
                    .filter(|_| !args.ablate_every_run && setting.temperature == Some(0.0))
                    .and_then(|rule| untouched(&results, task, setting, attempt, rule));
                let (r, events) = match full {
                    Some(full) => {
                        let mut r = full.clone();
                        r.harness = harness.name().to_string();
                        r.same_as_full = true;
                        (r, Vec::new())
                    }
                    None => agent_suite::run_task(
                        &harness,
                        task,
                        *setting,
                        attempt,
                        root.path(),
                        timeout,
                    )?,
                };
                eprintln!(
                    "{:8} {:12} {:28} {}  {} calls, {} errors, {:.0} s{}",
                    r.harness,
                    r.setting,
                    r.task,
                    if r.check_passed { "pass" } else { "FAIL" },
                    r.tool_calls,
                    r.tool_errors,
                    r.seconds,
                    if r.same_as_full {
                        " (rule never acted: the full run's)"
                    } else {
                        ""
                    }
                );
                if let (Some(dir), false) = (&args.logs, r.same_as_full) {
                    let base = dir.join(format!(
                        "{}.{}.{}.{}",
                        r.task, r.harness, r.setting, attempt
                    ));
                    std::fs::write(base.with_extension("json"), serde_json::to_vec_pretty(&r)?)?;
                    std::fs::write(base.with_extension("events.jsonl"), &events)?;
                }
                results.push(r);
            }
        }
    }
    let passes = report::passes(&results);
    println!("{}", report::table(&args.model, &passes));
    if args.runs {
        println!("{}", report::runs_table(&results));
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"model": args.model, "part": args.part, "passes": passes, "runs": results});
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.keep {
        let kept = root.keep();
        eprintln!("workspaces kept in {}", kept.display());
    }
    Ok(())
}

/// The run of `task` with every rule (same setting and attempt), when `rule` never acted in it.
fn untouched<'a>(
    results: &'a [agent_suite::RunResult],
    task: &agent_suite::Task,
    setting: &Setting,
    attempt: usize,
    rule: RuleId,
) -> Option<&'a agent_suite::RunResult> {
    results
        .iter()
        .find(|r| {
            r.harness == "agentd"
                && r.task == task.name
                && r.setting == setting.label()
                && r.attempt == attempt
        })
        .filter(|r| !r.rules_acted.iter().any(|a| a == rule.name()))
}

/// The rules `--ablate` names (`all`: every rule, in the order the harness asks them).
fn ablations(names: &[String]) -> anyhow::Result<Vec<RuleId>> {
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if name == "all" {
            out.extend(RuleId::ORDER);
            continue;
        }
        out.push(name.parse::<RuleId>().map_err(anyhow::Error::msg)?);
    }
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_suite::harness::RunEvents;

    fn task(name: &str) -> agent_suite::Task {
        agent_suite::Task {
            name: name.into(),
            part: "dev".into(),
            category: "other".into(),
            difficulty: agent_suite::Difficulty::Simple,
            prompt: String::new(),
            check: String::new(),
            tools: None,
            dir: PathBuf::new(),
        }
    }

    fn full(name: &str, acted: &[&str]) -> agent_suite::RunResult {
        let mut r = agent_suite::RunResult::new(RunEvents::default());
        r.task = name.into();
        r.harness = "agentd".into();
        r.setting = "t=0".into();
        r.rules_acted = acted.iter().map(|a| a.to_string()).collect();
        r
    }

    #[test]
    fn an_ablation_reuses_only_the_full_runs_its_rule_never_acted_in() {
        let t0 = Setting {
            temperature: Some(0.0),
            seed: None,
        };
        let results = vec![full("a", &["self_check"]), full("b", &[])];
        // The rule acted in a: it runs again; it did not in b: b's full run stands for it.
        assert!(untouched(&results, &task("a"), &t0, 1, RuleId::SelfCheck).is_none());
        let same = untouched(&results, &task("b"), &t0, 1, RuleId::SelfCheck).unwrap();
        assert_eq!(same.task, "b");
        assert!(untouched(&results, &task("a"), &t0, 1, RuleId::Repeats).is_some());
        // No full run of that task, setting or attempt: nothing to reuse.
        assert!(untouched(&results, &task("c"), &t0, 1, RuleId::SelfCheck).is_none());
        assert!(untouched(&results, &task("b"), &t0, 2, RuleId::SelfCheck).is_none());
        let t1 = Setting {
            temperature: Some(1.0),
            seed: None,
        };
        assert!(untouched(&results, &task("b"), &t1, 1, RuleId::SelfCheck).is_none());
    }
}
