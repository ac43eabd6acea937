//! Approvals and settings in print mode: `run -p` denies `exec` unless `--allow exec` (bash is not even
//! offered), refuses an `ask` call (nobody to ask) with a hint, and the settings files (user, project) and flags
//! layer as documented — checked through the requests the model received and through `agentd config show`.

use serde_json::{json, Value};

use super::{run, tool_names, Sandbox};

fn bash_then_answer() -> Value {
    json!([
        {"steps": [{"tool_call": {"name": "bash", "arguments": {"command": "echo ran > ran.txt"}}}]},
        "Done."
    ])
}

#[test]
fn print_mode_denies_exec_unless_allowed() {
    let sb = Sandbox::new(bash_then_answer());
    let out = run(sb.cmd(&["run", "--no-session", "-p", "run it"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let requests = sb.recorded();
    assert_eq!(tool_names(&requests[0]), ["read", "edit", "write"]);
    assert_eq!(sb.last_message(1)["is_error"], true);
    assert!(
        !sb.cwd.join("ran.txt").exists(),
        "a denied command never runs"
    );

    let sb = Sandbox::new(bash_then_answer());
    let out = run(sb.cmd(&["run", "--no-session", "--allow", "exec", "-p", "run it"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        tool_names(&sb.recorded()[0]),
        ["read", "bash", "edit", "write"]
    );
    assert_eq!(
        std::fs::read_to_string(sb.cwd.join("ran.txt")).unwrap(),
        "ran\n"
    );

    // `--ask` in print mode: nobody can answer, so the call is refused with the flag that would allow it.
    let sb = Sandbox::new(json!([
        {"steps": [{"tool_call": {"name": "write", "arguments": {"path": "w.txt", "content": "x"}}}]},
        "Done."
    ]));
    let out = run(sb.cmd(&["run", "--no-session", "--ask", "write", "-p", "write it"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let result = sb.last_content(1);
    let text = result.as_str().unwrap();
    assert!(
        text.contains("needs the user's approval") && text.contains("--allow write"),
        "{text}"
    );
    assert!(!sb.cwd.join("w.txt").exists());

    // Unknown tags are usage errors.
    let out = run(sb.cmd(&["run", "--deny", "shell", "-p", "hi"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--deny"), "{}", out.stderr);
}

#[test]
fn settings_files_layer_under_flags() {
    let sb = Sandbox::new(json!(["one", "two", "three"]));
    // User settings ($AGENTD_HOME/settings.toml): exec allowed, a token limit, no summaries.
    std::fs::write(
        sb.home.join("settings.toml"),
        "max_tokens = 321\ntemperature = 0.5\nthinking = \"low\"\n[approvals]\nexec = \"allow\"\n[compaction]\nsummarize = false\n",
    )
    .unwrap();
    // Project settings override the user's key by key.
    std::fs::create_dir_all(sb.cwd.join(".agentd")).unwrap();
    std::fs::write(
        sb.cwd.join(".agentd/settings.toml"),
        "max_tokens = 654\ntools = [\"read\", \"bash\"]\n",
    )
    .unwrap();
    let out = run(sb.cmd(&["run", "--no-session", "-p", "hi"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let request = sb.recorded()[0].clone();
    assert_eq!(request["max_tokens"], 654);
    assert_eq!(request["thinking"], "low");
    assert_eq!(request["sampling"]["temperature"], 0.5);
    assert_eq!(
        tool_names(&request),
        ["read", "bash"],
        "project tools; exec allowed by the user file"
    );

    // Flags win.
    let out = run(sb.cmd(&[
        "run",
        "--no-session",
        "--max-tokens",
        "99",
        "--deny",
        "exec",
        "-p",
        "hi",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let request = sb.recorded()[1].clone();
    assert_eq!(request["max_tokens"], 99);
    assert_eq!(tool_names(&request), ["read"]);

    // `config show` says where each value came from.
    let out = run(sb.bare_cmd(&["config", "show", "--for", "print", "--max-turns", "7"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {}", out.stdout))
            .to_string()
    };
    assert!(line("max_tokens").contains("654"), "{}", out.stdout);
    assert!(line("max_tokens").contains("project "), "{}", out.stdout);
    assert!(
        line("max_turns").contains("# --max-turns"),
        "{}",
        out.stdout
    );
    assert!(line("approvals.exec").contains("\"allow\""));
    assert!(line("approvals.exec").contains("user "));
    assert!(line("approvals.network").contains("default for agentd run -p"));
    assert!(line("compaction.summarize").contains("false"));
    assert!(line("device").contains("# default"));
    let out = run(sb.bare_cmd(&["config", "show", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rows: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let write = rows.iter().find(|r| r["key"] == "approvals.write").unwrap();
    assert_eq!(write["value"], "ask", "chat asks before writes by default");

    // A broken settings file is a usage error naming the file and line.
    std::fs::write(
        sb.cwd.join(".agentd/settings.toml"),
        "max_tokens = \"lots\"\n",
    )
    .unwrap();
    let out = run(sb.cmd(&["run", "--no-session", "-p", "hi"]));
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(".agentd/settings.toml:1") && out.stderr.contains("max_tokens"),
        "{}",
        out.stderr
    );
}
