//! The response cache: a hit only at temperature 0, keys that change with the prompt, tools and sampling, no
//! stored failures, persistence across opens, and exact prompt tokens on the local engine.

use std::sync::Arc;

use agentd::provider::response_cache::{
    cache_key, CacheConfig, CachingProvider, PromptKey, ResponseCache,
};
use agentd::provider::{
    collect, CompletionRequest, ErrorKind, LocalProvider, Provider, Sampling, ScriptedProvider,
    ScriptedReply, ToolSpec,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::suite::common;

fn request(temperature: Option<f32>) -> CompletionRequest {
    CompletionRequest {
        sampling: Sampling {
            temperature,
            ..Sampling::default()
        },
        max_tokens: Some(16),
        ..CompletionRequest::user("Say hi.")
    }
}

fn open(dir: &tempfile::TempDir) -> Arc<ResponseCache> {
    Arc::new(ResponseCache::open(&dir.path().join("cache/responses.sqlite")).unwrap())
}

async fn ask(p: &CachingProvider, r: CompletionRequest) -> agentd::provider::Completion {
    collect(p.stream(r, CancellationToken::new())).await
}

#[tokio::test]
async fn a_hit_only_at_temperature_zero() {
    let dir = tempfile::tempdir().unwrap();
    let scripted = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("Hi!"),
        ScriptedReply::text_only("Hello (sampled)"),
        ScriptedReply::text_only("Hey (sampled again)"),
        ScriptedReply::text_only("default temperature"),
    ]));
    let p = CachingProvider::new(scripted.clone(), open(&dir));
    let first = ask(&p, request(Some(0.0))).await;
    let second = ask(&p, request(Some(0.0))).await;
    assert_eq!(
        scripted.requests().len(),
        1,
        "the second greedy request was answered from the cache"
    );
    assert_eq!(second.message, first.message);
    assert_eq!(second.usage, first.usage);
    assert_eq!(second.events, first.events, "a hit replays the same stream");
    assert_eq!(first.message.text(), "Hi!");
    let hot = ask(&p, request(Some(0.7))).await;
    let hot_again = ask(&p, request(Some(0.7))).await;
    assert_eq!(hot.message.text(), "Hello (sampled)");
    assert_eq!(hot_again.message.text(), "Hey (sampled again)");
    let unset = ask(&p, request(None)).await;
    assert_eq!(unset.message.text(), "default temperature");
    assert_eq!(scripted.requests().len(), 4);
    let s = p.stats().snapshot();
    assert_eq!(
        (s.hits, s.misses, s.bypassed, s.stores, s.errors),
        (1, 1, 3, 1, 0)
    );
    assert_eq!(p.cache().len().unwrap(), 1);
}

