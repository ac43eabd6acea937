//! agentd's JSON-Schema extensions over HTTP, as any client (Pi, an SDK) may send them: an enum of paths and a
//! substring of a file's text constrain a forced call on the local engine, the schema the model sees and the
//! validation do not carry them, and a malformed extension is a 400 naming it.

use serde_json::{json, Value};

use super::{post, TestServer};

const FILE: &str = "def add(a, b):\n    return a - b\n";

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "edit", "description": "Replace text in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "x-agentd-enum": ["calc.py", "docs/notes.md"]},
            "old_text": {"type": "string", "x-agentd-substring-of": FILE, "x-agentd-substring-unit": "line"},
            "new_text": {"type": "string"}},
            "required": ["path", "old_text", "new_text"]}}}])
}

#[tokio::test]
async fn path_and_substring_extensions_constrain_calls_over_http() {
    let server = TestServer::local(Default::default()).await;
    let url = server.url("/v1/chat/completions");
    let model = super::served_model(&server).await;
    for (temperature, seed) in [(0.0, 0), (1.0, 1), (1.0, 2), (1.0, 3)] {
        let body = json!({"model": model, "temperature": temperature, "seed": seed, "max_tokens": 120,
            "messages": [{"role": "user", "content": "Fix the add function in calc.py: it should return a + b."}],
            "tools": tools(), "tool_choice": "required"});
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 200, "{r}");
        let call = &r["choices"][0]["message"]["tool_calls"][0]["function"];
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        let path = args["path"].as_str().unwrap();
        assert!(["calc.py", "docs/notes.md"].contains(&path), "{args}");
        let old = args["old_text"].as_str().unwrap();
        assert!(
            !old.is_empty() && FILE.contains(old),
            "{old:?} is not from the file"
        );
        // Whole lines: it starts at a line start and ends at a line end.
        let at = FILE.find(old).unwrap();
        assert!(at == 0 || FILE.as_bytes()[at - 1] == b'\n', "{old:?}");
        let end = at + old.len();
        assert!(
            end == FILE.len() || FILE.as_bytes()[end] == b'\n' || old.ends_with('\n'),
            "{old:?}"
        );
    }
    // A malformed extension is the client's error.
    let mut bad = tools();
    bad[0]["function"]["parameters"]["properties"]["path"]["x-agentd-enum"] = json!([]);
    let body =
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "tools": bad});
    let (status, r) = post(&url, &body).await;
    assert_eq!(status, 400, "{r}");
    assert!(r.to_string().contains("x-agentd-enum is empty"), "{r}");
}
