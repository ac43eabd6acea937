//! Chat templates: the Jinja template a GGUF carries in `tokenizer.chat_template`, compiled once with minijinja
//! and rendered like Hugging Face transformers renders it (`apply_chat_template`).
//!
//! Parity with transformers' environment: `trim_blocks` + `lstrip_blocks`, no kept trailing newline (Jinja2's
//! default, which transformers does not change), loop controls, Python string/dict methods (minijinja-contrib's
//! pycompat), the globals `raise_exception` and `strftime_now`, a `tojson` filter that is Python's `json.dumps`
//! with `ensure_ascii=False` (no HTML escaping, `", "` / `": "` separators, insertion order), and Python's
//! spelling of `None`, `True` and `False` when a value is printed. The variables are `messages`, `tools`
//! (`none` when there are no tools, as transformers passes `tools=None`), `add_generation_prompt`, `bos_token`,
//! `eos_token`, and `enable_thinking` when a request sets the thinking level.
//!
//! A template is code from whoever made the model file, so every render runs within limits: fuel (instructions),
//! a recursion depth, an output size and a memory budget scaled to the input, and a time
//! ([`super::render_budget`]). A render over one fails with [`TextError::Template`] saying which; a template
//! that went over memory or time is not run again (its render thread is left behind), and the server keeps
//! serving.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State};

use crate::text::error::{Result, TextError};
use crate::text::gguf_meta::Metadata;
use crate::text::render_budget::{self, Exceeded};
use crate::text::tokenizer::Tokenizer;

/// Instructions one render may run (real templates use a few thousand per message).
const FUEL: u64 = 50_000_000;
/// How deep macros and includes may nest.
const RECURSION: usize = 64;
/// The longest template source accepted.
const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The output may be this much larger than the input it renders, plus [`OUTPUT_BASE`].
const OUTPUT_PER_INPUT: usize = 4;
const OUTPUT_BASE: usize = 1 << 20;
/// The memory one render may hold: [`MEMORY_BASE`] plus this many times its input.
const MEMORY_PER_INPUT: usize = 16;
const MEMORY_BASE: usize = 128 << 20;
/// The longest a render may take.
const RENDER_TIME: Duration = Duration::from_secs(20);

/// The name the template is stored under; it appears in error messages (`… (in chat_template:3)`).
const TEMPLATE_NAME: &str = "chat_template";

/// The template used when a GGUF has none: plain ChatML, as llama.cpp's built-in `chatml` format renders it.
pub const CHATML_TEMPLATE: &str =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
     message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ \
     '<|im_start|>assistant\\n' }}{% endif %}";

