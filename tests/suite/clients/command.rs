//! `agentd clients`: README's client section is what the command prints for the default port, model and window;
//! the command asks a running server for its model and served window (`serve --max-model-len`), sends the key,
//! and refuses clearly when there is nothing to ask.

use std::process::Command;

use agentd::clients::{self, Served};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const BEGIN: &str =
    "<!-- BEGIN agentd clients --model qwen2.5-coder-0.5b-instruct --markdown -->\n";
const END: &str = "<!-- END agentd clients -->";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn readme_block() -> String {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let start = readme.find(BEGIN).expect("README has the clients block") + BEGIN.len();
    let end = readme[start..].find(END).expect("the block ends") + start;
    readme[start..end].to_string()
}

#[test]
fn readme_shows_what_the_command_prints() {
    let served = Served {
        root: "http://127.0.0.1:8080".into(),
        model: "qwen2.5-coder-0.5b-instruct".into(),
        window: 32768,
        api_key: None,
    };
    let expected = clients::markdown(&served, &clients::all(&served));
    assert_eq!(
        readme_block(),
        expected,
        "README's client section is stale: replace it with `agentd clients --model qwen2.5-coder-0.5b-instruct \
         --port 8080 --markdown` (no server running)"
    );
    // The command prints the same for the address it is given (no server there: the model's own window).
    let port = free_port();
    let out = Command::new(BIN)
        .args([
            "clients",
            "--model",
            "qwen2.5-coder-0.5b-instruct",
            "--markdown",
            "--port",
        ])
        .arg(port.to_string())
        .env_remove("AGENTD_API_KEY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_port = Served {
        root: format!("http://127.0.0.1:{port}"),
        ..served
    };
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        clients::markdown(&at_port, &clients::all(&at_port))
    );
}

/// `agentd serve` with the scripted provider (a 4,096-token window) and an API key.
fn scripted_server(dir: &std::path::Path) -> crate::suite::server::ServeProcess {
    let script = dir.join("script.json");
    std::fs::write(&script, r#"{"context_window": 4096, "replies": ["ok"]}"#).unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--port", "0", "--api-key", "sk-clients-test"])
        .env("AGENTD_HOME", dir.join("home"))
        .env("AGENTD_SCRIPTED_PROVIDER", &script);
    crate::suite::server::ServeProcess::spawn(command)
}

#[test]
fn a_running_server_gives_its_model_window_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = scripted_server(dir.path());
    // Without the key the server refuses, and the command says so.
    let out = Command::new(BIN)
        .args(["clients", "pi", "--json", "--url", &server.root])
        .env_remove("AGENTD_API_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wants an API key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(BIN)
        .args(["clients", "pi", "--json", "--url", &server.root])
        .env("AGENTD_API_KEY", "sk-clients-test")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["served"]["window"], 4096);
    assert_eq!(printed["served"]["root"], server.root);
    let pi = &printed["clients"][0];
    assert_eq!(pi["name"], "pi");
    let models: serde_json::Value =
        serde_json::from_str(pi["files"][0]["content"].as_str().unwrap()).unwrap();
    let provider = &models["providers"]["agentd"];
    assert_eq!(provider["apiKey"], "sk-clients-test");
    assert_eq!(provider["baseUrl"], format!("{}/v1", server.root));
    assert_eq!(provider["models"][0]["contextWindow"], 4096);
    assert_eq!(provider["models"][0]["maxTokens"], 512);
    // A model the server does not serve.
    let out = Command::new(BIN)
        .args(["clients", "--model", "nope", "--url", &server.root])
        .env("AGENTD_API_KEY", "sk-clients-test")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not serve nope"));
}

#[test]
fn without_a_server_or_a_model_it_says_what_to_do() {
    let out = Command::new(BIN)
        .args(["clients", "--url"])
        .arg(format!("http://127.0.0.1:{}", free_port()))
        .env_remove("AGENTD_API_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("start `agentd serve`") && err.contains("--model"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args([
            "clients",
            "emacs",
            "--model",
            "qwen2.5-coder-0.5b-instruct",
            "--url",
        ])
        .arg(format!("http://127.0.0.1:{}", free_port()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no client `emacs`"));
}
