//! Embeddings of a remote model: the request forwarded to the server's OpenAI `/embeddings` (floats), the
//! vectors and `usage.prompt_tokens` read back in the inputs' order. OpenAI's `input` cannot mix texts and token
//! ids: such a request goes as two, texts and ids, and the answers are put back in order.

use serde_json::{json, Value};

use super::super::{named_or_default, EmbedInput, EmbedRequest, Embeddings, ProviderError};
use super::{wire, Shared};

pub(super) async fn embed(
    shared: &Shared,
    request: EmbedRequest,
) -> Result<Embeddings, ProviderError> {
    let model = named_or_default(&request.model, &shared.models());
    let (texts, ids): (Vec<usize>, Vec<usize>) =
        (0..request.inputs.len()).partition(|&i| matches!(request.inputs[i], EmbedInput::Text(_)));
    let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); request.inputs.len()];
    let mut out = Embeddings {
        model: model.clone(),
        ..Embeddings::default()
    };
    for group in [texts, ids].into_iter().filter(|g| !g.is_empty()) {
        let input: Vec<Value> = group
            .iter()
            .map(|&i| match &request.inputs[i] {
                EmbedInput::Text(t) => json!(t),
                EmbedInput::Tokens(ids) => json!(ids),
            })
            .collect();
        let answer = post(shared, &model, input, request.truncate).await?;
        for (&i, v) in group.iter().zip(answer.vectors) {
            vectors[i] = v;
        }
        out.prompt_tokens += answer.prompt_tokens;
        out.model = answer.model;
    }
    out.vectors = vectors;
    Ok(out)
}

/// One `/embeddings` request of inputs of one kind.
async fn post(
    shared: &Shared,
    model: &str,
    input: Vec<Value>,
    truncate: bool,
) -> Result<Embeddings, ProviderError> {
    let count = input.len();
    let mut body = json!({"model": model, "input": input, "encoding_format": "float"});
    if truncate {
        // agentd's and others' extension; a server that knows it not ignores it.
        body["truncate"] = true.into();
    }
    let url = shared.endpoint("embeddings");
    let (status, text) = super::http::post_json(shared, &url, &body).await?;
    if !(200..300).contains(&status) {
        return Err(super::http::classify(
            status,
            wire::error_message(&text),
            &url,
            model,
            1,
        ));
    }
    #[derive(serde::Deserialize)]
    struct Item {
        index: usize,
        embedding: Vec<f32>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Counted {
        #[serde(default)]
        prompt_tokens: u64,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Item>,
        #[serde(default)]
        model: Option<String>,
        #[serde(default)]
        usage: Counted,
    }
    let answer: Answer = serde_json::from_str(&text).map_err(|e| {
        ProviderError::Protocol(format!("/embeddings answered an unexpected shape: {e}"))
    })?;
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; count];
    for item in answer.data {
        if let Some(slot) = vectors.get_mut(item.index) {
            *slot = Some(item.embedding);
        }
    }
    let vectors = vectors
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ProviderError::Protocol("/embeddings did not answer every input".into()))?;
    Ok(Embeddings {
        model: answer.model.unwrap_or_else(|| model.to_string()),
        vectors,
        prompt_tokens: answer.usage.prompt_tokens,
        load_secs: 0.0,
    })
}