/// A compiled chat template. Compile once with [`ChatTemplate::new`] or [`ChatTemplate::from_gguf`], then
/// [`render`](ChatTemplate::render) any number of times, from any thread.
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: String,
    bos_token: String,
    eos_token: String,
    supports_tools: bool,
    /// Set when a render went over its memory or time: the template is not run again.
    refused: Arc<AtomicBool>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("supports_tools", &self.supports_tools)
            .field("source_len", &self.source.len())
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`. A syntax error is an [`TextError::Template`] naming the line.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(TextError::Template(format!(
                "the chat template is {} bytes; at most {MAX_SOURCE_BYTES} are accepted",
                source.len()
            )));
        }
        let mut env = hf_environment()?;
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(template_error)?;
        let supports_tools = env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?
            .undeclared_variables(false)
            .contains("tools");
        Ok(Self {
            env: Arc::new(env),
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            supports_tools,
            refused: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The GGUF's `tokenizer.chat_template` (ChatML when it has none), with the BOS/EOS token texts looked up in
    /// `tokenizer.ggml.tokens`. Reads the metadata directly, so it does not depend on the tokenizer's state.
    pub fn from_gguf(gguf: &impl Metadata, _tok: &Tokenizer) -> Result<Self> {
        Self::from_gguf_metadata(gguf)
    }

    /// [`from_gguf`](Self::from_gguf) without a tokenizer: everything it needs is in the GGUF's metadata.
    pub fn from_gguf_metadata(gguf: &impl Metadata) -> Result<Self> {
        let source = if gguf.has("tokenizer.chat_template") {
            gguf.get_str("tokenizer.chat_template")?
        } else {
            tracing::warn!("GGUF has no tokenizer.chat_template; falling back to ChatML");
            CHATML_TEMPLATE
        };
        Self::from_gguf_with(gguf, source)
    }

    /// `source` (a template given by the user or a manifest) with the GGUF's BOS/EOS token texts.
    pub fn from_gguf_with(gguf: &impl Metadata, source: &str) -> Result<Self> {
        let tokens = gguf.get_str_array("tokenizer.ggml.tokens")?;
        let bos = special_token_text(gguf, &tokens, "tokenizer.ggml.bos_token_id")?;
        let eos = special_token_text(gguf, &tokens, "tokenizer.ggml.eos_token_id")?;
        Self::new(source, bos, eos)
    }

    /// Renders a conversation. `messages` are Hugging Face-style dicts passed through as given; `tools`
    /// (OpenAI-style function dicts) becomes the `tools` variable when present and non-empty, `none` otherwise;
    /// `enable_thinking` (Qwen3's and DeepSeek's switch) is defined only when given.
    /// A failing template (including `raise_exception`) is an [`TextError::Template`] with its message.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        if self.refused.load(Ordering::Relaxed) {
            return Err(TextError::Template(
                "this chat template went over its memory or time limit before and is not run again \
                 (give another with --chat-template)"
                    .into(),
            ));
        }
        let tools = match tools {
            Some(tools) if !tools.is_empty() => Some(tools.to_vec()),
            _ => None,
        };
        let input = json_len(messages) + tools.as_deref().map_or(0, json_len);
        let output_cap = OUTPUT_BASE + OUTPUT_PER_INPUT * input;
        let memory = MEMORY_BASE + MEMORY_PER_INPUT * input;
        let env = self.env.clone();
        let messages = messages.to_vec();
        let (bos, eos) = (self.bos_token.clone(), self.eos_token.clone());
        let rendered = render_budget::run_within(memory, RENDER_TIME, move || {
            let tools = match &tools {
                Some(tools) => Value::from(Serde(tools)),
                None => Value::from(()),
            };
            let base = minijinja::context! {
                messages => Value::from(Serde(&messages)),
                tools => tools,
                add_generation_prompt => add_generation_prompt,
                bos_token => bos.as_str(),
                eos_token => eos.as_str(),
            };
            // `enable_thinking` stays undefined unless asked for, so a template's own default holds.
            let ctx = match enable_thinking {
                Some(on) => minijinja::context! { enable_thinking => on, ..base },
                None => base,
            };
            render_bounded(&env, ctx, output_cap)
        });
        match rendered {
            Ok(out) => out,
            Err(why) => {
                if why != Exceeded::Failed {
                    self.refused.store(true, Ordering::Relaxed);
                }
                Err(TextError::Template(match why {
                    Exceeded::Memory => format!(
                        "the chat template went over its memory limit ({} MiB for this input); it is not \
                         run again",
                        memory >> 20
                    ),
                    Exceeded::Time => format!(
                        "the chat template ran past {} s; it is not run again",
                        RENDER_TIME.as_secs()
                    ),
                    Exceeded::Failed => "the chat template's render thread failed".into(),
                }))
            }
        }
    }

    /// Whether the template source itself reads the `tools` variable (so tool definitions reach the prompt).
    pub fn supports_tools(&self) -> bool {
        self.supports_tools
    }

    /// The template source as compiled.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS token text given to the template.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The EOS token text given to the template.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// The text of the token whose id is stored under `id_key`; empty when the GGUF has no such id.
fn special_token_text<'a>(
    gguf: &impl Metadata,
    tokens: &[&'a str],
    id_key: &str,
) -> Result<&'a str> {
    if !gguf.has(id_key) {
        return Ok("");
    }
    let id = gguf.get_u32(id_key)?;
    tokens.get(id as usize).copied().ok_or_else(|| {
        TextError::Template(format!(
            "{id_key} = {id} is outside tokenizer.ggml.tokens ({} tokens)",
            tokens.len()
        ))
    })
}

/// The length of `values` as JSON, counted without building the text.
fn json_len(values: &[serde_json::Value]) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, values);
    count.0
}

/// Renders the chat template of `env` into a buffer of at most `cap` bytes.
fn render_bounded(env: &Environment<'static>, ctx: Value, cap: usize) -> Result<String> {
    let mut out = CappedBuffer {
        bytes: Vec::new(),
        cap,
        over: false,
    };
    let rendered = env
        .get_template(TEMPLATE_NAME)
        .and_then(|t| t.render_captured_to(ctx, &mut out).map(|_| ()));
    if out.over {
        return Err(TextError::Template(format!(
            "the chat template's output went over {cap} bytes for this input"
        )));
    }
    rendered.map_err(template_error)?;
    String::from_utf8(out.bytes)
        .map_err(|_| TextError::Template("the chat template wrote invalid UTF-8".into()))
}

/// A byte buffer that refuses to grow past `cap`.
struct CappedBuffer {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for &mut CappedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An environment configured like transformers' `ImmutableSandboxedEnvironment` for chat templates.
fn hf_environment() -> Result<Environment<'static>> {
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        // Jinja2's default, left unchanged by transformers: one trailing newline of the source is dropped.
        .keep_trailing_newline(false)
        .build()
        .map_err(template_error)?;
    let mut env = Environment::new();
    env.set_syntax(syntax);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_test("iterable", is_iterable);
    Ok(env)
}

/// Jinja2's `iterable` test: strings, lists and mappings are; `None`, undefined, numbers and booleans are not
/// (minijinja's own counts `none` as an empty iterable, so `tools is iterable and tools | length > 0` failed
/// on Qwen3-Coder's template with no tools).
fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
    )
}

/// Prints values as Jinja2 (Python's `str`) does for the scalars where minijinja differs: `None`, `True`,
/// `False`. Everything else goes through minijinja's default formatter (no escaping is configured).
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let python = match value.kind() {
        ValueKind::None => Some("None"),
        ValueKind::Bool if value.is_true() => Some("True"),
        ValueKind::Bool => Some("False"),
        _ => None,
    };
    match python {
        Some(text) => out.write_str(text).map_err(Error::from),
        None => minijinja::escape_formatter(out, state, value),
    }
}

/// `raise_exception(message)`: fails the render with `message`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the local time formatted with a C `strftime` format.
fn strftime_now(format: &str) -> Result<String, Error> {
    let mut out = String::new();
    // chrono reports an invalid format item as a fmt::Error when displayed.
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `tojson`, as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, every option available as a keyword argument. The result is not HTML-escaped.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            // Python: an integer indent is that many spaces; a negative one means none.
            None => " ".repeat(usize::try_from(v.as_i64().unwrap_or(0).max(0)).unwrap_or(0)),
        }),
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => (separator(&v, 0)?, separator(&v, 1)?),
        // Python's defaults: `", "` without indent, `","` with it (the newline follows).
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value).map_err(|e| {
        Error::new(
            ErrorKind::BadSerialization,
            format!("tojson: cannot serialize: {e}"),
        )
    })?;
    let dumper = PyJsonDumper {
        ensure_ascii,
        sort_keys,
        indent,
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    dumper.write(&mut out, &json, 0);
    Ok(Value::from_safe_string(out))
}

/// Item `index` of a `separators=(item, key)` pair, which must be a string.
fn separator(pair: &Value, index: usize) -> Result<String, Error> {
    match pair.get_item_by_index(index)?.as_str() {
        Some(s) => Ok(s.to_owned()),
        None => Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: separators must be a pair of strings",
        )),
    }
}

/// Python's `json.dumps` output format over a JSON value.
struct PyJsonDumper {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
}

impl PyJsonDumper {
    fn write(&self, out: &mut String, value: &serde_json::Value, depth: usize) {
        use serde_json::Value as J;
        match value {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Number(n) => match n.as_f64() {
                Some(f) if n.is_f64() => out.push_str(&python_float_repr(f)),
                _ => out.push_str(&n.to_string()),
            },
            J::String(s) => self.write_str(out, s),
            J::Array(items) if items.is_empty() => out.push_str("[]"),
            J::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.item_prefix(out, i == 0, depth + 1);
                    self.write(out, item, depth + 1);
                }
                self.close(out, ']', depth);
            }
            J::Object(map) if map.is_empty() => out.push_str("{}"),
            J::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.item_prefix(out, i == 0, depth + 1);
                    self.write_str(out, key);
                    out.push_str(&self.key_sep);
                    self.write(out, item, depth + 1);
                }
                self.close(out, '}', depth);
            }
        }
    }

    fn item_prefix(&self, out: &mut String, first: bool, depth: usize) {
        if !first {
            out.push_str(&self.item_sep);
        }
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
    }

    fn close(&self, out: &mut String, bracket: char, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
        out.push(bracket);
    }

    /// A JSON string literal escaped as Python's encoder does (`\uXXXX` in lowercase hex).
    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !(' '..='~').contains(&c)) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        // Writing to a String cannot fail.
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A float as Python's `repr` writes it: shortest round-trip digits, positional for exponents in
/// `-4..16` (always with a fractional part), otherwise `1e+16` / `1.5e-05` style.
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let mut positional = format!("{f}");
        if !positional.contains('.') {
            positional.push_str(".0");
        }
        positional
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    }
}

/// A minijinja error as an [`TextError::Template`]: kind, detail, `(in chat_template:LINE)` and any cause.
fn template_error(err: Error) -> TextError {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        let _ = write!(message, ": {cause}");
        source = cause.source();
    }
    TextError::Template(message)
}

#[cfg(test)]
mod tests {
    use crate::text::template::python_float_repr;

    #[test]
    fn floats_print_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789.0, "123456789.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.25e300, "1.25e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f}");
        }
    }
}
