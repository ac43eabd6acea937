//! The leaf every layer shares for tools and output shapes: [`ToolSpec`] (what a model is told about a tool),
//! [`ToolChoice`] and [`ResponseFormat`] (what a request asks of the output), and the JSON Schema compiler
//! ([`compile`]: admission of a schema, validation of a document against it).
//!
//! It imports nothing from the rest of agentd, so `engine`, `provider`, `tools`, `server` and `cli` can all use
//! these types without depending on each other. Errors are [`SchemaError`]s; the engine wraps them in its own.

mod choice;
pub mod compile;
pub mod extensions;
pub mod gbnf;
pub mod lark;
mod tool_spec;

pub use choice::{check_request, ResponseFormat, ToolChoice};
pub use tool_spec::{ToolSpec, MAX_TOOL_NAME_LEN};

/// Every way a tool definition, a schema, a `tool_choice` or a `response_format` can be refused. All of them are
/// the caller's to fix (an HTTP 400); none is a bug on our side except [`SchemaError::Internal`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A JSON Schema (a tool's `parameters` or a `response_format` schema) is not a valid schema. `location` is
    /// a JSON pointer into the schema. Fix the schema.
    #[error("invalid JSON Schema at `{location}`: {message}")]
    InvalidSchema { location: String, message: String },
    /// A valid schema uses a keyword (or a `format`) that grammar-constrained decoding cannot enforce exactly.
    /// It is rejected rather than silently ignored; rewrite the schema without it.
    #[error(
        "JSON Schema keyword `{keyword}` at `{location}` is not supported by constrained decoding"
    )]
    UnsupportedSchemaKeyword { keyword: String, location: String },
    /// The schema or grammar accepts no document at all (e.g. `false`, an empty `enum`, contradictory bounds).
    #[error("{what} accepts no output at all: {message}")]
    EmptyLanguage { what: String, message: String },
    /// The grammar could not be compiled for another reason (too large, a regex llguidance rejects). The message
    /// is llguidance's.
    #[error("cannot compile the output grammar: {0}")]
    InvalidGrammar(String),
    /// A tool definition is malformed (bad name, a `parameters` that is not an object, …).
    #[error("invalid tool `{name}`: {message}")]
    InvalidTool { name: String, message: String },
    /// Two tools in one request share a name.
    #[error("duplicate tool name `{0}`")]
    DuplicateToolName(String),
    /// `tool_choice` is malformed, names a tool that is not in `tools`, or is `required` with no tools.
    #[error("invalid tool_choice: {0}")]
    InvalidToolChoice(String),
    /// `response_format` is malformed.
    #[error("invalid response_format: {0}")]
    InvalidResponseFormat(String),
    /// A bug: an invariant broke (a built-in option set that does not deserialize, a poisoned lock).
    #[error("internal schema error: {0}")]
    Internal(String),
}

/// Results of this module.
pub type Result<T, E = SchemaError> = std::result::Result<T, E>;
