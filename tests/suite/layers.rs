//! The library's layering (`../shared/DESIGN.md`): arrows between the top-level modules of `src/` point one way.
//! Every `crate::<module>` path outside comments counts as an arrow; the graph must have no cycle, the leaves
//! (`schema`, `env`) import nothing of ours, and nothing imports `server`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules of the library (`src/x.rs` or `src/x/`), without the binary's `cli`.
fn modules() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(src())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if path.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|m| !matches!(m.as_str(), "lib" | "main" | "cli"))
        .collect();
    out.sort();
    out
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            rust_files(&e.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Module → the other top-level modules its code names as `crate::<module>`.
fn arrows() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let mut graph = BTreeMap::new();
    for m in &mods {
        let mut files = Vec::new();
        let dir = src().join(m);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(src().join(format!("{m}.rs")));
        }
        let mut to = BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                let mut rest = line;
                while let Some(at) = rest.find("crate::") {
                    rest = &rest[at + "crate::".len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if &name != m && mods.contains(&name) {
                        to.insert(name);
                    }
                }
            }
        }
        graph.insert(m.clone(), to);
    }
    graph
}

/// A cycle through `node`, if the graph has one reachable from it.
fn find_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|p| p == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node.to_string());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(c) = find_cycle(graph, next, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = arrows();
    assert!(graph.len() >= 10, "modules found: {graph:?}");
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = find_cycle(&graph, m, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}\n{graph:#?}", cycle.join(" → "));
        }
    }
}

#[test]
fn leaves_import_nothing_and_nothing_imports_the_server() {
    let graph = arrows();
    for leaf in ["schema", "env"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf} must be a leaf");
    }
    for (m, to) in &graph {
        assert!(!to.contains("server"), "{m} imports server");
    }
    // The server reaches the model only through the provider boundary.
    assert!(!graph["server"].contains("engine"), "{:?}", graph["server"]);
}
