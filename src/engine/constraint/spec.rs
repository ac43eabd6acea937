//! What a request says about the shape of its output ([`ConstraintSpec`]): its tools, the tool choice, the
//! response format and the call format; read by the grammar planner and the output assembler.

use serde::{Deserialize, Serialize};

use crate::engine::error::Result;
pub use crate::schema::{ResponseFormat, ToolChoice};
use crate::schema::{SchemaError, ToolSpec};
use crate::text::call_format::ToolCallFormat;

/// Everything a request says about the shape of its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConstraintSpec {
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    /// `false`: at most one call.
    pub parallel_tool_calls: bool,
    pub response_format: ResponseFormat,
    /// Overrides the model's tool-call format (models without a manifest, tests).
    pub format: Option<ToolCallFormat>,
    /// A think block the output may (or must) begin with before the constrained part: reasoning models think
    /// first, then call (`None`: no block).
    #[serde(default)]
    pub reasoning: Option<crate::text::reasoning::ThinkBlock>,
}

impl Default for ConstraintSpec {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            response_format: ResponseFormat::Text,
            format: None,
            reasoning: None,
        }
    }
}

impl ConstraintSpec {
    /// Checks the request: unique, valid tools; a `tool_choice` that names one of them (and `required` only with
    /// tools); an admissible `response_format` schema.
    pub fn validate(&self) -> Result<()> {
        crate::schema::check_request(&self.tools, &self.tool_choice, &self.response_format)?;
        Ok(())
    }

    /// Checks what depends on the model's tool-call format: where calls are bare JSON objects (llama3_json), a
    /// call and a JSON reply both start with `{`, so `auto` tools cannot be combined with a JSON
    /// `response_format` there.
    pub fn validate_for(&self, model_format: ToolCallFormat) -> Result<()> {
        self.validate()?;
        let format = self.format.unwrap_or(model_format);
        if format.is_bare()
            && self.response_format != ResponseFormat::Text
            && self.tool_choice == ToolChoice::Auto
            && !self.tools.is_empty()
        {
            return Err(SchemaError::InvalidResponseFormat(
                format!(
                    "with the {format} tool-call format a JSON reply and a tool call look alike; use \
                     tool_choice `none`, `required` or a named tool together with a JSON response_format"
                ),
            )
            .into());
        }
        Ok(())
    }

    /// Whether the output may hold tool calls.
    pub fn calls_possible(&self) -> bool {
        !self.tools.is_empty() && self.tool_choice != ToolChoice::None
    }
}
