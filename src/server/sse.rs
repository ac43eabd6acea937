//! Server-sent events helpers: JSON `data:` events, the closing `[DONE]`, and the response with keep-alive
//! comments (so proxies and clients do not time out while a long prompt is prefilled or a request waits).

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Serialize;

/// A `data:` event holding `value` as JSON.
pub fn json_event<T: Serialize>(value: &T) -> Event {
    match serde_json::to_string(value) {
        Ok(text) => Event::default().data(text),
        Err(e) => Event::default().data(
            serde_json::json!({"error": {"message": format!("cannot serialise an event: {e}"),
                                         "type": "server_error", "param": null, "code": null}})
            .to_string(),
        ),
    }
}

/// The `data: [DONE]` that ends an OpenAI stream.
pub fn done() -> Event {
    Event::default().data("[DONE]")
}

/// An SSE response over `events`, with a keep-alive comment every 15 seconds of silence.
pub fn response<S>(events: S) -> Response
where
    S: Stream<Item = Event> + Send + 'static,
{
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
