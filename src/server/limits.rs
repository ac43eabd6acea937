//! Bounds on what one request may ask for, checked before anything is queued or compiled: message count, tool
//! count and schema size, stop strings (count and length), prompts per completions batch. A request beyond a
//! bound is an OpenAI-shaped 400 naming the parameter and the limit, so a few pathological requests cannot make
//! the server spend its workers on them.

use serde_json::Value;

use super::error::ApiError;

/// The bounds (`ServerOptions::limits`). The defaults are generous for real clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLimits {
    /// Messages in one chat request.
    pub max_messages: usize,
    /// Tools in one request.
    pub max_tools: usize,
    /// Bytes of one tool's JSON definition (name, description, parameters).
    pub max_tool_bytes: usize,
    /// Bytes of all tool definitions together.
    pub max_tools_bytes: usize,
    /// Stop strings in one request.
    pub max_stop: usize,
    /// Characters of one stop string.
    pub max_stop_chars: usize,
    /// Prompts in one `/v1/completions` batch.
    pub max_prompts: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_messages: 4_096,
            max_tools: 128,
            max_tool_bytes: 64 * 1024,
            max_tools_bytes: 512 * 1024,
            max_stop: 16,
            max_stop_chars: 256,
            max_prompts: 64,
        }
    }
}

fn over(param: &str, what: &str, limit: usize, got: usize) -> ApiError {
    ApiError::invalid_param(param, format!("{what}: at most {limit} allowed, got {got}"))
        .with_code("limit_exceeded")
}

impl RequestLimits {
    pub fn check_messages(&self, n: usize) -> Result<(), ApiError> {
        if n > self.max_messages {
            return Err(over("messages", "too many messages", self.max_messages, n));
        }
        Ok(())
    }

    /// The raw `tools` array: count, each definition's size, the total size.
    pub fn check_tools(&self, tools: &[Value]) -> Result<(), ApiError> {
        if tools.len() > self.max_tools {
            return Err(over("tools", "too many tools", self.max_tools, tools.len()));
        }
        let mut total = 0;
        for (i, t) in tools.iter().enumerate() {
            let bytes = t.to_string().len();
            if bytes > self.max_tool_bytes {
                return Err(over(
                    &format!("tools[{i}]"),
                    "tool definition too large (bytes)",
                    self.max_tool_bytes,
                    bytes,
                ));
            }
            total += bytes;
        }
        if total > self.max_tools_bytes {
            return Err(over(
                "tools",
                "tool definitions too large in total (bytes)",
                self.max_tools_bytes,
                total,
            ));
        }
        Ok(())
    }

    /// Stop strings: count and each one's length (empty ones are refused elsewhere).
    pub fn check_stop(&self, stop: &[String]) -> Result<(), ApiError> {
        if stop.len() > self.max_stop {
            return Err(over(
                "stop",
                "too many stop sequences",
                self.max_stop,
                stop.len(),
            ));
        }
        if let Some(long) = stop.iter().map(|s| s.chars().count()).max() {
            if long > self.max_stop_chars {
                return Err(over(
                    "stop",
                    "stop sequence too long (characters)",
                    self.max_stop_chars,
                    long,
                ));
            }
        }
        Ok(())
    }

    pub fn check_prompts(&self, n: usize) -> Result<(), ApiError> {
        if n > self.max_prompts {
            return Err(over(
                "prompt",
                "too many prompts in one batch",
                self.max_prompts,
                n,
            ));
        }
        Ok(())
    }
}
