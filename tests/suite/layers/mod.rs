//! The library's layering (`../shared/DESIGN.md`): arrows between the top-level modules of `src/` point one way
//! (every `crate::<module>` path outside comments counts as an arrow, in test code too; the leaves `schema` and
//! `env` import nothing of ours, and nothing imports `server`); no two files import each other, directly or around a
//! loop (`graph.rs`); and inside the engine the folders point down as `src/engine/mod.rs` draws them. That the
//! rest of the crate, the tests and the benches reach the engine only through the names `engine/mod.rs`
//! re-exports is the compiler's to check: the engine's folders are private.

mod file_access;
mod graph;
mod test_tree;

use std::collections::{BTreeMap, BTreeSet};

use graph::Graph;
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
    // The text layer (tokenizer, template, metadata) builds without the engine: a remote model counts its
    // tokens with it.
    let text: BTreeSet<String> = ["schema".to_string()].into();
    assert_eq!(graph["text"], text, "text may import only schema");
    // Finding and fetching model files needs no engine either: the remote provider resolves names with it (a
    // manifest's tool-call format is checked against the text layer's).
    let below: BTreeSet<String> = ["env".to_string(), "text".to_string()].into();
    assert_eq!(
        graph["model_files"], below,
        "model_files may import only env and text"
    );
}

#[test]
fn no_two_files_import_each_other() {
    let g = Graph::read(&src());
    assert!(g.files.len() > 100, "{} files", g.files.len());
    // The reader sees real arrows: the engine thread imports the scheduler, a tool its trait.
    let m = |p: &str| graph::module_of(p);
    assert!(g.edges[&m("engine/runtime/actor.rs")].contains(&m("engine/runtime/scheduler.rs")));
    assert!(g.edges[&m("tools/read.rs")].contains(&m("tools/tool.rs")));
    let cycles = g.cycles();
    assert!(
        cycles.is_empty(),
        "files that import each other: {cycles:#?}"
    );
}

/// The engine's groups (a folder, or a file directly under `src/engine/`) and the groups each may import.
/// `None`: anything below it. Nothing imports `runtime` or `microbench` (the benches' re-exports).
const ENGINE_ARROWS: &[(&str, Option<&[&str]>)] = &[
    ("runtime", None),
    ("microbench", None),
    ("tool_calls", Some(&["constraint", "request", "error"])),
    (
        "request",
        Some(&[
            "constraint",
            "sampler",
            "speculative",
            "tool_calls",
            "error",
        ]),
    ),
    ("constraint", Some(&["sampler", "error"])),
    (
        "parity",
        Some(&["backend", "kv", "sampler", "device", "gguf", "error"]),
    ),
    (
        "decoder_embed",
        Some(&["backend", "kv", "encoder", "error"]),
    ),
    (
        "backend",
        Some(&["cpu", "candle", "arch", "kv", "device", "gguf", "error"]),
    ),
    ("cpu", Some(&["arch", "kv", "device", "gguf", "error"])),
    ("candle", Some(&["arch", "kv", "device", "gguf", "error"])),
    ("files", Some(&["arch", "gguf", "error"])),
    ("encoder", Some(&["device", "error"])),
    ("arch", Some(&["gguf", "device", "error"])),
    ("kv", Some(&["device", "error"])),
    ("speculative", Some(&["error"])),
    ("sampler", Some(&["error"])),
    ("gguf", Some(&["error"])),
    ("device", Some(&["error"])),
    ("error", Some(&[])),
];

#[test]
fn engine_folders_point_down() {
    let g = Graph::read(&src());
    let group = |m: &[String]| -> Option<String> {
        (m.len() >= 2 && m[0] == "engine").then(|| m[1].clone())
    };
    let mut groups = BTreeSet::new();
    let mut wrong = Vec::new();
    for (from, to) in &g.edges {
        let Some(gf) = group(from) else { continue };
        groups.insert(gf.clone());
        let Some((_, allowed)) = ENGINE_ARROWS.iter().find(|(name, _)| *name == gf) else {
            wrong.push(format!(
                "{}: a group this test does not know",
                g.files[from]
            ));
            continue;
        };
        for t in to {
            let Some(gt) = group(t) else { continue };
            if gt == gf {
                continue;
            }
            let top = matches!(gt.as_str(), "runtime" | "microbench");
            if top || allowed.is_some_and(|a| !a.contains(&gt.as_str())) {
                wrong.push(format!("{} → {}", g.files[from], g.files[t]));
            }
        }
    }
    assert!(groups.len() >= 15, "{groups:?}");
    assert!(
        wrong.is_empty(),
        "arrows that point up or sideways in the engine: {wrong:#?}"
    );
}

/// Writes a small crate's `src/` under a temp dir.
fn mini_crate(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_reader_follows_re_exports_and_skips_tests_and_comments() {
    let dir = mini_crate(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        // `a` is a door: its re-export of `b::leaf::Thing` is not an arrow of its own.
        ("a/mod.rs", "pub mod inner;\npub use crate::b::leaf::Thing;\n"),
        ("a/inner.rs", "use super::super::b::leaf::Other;\n"),
        ("b/mod.rs", "pub mod leaf;\npub mod user;\n"),
        ("b/leaf.rs", "pub struct Thing;\npub struct Other;\n// use crate::b::user::X;\n#[cfg(test)]\nmod tests {\n    use crate::b::user::X;\n}\n#[cfg(test)]\nmod leaf_tests;\n"),
        ("b/leaf/leaf_tests.rs", "use crate::b::user::X;\n"),
        ("b/user.rs", "use crate::a::{Thing, inner};\npub struct X;\n#[cfg(test)]\n#[path = \"user_tests.rs\"]\nmod tests;\n"),
        ("b/user_tests.rs", "use crate::b::leaf::Thing;\n"),
    ]);
    let g = Graph::read(dir.path());
    let m = |p: &str| graph::module_of(p);
    // Through the door to the file that defines the name; a module into its own child is no arrow.
    assert_eq!(
        g.edges[&m("b/user.rs")],
        [m("a/inner.rs"), m("b/leaf.rs")].into_iter().collect()
    );
    assert_eq!(
        g.edges[&m("a/inner.rs")],
        [m("b/leaf.rs")].into_iter().collect()
    );
    assert!(g.edges[&m("a/mod.rs")].contains(&m("b/leaf.rs")));
    // The comment and the test module name `user`; neither is an arrow, so there is no cycle.
    assert!(
        g.edges[&m("b/leaf.rs")].is_empty(),
        "{:?}",
        g.edges[&m("b/leaf.rs")]
    );
    assert!(g.cycles().is_empty());
    // Files only a `#[cfg(test)] mod` declares (`#[path]` followed) are not in the graph.
    for test_file in ["b/leaf/leaf_tests.rs", "b/user_tests.rs"] {
        assert!(!g.files.contains_key(&m(test_file)), "{test_file}");
    }
    assert!(g.files.contains_key(&m("b/user.rs")));
}

#[test]
fn the_reader_finds_a_cycle_between_two_files() {
    let dir = mini_crate(&[
        ("lib.rs", "mod x;\nmod y;\nmod z;\n"),
        ("x.rs", "pub fn f() { crate::y::g() }\n"),
        ("y.rs", "use crate::z::h;\npub fn g() { h() }\n"),
        ("z.rs", "pub fn h() { super::x::f() }\n"),
    ]);
    let cycles = Graph::read(dir.path()).cycles();
    assert_eq!(
        cycles,
        vec![vec!["x.rs".to_string(), "y.rs".into(), "z.rs".into()]]
    );
}
