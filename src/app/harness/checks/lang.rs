//! Which language a file is written in, told from its name's extension (the checks' one notion of kind).

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Python,
    /// `.js`, `.mjs`, `.cjs`: what `node --check` reads.
    JavaScript,
    /// `.jsx`, `.ts`, `.tsx`, `.mts`, `.cts`: read for definitions, not parsed.
    JsLike,
    Json,
    Toml,
    Yaml,
    Rust,
    Other,
}

impl Lang {
    pub fn of(path: &Path) -> Lang {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "py" | "pyi" => Lang::Python,
            "js" | "mjs" | "cjs" => Lang::JavaScript,
            "jsx" | "ts" | "tsx" | "mts" | "cts" => Lang::JsLike,
            "json" => Lang::Json,
            "toml" => Lang::Toml,
            "yml" | "yaml" => Lang::Yaml,
            "rs" => Lang::Rust,
            _ => Lang::Other,
        }
    }
}
