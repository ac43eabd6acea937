//! A fill-in-the-middle request's parts at the provider boundary: the text around the cursor, other files, and
//! llama.cpp's limits on the middle (`n_indent`, `t_max_predict_ms`). The local provider lays the prompt out from
//! the model's FIM tokens (`text::fim`); a provider without them refuses it.

use serde::{Deserialize, Serialize};

/// Another file of the project sent as context (llama.cpp's `input_extra` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfillFile {
    #[serde(default = "default_filename")]
    pub filename: String,
    #[serde(default)]
    pub text: String,
}

fn default_filename() -> String {
    "tmp".into()
}

/// The middle to fill: the request's `prompt` (llama.cpp's `prompt`, appended to `prefix`) comes in
/// [`super::RawCompletionRequest::prompt`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Infill {
    pub prefix: String,
    pub suffix: String,
    #[serde(default)]
    pub extra: Vec<InfillFile>,
    /// End the middle at the first later line indented less than this many columns (llama.cpp's `n_indent`).
    #[serde(default)]
    pub n_indent: usize,
    /// Once the middle has a line break, end it at the next one after this many milliseconds of generation.
    #[serde(default)]
    pub t_max_predict_ms: Option<u64>,
}
