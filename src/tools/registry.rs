//! `ToolRegistry`: the tools an agent offers, by name, in registration order (the order the model sees them).
//! Duplicate names are rejected; `builtin` builds the default coding set from names.

use std::collections::HashMap;
use std::sync::Arc;

use super::bash::BashTool;
use super::edit::EditTool;
use super::find::FindTool;
use super::grep::GrepTool;
use super::ls::LsTool;
use super::read::ReadTool;
use super::tool::Tool;
use super::write::WriteTool;
use crate::schema::ToolSpec;

/// The built-in tools, in the order `ToolRegistry::coding` registers them.
pub const BUILTIN_TOOL_NAMES: [&str; 7] = ["read", "write", "edit", "bash", "ls", "find", "grep"];

/// Why a registry could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two tools share a name; rename one or leave it out.
    #[error("a tool named '{0}' is already registered")]
    Duplicate(String),
    /// A configured name is not a built-in tool; fix the configuration.
    #[error("unknown tool '{name}' (known tools: {})", .known.join(", "))]
    Unknown { name: String, known: Vec<String> },
}

/// A built-in tool by name.
pub fn builtin_tool(name: &str) -> Option<Arc<dyn Tool>> {
    let tool: Arc<dyn Tool> = match name {
        "read" => Arc::new(ReadTool::new()),
        "write" => Arc::new(WriteTool::new()),
        "edit" => Arc::new(EditTool::new()),
        "bash" => Arc::new(BashTool::new()),
        "ls" => Arc::new(LsTool::new()),
        "find" => Arc::new(FindTool::new()),
        "grep" => Arc::new(GrepTool::new()),
        _ => return None,
    };
    Some(tool)
}

/// Name → tool, keeping registration order.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in tools named in `names`, in that order.
    pub fn builtin<S: AsRef<str>>(names: &[S]) -> Result<Self, RegistryError> {
        let mut registry = Self::new();
        for name in names {
            let name = name.as_ref();
            let tool = builtin_tool(name).ok_or_else(|| RegistryError::Unknown {
                name: name.to_string(),
                known: BUILTIN_TOOL_NAMES.iter().map(|n| n.to_string()).collect(),
            })?;
            registry.register(tool)?;
        }
        Ok(registry)
    }

    /// The default coding set: read, write, edit, bash, ls, find, grep.
    pub fn coding() -> Self {
        let mut registry = Self::new();
        for name in BUILTIN_TOOL_NAMES {
            if let Some(tool) = builtin_tool(name) {
                // The built-in names are distinct, so this cannot fail.
                let _ = registry.register(tool);
            }
        }
        registry
    }

    /// Adds a tool; a second tool with the same name is rejected.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.by_name.insert(name, self.tools.len());
        self.tools.push(tool);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).and_then(|&i| self.tools.get(i))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.spec().name.as_str()).collect()
    }

    /// The specs, in registration order, as the model is shown them.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec().clone()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
