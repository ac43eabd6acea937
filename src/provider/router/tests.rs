use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;

use super::*;
use crate::provider::{collect, ModelState, ScriptedProvider, ScriptedReply};

/// A model `id` whose loader counts its calls, takes `load` to load, and fails while `fail` is set.
struct Fake {
    loads: Arc<AtomicUsize>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

fn spec(id: &str, load: Duration, replies: Vec<ScriptedReply>) -> (ModelSpec, Fake) {
    let loads = Arc::new(AtomicUsize::new(0));
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (l, f) = (loads.clone(), fail.clone());
    let loader: Loader = Arc::new(move || {
        l.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(load);
        if f.load(Ordering::SeqCst) {
            return Err(ProviderError::Config("the weights are corrupt".into()));
        }
        Ok(Arc::new(ScriptedProvider::new(replies.clone())) as Arc<dyn Provider>)
    });
    (
        ModelSpec {
            id: id.into(),
            aliases: vec![format!("{id}-alias")],
            context_window: 4096,
            size_bytes: 100,
            preload: false,
            details: None,
            loader,
        },
        Fake { loads, fail },
    )
}

fn request(model: &str) -> CompletionRequest {
    CompletionRequest {
        model: model.into(),
        messages: vec![crate::provider::Message::user("hi")],
        ..Default::default()
    }
}

fn replies(text: &str, n: usize) -> Vec<ScriptedReply> {
    (0..n).map(|_| ScriptedReply::text_only(text)).collect()
}

fn state(router: &ModelRouter, id: &str) -> ModelState {
    router
        .model_states()
        .into_iter()
        .find(|s| s.model.id == id)
        .unwrap()
        .state
}

async fn answer(router: &ModelRouter, model: &str) -> Result<String, String> {
    let done = collect(router.stream(request(model), CancellationToken::new())).await;
    match done.error {
        Some(e) => Err(e.message),
        None => Ok(done.message.text()),
    }
}

#[tokio::test]
async fn a_model_loads_on_first_use_once_for_all_waiting_requests() {
    let (a, fa) = spec("a", Duration::ZERO, replies("from a", 8));
    let (b, fb) = spec("b", Duration::from_millis(200), replies("from b", 8));
    let router = ModelRouter::new(vec![a, b], RouterOptions::default()).unwrap();
    assert_eq!(state(&router, "b"), ModelState::Unloaded);
    assert_eq!(router.models()[1].context_window, 4096);
    let answers = futures::future::join_all((0..5).map(|_| answer(&router, "b"))).await;
    assert!(
        answers.iter().all(|a| a.as_deref() == Ok("from b")),
        "{answers:?}"
    );
    assert_eq!(fb.loads.load(Ordering::SeqCst), 1);
    assert_eq!(fa.loads.load(Ordering::SeqCst), 0);
    assert_eq!(state(&router, "b"), ModelState::Loaded);
    // The empty name is the first model; an alias reaches its model; an unknown name is an error.
    assert_eq!(answer(&router, "").await.as_deref(), Ok("from a"));
    assert_eq!(answer(&router, "b-alias").await.as_deref(), Ok("from b"));
    assert_eq!(router.resolve_model("b-alias").as_deref(), Some("b"));
    let err = answer(&router, "zzz").await.unwrap_err();
    assert!(err.contains("serves: a, b"), "{err}");
}

#[tokio::test]
async fn beyond_max_loaded_the_least_recently_used_idle_model_goes() {
    let (a, fa) = spec("a", Duration::ZERO, replies("a", 8));
    let (b, _) = spec("b", Duration::ZERO, replies("b", 8));
    let (c, _) = spec("c", Duration::ZERO, replies("c", 8));
    let options = RouterOptions {
        max_loaded: 2,
        ..Default::default()
    };
    let router = ModelRouter::new(vec![a, b, c], options).unwrap();
    for m in ["a", "b", "a", "c"] {
        answer(&router, m).await.unwrap();
    }
    // b was used least recently when c needed room.
    assert_eq!(state(&router, "a"), ModelState::Loaded);
    assert_eq!(state(&router, "b"), ModelState::Unloaded);
    assert_eq!(state(&router, "c"), ModelState::Loaded);
    assert_eq!(fa.loads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_busy_model_is_not_unloaded_for_another() {
    let (a, _) = spec("a", Duration::ZERO, vec![ScriptedReply::new().hang()]);
    let (b, fb) = spec("b", Duration::ZERO, replies("b", 1));
    let options = RouterOptions {
        max_loaded: 1,
        ..Default::default()
    };
    let router = ModelRouter::new(vec![a, b], options).unwrap();
    let cancel = CancellationToken::new();
    let mut hanging = router.stream(request("a"), cancel.clone());
    // The first event means the request holds model a.
    let first = hanging.next().await;
    assert!(first.is_some());
    let err = answer(&router, "b").await.unwrap_err();
    assert!(err.contains("busy"), "{err}");
    assert_eq!(fb.loads.load(Ordering::SeqCst), 0);
    cancel.cancel();
    while hanging.next().await.is_some() {}
    assert_eq!(answer(&router, "b").await.as_deref(), Ok("b"));
    assert_eq!(state(&router, "a"), ModelState::Unloaded);
}

#[tokio::test]
async fn a_failed_load_fails_its_requests_only_and_is_tried_again() {
    let (a, _) = spec("a", Duration::ZERO, replies("a", 4));
    let (b, fb) = spec("b", Duration::from_millis(50), replies("b", 4));
    fb.fail.store(true, Ordering::SeqCst);
    let router = ModelRouter::new(vec![a, b], RouterOptions::default()).unwrap();
    let both = futures::future::join(answer(&router, "b"), answer(&router, "b")).await;
    for r in [&both.0, &both.1] {
        let e = r.as_ref().unwrap_err();
        assert!(
            e.contains("model `b` failed to load") && e.contains("corrupt"),
            "{e}"
        );
    }
    assert_eq!(fb.loads.load(Ordering::SeqCst), 1);
    assert!(matches!(state(&router, "b"), ModelState::Failed { .. }));
    assert_eq!(answer(&router, "a").await.as_deref(), Ok("a"));
    fb.fail.store(false, Ordering::SeqCst);
    assert_eq!(answer(&router, "b").await.as_deref(), Ok("b"));
    assert_eq!(fb.loads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn keep_alive_and_the_idle_timeout_unload_a_model() {
    let (a, fa) = spec("a", Duration::ZERO, replies("a", 8));
    let options = RouterOptions {
        idle_unload: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let router = ModelRouter::new(vec![a], options).unwrap();
    // keep_alive 0: unloaded as soon as the request ends.
    let mut r = request("a");
    r.keep_alive = Some(KeepAlive::Unload);
    assert!(collect(router.stream(r, CancellationToken::new()))
        .await
        .error
        .is_none());
    assert_eq!(state(&router, "a"), ModelState::Unloaded);
    // Forever: kept past the idle timeout.
    let mut r = request("a");
    r.keep_alive = Some(KeepAlive::Forever);
    assert!(collect(router.stream(r, CancellationToken::new()))
        .await
        .error
        .is_none());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(state(&router, "a"), ModelState::Loaded);
    // Nothing said: the idle timeout.
    answer(&router, "a").await.unwrap();
    let status = router.model_states().remove(0);
    assert!(status.expires_at.is_some());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(state(&router, "a"), ModelState::Unloaded);
    assert_eq!(fa.loads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn requests_beyond_the_waiting_bound_are_told_to_retry() {
    let (a, _) = spec("a", Duration::from_millis(300), replies("a", 8));
    let options = RouterOptions {
        max_waiting: 2,
        ..Default::default()
    };
    let router = ModelRouter::new(vec![a], options).unwrap();
    let outcomes = futures::future::join_all((0..4).map(|_| answer(&router, "a"))).await;
    let busy = outcomes
        .iter()
        .filter(|o| o.as_ref().is_err_and(|e| e.contains("busy")))
        .count();
    assert_eq!(busy, 2, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 2);
}

#[tokio::test]
async fn a_cancelled_wait_leaves_nothing_counted() {
    let (a, _) = spec("a", Duration::from_millis(300), replies("a", 2));
    let router = ModelRouter::new(vec![a], RouterOptions::default()).unwrap();
    let cancel = CancellationToken::new();
    let waiting = collect(router.stream(request("a"), cancel.clone()));
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    };
    let (outcome, ()) = futures::future::join(waiting, canceller).await;
    assert!(outcome.error.is_some());
    // The load went on; the next request finds the model loaded and nothing left waiting.
    assert_eq!(answer(&router, "a").await.as_deref(), Ok("a"));
    assert_eq!(router.model_states()[0].in_flight, 0);
}

#[tokio::test]
async fn the_memory_budget_unloads_for_room() {
    let (a, _) = spec("a", Duration::ZERO, replies("a", 4));
    let (b, _) = spec("b", Duration::ZERO, replies("b", 4));
    let options = RouterOptions {
        max_loaded: 0,
        memory_budget: Some(150),
        ..Default::default()
    };
    let router = ModelRouter::new(vec![a, b], options).unwrap();
    answer(&router, "a").await.unwrap();
    answer(&router, "b").await.unwrap();
    assert_eq!(state(&router, "a"), ModelState::Unloaded);
    assert_eq!(state(&router, "b"), ModelState::Loaded);
    // Loading and unloading by hand.
    router.load_model("a").await.unwrap();
    assert_eq!(state(&router, "a"), ModelState::Loaded);
    router.unload_model("a").await.unwrap();
    assert_eq!(state(&router, "a"), ModelState::Unloaded);
    assert!(router.unload_model("nope").await.is_err());
}

#[test]
fn the_same_name_twice_is_refused() {
    let (a, _) = spec("a", Duration::ZERO, vec![]);
    let (a2, _) = spec("a", Duration::ZERO, vec![]);
    assert!(ModelRouter::new(vec![a, a2], RouterOptions::default()).is_err());
    assert!(ModelRouter::new(vec![], RouterOptions::default()).is_err());
}
