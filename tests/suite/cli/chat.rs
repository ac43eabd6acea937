//! `agentd chat` under tmux: the real binary in a real terminal, driven with `send-keys` and read with
//! `capture-pane`, on the scripted provider. Types a prompt (which makes a real `read` call), slash commands
//! (one unknown), `!cmd` and `!!cmd`, steers, queues a follow-up and aborts a run, compacts, forks, starts a
//! new session, and quits with Ctrl+C twice; resumes a session from the `-r` picker. Skipped, saying why, only
//! when tmux is not installed (`.ci/run` installs it).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::run::{Sandbox, BIN};

/// A tmux server of our own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn start(sb: &Sandbox, args: &str) -> Self {
        let socket = format!("agentd-test-{}-{}", std::process::id(), rand_suffix());
        let tmux = Tmux { socket };
        let command = format!(
            "env AGENTD_HOME={} AGENTD_SCRIPTED_PROVIDER={} AGENTD_SCRIPTED_REQUESTS={} AGENTD_LOG=error {BIN} chat {args}",
            q(&sb.home),
            q(&sb.script),
            q(&sb.requests)
        );
        let out = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "110",
            "-y",
            "40",
            "-c",
            sb.cwd.to_str().unwrap(),
            &command,
        ]);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        let out = self.cmd(&args);
        assert!(
            out.status.success(),
            "send-keys: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Types `text` literally, then Enter.
    fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "main"]).stdout)
            .into_owned()
    }

    /// Waits until the screen shows `needle`; returns the screen.
    fn wait_for(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {needle:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "main"]).status.success()
    }

    /// Waits (10 s at most) for the chat to end.
    fn wait_until_gone(&self) {
        let start = Instant::now();
        while self.alive() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "chat did not quit: {}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_007)
}

