//! `GET /openapi.json` over a real socket: an OpenAPI 3.1 document in which every route the router serves is
//! documented (each documented operation is answered by its handler, not the fallback; no route is added to the
//! router outside the document), every `$ref` resolves, and every operation declares its door's error shape.

use std::collections::BTreeSet;

use agentd::provider::{ScriptedProvider, ScriptedReply};
use serde_json::Value;

use super::{client, TestServer};

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

async fn document(server: &TestServer) -> Value {
    let resp = client()
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("application/json"), "{kind}");
    resp.json().await.unwrap()
}

/// Every `$ref` under `v`.
fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => {
                        out.insert(r.clone());
                    }
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_route_is_in_the_document_and_answered_by_its_handler() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new(vec![ScriptedReply::text_only("hello"); 4]);
    let server = TestServer::scripted_with_sessions(&provider, dir.path()).await;
    let doc = document(&server).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc, agentd::server::openapi::document(), "served = built");

    let paths = doc["paths"].as_object().unwrap();
    let mut operations = Vec::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method).is_some() {
                operations.push((method, path.clone()));
            }
        }
    }
    // The routes of every door (a sample that must be there; the rest is checked below by probing).
    for (method, path) in [
        ("post", "/v1/chat/completions"),
        ("post", "/v1/completions"),
        ("post", "/v1/responses"),
        ("post", "/v1/messages"),
        ("post", "/v1/messages/count_tokens"),
        ("get", "/v1/models/{id}"),
        ("post", "/v1/embeddings"),
        ("post", "/infill"),
        ("post", "/tokenize"),
        ("post", "/api/chat"),
        ("post", "/api/generate"),
        ("get", "/api/tags"),
        ("post", "/v1/sessions"),
        ("delete", "/v1/sessions/{id}"),
        ("post", "/v1/sessions/{id}/prompt"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
    ] {
        assert!(
            operations.iter().any(|(m, p)| *m == method && p == path),
            "{method} {path} is not in the document"
        );
    }
    assert!(operations.len() >= 44, "{} operations", operations.len());

    // Each documented operation reaches a handler: not the router's 404 fallback, not 405.
    for (method, path) in &operations {
        let url = server.url(&path.replace("{id}", "no-such-id"));
        let request = match *method {
            "get" => client().get(&url),
            "delete" => client().delete(&url),
            _ => client()
                .request(method.to_uppercase().parse().unwrap(), &url)
                .header("content-type", "application/json")
                .body("{}"),
        };
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        assert_ne!(status, 405, "{method} {path}: {body}");
        assert!(
            !(status == 404 && body.contains("no route for")),
            "{method} {path} is documented but not routed: {body}"
        );
        assert!(status < 500, "{method} {path} with {{}}: {status} {body}");
    }

    // A path outside the document is the fallback's.
    let resp = client()
        .get(server.url("/v1/not-a-route"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // Every reference resolves.
    let mut all = BTreeSet::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in &all {
        let pointer = r.strip_prefix('#').expect("a local reference");
        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn each_door_declares_its_own_error_shape_and_request_bodies_their_types() {
    let doc = agentd::server::openapi::document();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in ["OpenAiError", "AnthropicError", "OllamaError"] {
        assert!(schemas.contains_key(name), "{name} is not a component");
    }
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path} has no success answer"
            );
            // Routes that read a body can refuse it: a 400 in the door's shape.
            if op.get("requestBody").is_none() {
                continue;
            }
            let expected = if path.starts_with("/api/") {
                "OllamaError"
            } else if path.starts_with("/v1/messages") {
                "AnthropicError"
            } else {
                "OpenAiError"
            };
            for status in ["400", "404", "413", "503"] {
                let schema = &responses[status]["content"]["application/json"]["schema"]["$ref"];
                assert_eq!(
                    schema.as_str(),
                    Some(format!("#/components/schemas/{expected}").as_str()),
                    "{method} {path} {status}"
                );
            }
            let body = &op["requestBody"]["content"]["application/json"]["schema"];
            assert!(body.is_object(), "{method} {path}: {body}");
            checked += 1;
        }
    }
    assert!(checked >= 26, "{checked}");
    // Generated from the types: the chat request's fields, with `messages` required, and the flattened
    // constraint fields beside them (an `allOf` of the two).
    let chat = &schemas["ChatCompletionRequest"]["allOf"];
    let own = chat
        .as_array()
        .unwrap()
        .iter()
        .find(|part| part.get("properties").is_some())
        .unwrap();
    let props = own["properties"].as_object().unwrap();
    for field in ["model", "messages", "tools", "max_tokens", "stream_options"] {
        assert!(props.contains_key(field), "ChatCompletionRequest.{field}");
    }
    assert_eq!(own["required"], serde_json::json!(["messages"]));
    assert!(chat
        .as_array()
        .unwrap()
        .iter()
        .any(|part| part["$ref"] == "#/components/schemas/ConstraintFields"));
    assert!(schemas["ConstraintFields"]["properties"]
        .as_object()
        .unwrap()
        .contains_key("guided_json"));
    // A body that refuses unknown fields says so.
    assert_eq!(schemas["CreateSession"]["additionalProperties"], false);
}

/// Routes are added through `routes!` only, which documents them; a plain `.route(` would serve one the document
/// does not list.
#[test]
fn no_route_is_added_outside_the_document() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let mut stack = vec![root];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for needle in [".route(", ".route_service(", ".nest(", ".nest_service("] {
                    assert!(
                        !text.contains(needle),
                        "{} adds a route with `{needle}`, outside the OpenAPI document",
                        path.display()
                    );
                }
                files += 1;
            }
        }
    }
    assert!(files > 20);
}