#[tokio::test]
async fn the_key_covers_prompt_tools_and_sampling_and_failures_are_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let scripted = Arc::new(ScriptedProvider::new(
        (0..8).map(|i| ScriptedReply::text_only(format!("reply {i}"))),
    ));
    let p = CachingProvider::new(scripted.clone(), open(&dir));
    let base = request(Some(0.0));
    let tool = ToolSpec::new(
        "read",
        "Read a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )
    .unwrap();
    let variants = [
        base.clone(),
        CompletionRequest {
            tools: vec![tool],
            ..base.clone()
        },
        CompletionRequest {
            sampling: Sampling {
                seed: Some(7),
                ..base.sampling.clone()
            },
            ..base.clone()
        },
        CompletionRequest {
            max_tokens: Some(17),
            ..base.clone()
        },
        CompletionRequest {
            system: Some("Be brief.".into()),
            ..base.clone()
        },
        CompletionRequest {
            model: "other".into(),
            ..base.clone()
        },
    ];
    for v in &variants {
        ask(&p, v.clone()).await;
    }
    assert_eq!(
        scripted.requests().len(),
        variants.len(),
        "every variant is its own key"
    );
    for v in &variants {
        ask(&p, v.clone()).await;
    }
    assert_eq!(
        scripted.requests().len(),
        variants.len(),
        "and each is a hit the second time"
    );
    // Key order inside JSON does not matter; the model does.
    let k1 = cache_key("m", &PromptKey::Tokens(vec![1, 2, 3]), &base);
    assert_eq!(
        k1,
        cache_key("m", &PromptKey::Tokens(vec![1, 2, 3]), &base.clone())
    );
    assert_ne!(k1, cache_key("m", &PromptKey::Tokens(vec![1, 2, 4]), &base));
    assert_ne!(k1, cache_key("n", &PromptKey::Tokens(vec![1, 2, 3]), &base));

    // An error is not stored: the same request goes to the provider again.
    let failing = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().fail(ErrorKind::Server, "down"),
        ScriptedReply::text_only("up again"),
    ]));
    let p = CachingProvider::new(failing.clone(), open(&dir));
    let q = CompletionRequest::user("status?");
    let q = CompletionRequest {
        sampling: Sampling::greedy(),
        ..q
    };
    assert!(ask(&p, q.clone()).await.error.is_some());
    assert_eq!(ask(&p, q.clone()).await.message.text(), "up again");
    assert_eq!(failing.requests().len(), 2);
}

#[tokio::test]
async fn stored_responses_survive_a_reopen_and_config_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let scripted = Arc::new(ScriptedProvider::new([ScriptedReply::text_only(
        "persisted",
    )]));
    ask(
        &CachingProvider::new(scripted.clone(), open(&dir)),
        request(Some(0.0)),
    )
    .await;
    let again = Arc::new(ScriptedProvider::new([]));
    let p = CachingProvider::new(again.clone(), open(&dir));
    assert_eq!(
        ask(&p, request(Some(0.0))).await.message.text(),
        "persisted"
    );
    assert!(again.requests().is_empty());
    assert_eq!(p.stats().snapshot().hits, 1);

    let config = agentd::config::Config::from_toml(
        "[cache]\nenabled = true\npath = \"/tmp/x/r.sqlite\"",
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        config.cache,
        CacheConfig {
            enabled: true,
            path: Some("/tmp/x/r.sqlite".into())
        }
    );
    assert!(!agentd::config::Config::default().cache.enabled);
    assert!(CacheConfig::default()
        .resolved_path()
        .ends_with("cache/responses.sqlite"));
    let err = agentd::config::Config::from_toml("[cache]\nenable = true", "t.toml").unwrap_err();
    assert!(err.to_string().contains("unknown field `enable`"), "{err}");
    let bad = ResponseCache::open(dir.path()).err().unwrap();
    assert!(
        bad.to_string()
            .starts_with("cannot open the response cache"),
        "{bad}"
    );
}

#[tokio::test]
async fn the_local_engine_is_keyed_by_its_exact_prompt_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(common::engine().clone());
    let cache = open(&dir);
    let p = CachingProvider::local(local.clone(), cache.clone());
    let req = CompletionRequest {
        sampling: Sampling::greedy(),
        max_tokens: Some(6),
        ..CompletionRequest::user("Name a color.")
    };
    let t = std::time::Instant::now();
    let first = ask(&p, req.clone()).await;
    let cold = t.elapsed();
    let t = std::time::Instant::now();
    let second = ask(&p, req.clone()).await;
    let warm = t.elapsed();
    assert_eq!(first.error, None);
    assert_eq!(second.message, first.message);
    assert_eq!(p.stats().snapshot().hits, 1);
    let model = local.models()[0].id.clone();
    let key = cache_key(
        &local.model_identity(&model),
        &PromptKey::Tokens(local.prompt_tokens(&req).unwrap()),
        &req,
    );
    assert!(
        cache.get(&key).unwrap().is_some(),
        "stored under the exact-token key"
    );
    println!(
        "local cache: miss {:.1} ms, hit {:.1} ms",
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3
    );
}