/// Shell-quotes a path.
fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn chat_under_tmux_prompts_runs_commands_steers_aborts_and_quits() {
    if !tmux_available() {
        eprintln!("SKIPPED chat_under_tmux_…: tmux is not installed (`apt-get install -y tmux`; .ci/run does it)");
        return;
    }
    let sb = Sandbox::new(json!({"chunk_delay_ms": 10, "replies": [
        {"steps": [{"text": "Let me read it."}, {"tool_call": {"name": "read", "arguments": {"path": "notes.txt"}}}]},
        "Your notes say: buy milk.",
        {"steps": [{"text": "Working slowly."}, {"tool_call": {"name": "bash", "arguments": {"command": "sleep 2; echo slept"}}}]},
        "Steered: switching to eggs.",
        "Follow-up handled: bread too.",
        {"steps": [{"text": "Thinking forever"}, {"hang": true}]},
        "## Goal\nShopping list.\n\n## Progress\nMilk, eggs, bread.",
        "Template answered.",
        "Mention answered.",
    ]}));
    // A project prompt template: `/greet NAME` becomes a prompt, and /help lists it.
    std::fs::create_dir_all(sb.cwd.join(".agentd/prompts")).unwrap();
    std::fs::write(
        sb.cwd.join(".agentd/prompts/greet.md"),
        "---\ndescription: Greet someone warmly\n---\nSay hello to $1 from $@.\n",
    )
    .unwrap();
    std::fs::write(sb.cwd.join("notes.txt"), "buy milk\n").unwrap();
    let tmux = Tmux::start(&sb, "");
    let screen = tmux.wait_for("· ready");
    assert!(screen.contains("agentd chat — scripted"), "{screen}");
    assert!(
        screen.contains("ctx "),
        "the status line shows context usage: {screen}"
    );

    // A prompt: streamed answer, the tool call shown compactly with its output.
    tmux.type_line("what do my notes say?");
    let screen = tmux.wait_for("Your notes say: buy milk.");
    assert!(screen.contains("> what do my notes say?"), "{screen}");
    assert!(screen.contains("● read notes.txt"), "{screen}");
    assert!(screen.contains("│ buy milk"), "{screen}");
    let request = &sb.recorded()[1];
    assert_eq!(request["messages"][2]["content"], "buy milk\n");

    // Slash commands: an unknown one is an error message, /session shows the session.
    tmux.type_line("/frobnicate");
    tmux.wait_for("unknown command /frobnicate");
    tmux.type_line("/session");
    let screen = tmux.wait_for("messages: 4");
    assert!(screen.contains("model: scripted"), "{screen}");
    tmux.type_line("/tools");
    tmux.wait_for("read   Read the contents");
    tmux.type_line("/tree");
    tmux.wait_for("user: \"what do my notes say?\"");
    // /export writes the session as a self-contained page in the workspace.
    tmux.type_line("/export transcript.html");
    tmux.wait_for("Exported to");
    let page = std::fs::read_to_string(sb.cwd.join("transcript.html")).unwrap();
    assert!(page.contains("what do my notes say?") && page.contains("tool call <b>read</b>"));
    assert!(!page.contains("<script"));

    // !cmd runs a shell command; its output is in the transcript (!!cmd: not sent to the model).
    tmux.type_line("!echo tmux-$((6*7))");
    tmux.wait_for("│ tmux-42");
    tmux.type_line("!!echo private");
    tmux.wait_for("(not sent to the model)");

    // Enter while the agent works steers it (delivered after the tool call); Alt+Enter queues a follow-up
    // (delivered when it would stop).
    // Chat asks before a command: the call and its command are shown; `y` runs it.
    tmux.type_line("do something slow");
    let screen = tmux.wait_for("Allow bash (exec)?");
    assert!(screen.contains("$ sleep 2; echo slept"), "{screen}");
    assert!(screen.contains("y allow · a always"), "{screen}");
    tmux.keys(&["y"]);
    tmux.wait_for("allowed: bash");
    tmux.wait_for("◌ bash sleep 2; echo slept");
    tmux.type_line("use eggs instead");
    tmux.wait_for("⏳ steer: use eggs instead");
    tmux.keys(&["-l", "also bread"]);
    tmux.keys(&["M-Enter"]);
    tmux.wait_for("⏳ follow-up: also bread");
    tmux.wait_for("Steered: switching to eggs.");
    let screen = tmux.wait_for("Follow-up handled: bread too.");
    assert!(screen.contains("> use eggs instead"), "{screen}");
    assert!(screen.contains("> also bread"), "{screen}");
    let requests = sb.recorded();
    let last_user = |r: &serde_json::Value| {
        r["messages"].as_array().unwrap().last().unwrap()["content"].clone()
    };
    assert_eq!(last_user(&requests[requests.len() - 2]), "use eggs instead");
    assert_eq!(last_user(&requests[requests.len() - 1]), "also bread");

    // Esc aborts a run.
    tmux.type_line("hang");
    tmux.wait_for("Thinking forever");
    tmux.keys(&["Escape"]);
    tmux.wait_for("aborted");
    tmux.wait_for("· ready");

    // The session was saved as it went.
    assert_eq!(sb.session_files().len(), 1);

    // /compact summarises with the model; /fork opens a picker and starts a new file with the message in the
    // editor; /new empties the transcript.
    tmux.type_line("/compact keep the list");
    tmux.wait_for("Compacted:");
    tmux.type_line("/fork");
    tmux.wait_for("Fork from before which message?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("Forked into");
    assert_eq!(sb.session_files().len(), 2);
    tmux.keys(&["C-u"]);
    tmux.type_line("/new");
    let screen = tmux.wait_for("New session.");
    assert!(!screen.contains("Your notes say"), "{screen}");
    tmux.wait_for("session new");
    tmux.type_line("/help");
    tmux.wait_for("Greet someone warmly");
    tmux.type_line("/greet Ada \"the team\"");
    tmux.wait_for("Template answered.");
    let screen = tmux.screen();
    assert!(
        screen.contains("Say hello to Ada from Ada the team."),
        "{screen}"
    );
    // `@no` + Tab completes the path; the file's text goes after the prompt; a binary file is refused.
    tmux.keys(&["-l", "what is in @no"]);
    tmux.keys(&["Tab"]);
    tmux.wait_for("what is in @notes.txt");
    tmux.keys(&["Enter"]);
    tmux.wait_for("Mention answered.");
    assert_eq!(
        sb.last_content(-1),
        json!("what is in @notes.txt\n\n<file name=\"notes.txt\">\nbuy milk\n</file>")
    );
    std::fs::write(sb.cwd.join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    tmux.type_line("look at @blob.bin");
    tmux.wait_for("looks like a binary file");
    tmux.keys(&["C-u"]);

    // Ctrl+C twice quits.
    tmux.keys(&["C-c"]);
    tmux.wait_for("press Ctrl+C again to quit");
    tmux.keys(&["C-c"]);
    tmux.wait_until_gone();
}

/// Chat asks before a write: the new file's content is shown; `n` denies (the model sees why, nothing is
/// written); `a` allows the tool for the rest of the session, so the next write runs without asking.
#[test]
fn chat_asks_before_writing_and_remembers_always() {
    if !tmux_available() {
        eprintln!("SKIPPED chat_asks_…: tmux is not installed");
        return;
    }
    let write = |content: &str| json!({"steps": [{"tool_call": {"name": "write", "arguments": {"path": "out.txt", "content": content}}}]});
    let sb = Sandbox::new(json!([
        write("first draft"),
        "Understood, not writing.",
        write("second draft"),
        write("third draft"),
        "Written twice."
    ]));
    let tmux = Tmux::start(&sb, "");
    tmux.wait_for("· ready");
    tmux.type_line("write a draft");
    let screen = tmux.wait_for("Allow write (write)?");
    assert!(screen.contains("new file out.txt"), "{screen}");
    assert!(screen.contains("first draft"), "{screen}");
    tmux.keys(&["n"]);
    tmux.wait_for("denied: write");
    tmux.wait_for("Understood, not writing.");
    assert!(!sb.cwd.join("out.txt").exists());
    let result = sb.last_content(-1);
    assert!(
        result.as_str().unwrap().contains("the user denied it"),
        "{result}"
    );

    tmux.type_line("write it after all");
    tmux.wait_for("Allow write (write)?");
    tmux.keys(&["a"]);
    tmux.wait_for("Written twice.");
    assert_eq!(
        std::fs::read_to_string(sb.cwd.join("out.txt")).unwrap(),
        "third draft",
        "the second write ran without asking"
    );
    let screen = tmux.screen();
    assert_eq!(screen.matches("Allow write").count(), 0, "{screen}");
    tmux.type_line("/quit");
    tmux.wait_until_gone();
}

/// The session tree from the TUI: `/rewind N` drops messages and records the model's summary of them at the new
/// position (`branch_summary`, which the model then sees); `/label` and `/name` write `label` and
/// `session_info` entries; `/branch` (picker) moves before a user message with a summary of the branch left and
/// puts that message in the editor.
#[test]
fn chat_tree_rewinds_branches_labels_and_names() {
    if !tmux_available() {
        eprintln!("SKIPPED chat_tree_…: tmux is not installed");
        return;
    }
    let sb = Sandbox::new(json!([
        "Answer one.",
        "Answer two.",
        "- The user asked the second question; it was answered.",
        "Answer three.",
        "- Everything so far: three questions.",
    ]));
    let tmux = Tmux::start(&sb, "");
    tmux.wait_for("· ready");
    tmux.type_line("first question");
    tmux.wait_for("Answer one.");
    tmux.type_line("second question");
    tmux.wait_for("Answer two.");

    tmux.type_line("/rewind 2");
    let screen = tmux.wait_for("Rewound 2 message(s)");
    assert!(screen.contains("asked the second question"), "{screen}");
    tmux.type_line("third question");
    tmux.wait_for("Answer three.");
    let sent = sb.recorded().last().unwrap()["messages"].to_string();
    assert!(
        sent.contains("first question") && sent.contains("asked the second question"),
        "{sent}"
    );
    assert!(
        !sent.contains("\"second question\""),
        "the rewound message is gone: {sent}"
    );
    let summary_request = &sb.recorded()[2];
    assert!(
        summary_request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("second question"),
        "the summariser read the dropped messages"
    );

    tmux.type_line("/label good spot");
    tmux.wait_for("Labelled");
    tmux.type_line("/name groceries");
    tmux.wait_for("Session named: groceries");
    tmux.type_line("/session");
    tmux.wait_for("\"groceries\"");
    tmux.type_line("/tree");
    let screen = tmux.wait_for("[good spot]");
    assert!(screen.contains("branch_summary"), "{screen}");

    tmux.type_line("/branch");
    tmux.wait_for("Branch from before which message?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("Branched at");
    let screen = tmux.wait_for("three questions");
    assert!(
        screen.contains("> first question") || screen.contains("first question"),
        "{screen}"
    );

    let file = std::fs::read_to_string(&sb.session_files()[0]).unwrap();
    let kinds: Vec<String> = file
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["type"].as_str().map(String::from))
        .collect();
    for kind in ["branch_summary", "label", "session_info"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} entry: {kinds:?}"
        );
    }
    assert_eq!(
        kinds.iter().filter(|k| *k == "branch_summary").count(),
        2,
        "{kinds:?}"
    );
    tmux.keys(&["C-u"]);
    tmux.type_line("/quit");
    tmux.wait_until_gone();
}

#[test]
fn chat_resumes_a_session_from_the_picker() {
    if !tmux_available() {
        eprintln!("SKIPPED chat_resumes_…: tmux is not installed");
        return;
    }
    let sb = Sandbox::new(json!(["stored answer"]));
    let out = super::run::run(sb.cmd(&["run", "-p", "remember this question"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    sb.script(json!(["continued answer"]));
    let tmux = Tmux::start(&sb, "-r");
    let screen = tmux.wait_for("Resume a session");
    assert!(screen.contains("remember this question"), "{screen}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("stored answer");
    tmux.type_line("and now?");
    tmux.wait_for("continued answer");
    let messages = sb.recorded().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(messages, 3, "the resumed history went to the model");
    tmux.type_line("/quit");
    tmux.wait_until_gone();
    assert_eq!(
        sb.session_files().len(),
        1,
        "resuming must not create another file"
    );
}
