//! The library's file-level import graph, read from the source: every `use` tree and every `crate::…`,
//! `super::…`, `self::…` or `child::…` path outside comments and `#[cfg(test)]` modules is an arrow from its
//! file to the file that defines the module it names. A file that only a `#[cfg(test)] mod x;` declares (unit
//! tests beside their code, and their helpers) is not in the graph: a test may reach whatever it tests with. A
//! name re-exported with `pub use` counts as the file it comes from (a folder's `mod.rs` that re-exports is a
//! door, not a dependency). A module owns its children: its arrows into them are left out (the children's arrows
//! out are not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path inside the crate (`["engine", "kv"]`); the crate root is empty.
pub type ModPath = Vec<String>;

pub struct Graph {
    /// Module → its file, relative to `src/`.
    pub files: BTreeMap<ModPath, String>,
    /// Module → the modules it imports.
    pub edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
    /// Module → the paths of its `pub use` items, read once.
    reexports: BTreeMap<ModPath, Vec<String>>,
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            collect(&path, root, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(
                path.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

/// `engine/kv/mod.rs` → `["engine", "kv"]`, `engine/backend.rs` → `["engine", "backend"]`, `lib.rs` → `[]`.
pub fn module_of(rel: &str) -> ModPath {
    let mut parts: ModPath = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn no_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules whose files the file `rel` declares test-only (`#[cfg(test)] mod x;`, `#[path = "…"]` followed).
pub fn test_only(rel: &str, text: &str) -> Vec<ModPath> {
    let text = no_comments(text);
    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    for (at, _) in text.match_indices("#[cfg(test)]") {
        let mut item = text[at + "#[cfg(test)]".len()..].trim_start();
        let mut path = None;
        while let Some(attr) = item.strip_prefix("#[") {
            let Some(end) = attr.find(']') else { break };
            path = attr[..end]
                .strip_prefix("path = \"")
                .and_then(|p| p.strip_suffix('"'))
                .or(path);
            item = attr[end + 1..].trim_start();
        }
        let item = item
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        let Some(decl) = item.strip_prefix("mod ") else {
            continue;
        };
        let name: String = decl.chars().take_while(|&c| is_ident(c)).collect();
        if !decl[name.len()..].trim_start().starts_with(';') {
            continue;
        }
        out.push(match path {
            Some(p) if dir.is_empty() => module_of(p),
            Some(p) => module_of(&format!("{dir}/{p}")),
            None => [module_of(rel), vec![name]].concat(),
        });
    }
    out
}

/// The text with line comments and `#[cfg(test)]` modules (inline or declared) cut out.
pub fn strip(text: &str) -> String {
    let no_comments = no_comments(text);
    let mut out = String::new();
    let mut rest = no_comments.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let item_body = item
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if item_body.starts_with("mod ") || item_body.starts_with("use ") {
            let semi = item.find(';');
            let brace = item.find('{');
            match (semi, brace) {
                (Some(s), b) if b.is_none_or(|b| s < b) => rest = &item[s + 1..],
                (_, Some(b)) => {
                    let mut depth = 0usize;
                    let mut end = item.len();
                    for (i, c) in item[b..].char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = b + i + 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    rest = &item[end..];
                }
                _ => rest = "",
            }
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `a::{b, c::{d, e as f}}` → `["a::b", "a::c::d", "a::c::e as f"]`.
pub fn expand(tree: &str) -> Vec<String> {
    let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.replace(":: ", "::").replace(" ::", "::");
    let Some(open) = tree.find('{') else {
        return vec![tree.trim().to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p.trim()))
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The bodies of the `use` items of `text` (`pub_only`: only `pub use` / `pub(…) use`).
pub fn use_items(text: &str, pub_only: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("use ") {
        let start = from + at;
        from = start + 4;
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let before = text[..start].trim_end();
        let is_pub = before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("));
        if pub_only && !is_pub {
            continue;
        }
        let Some(end) = text[from..].find(';') else {
            continue;
        };
        let body = &text[from..from + end];
        // A real use tree has only path characters (the word "use" in a string does not).
        let tree_chars = |c: char| is_ident(c) || c.is_whitespace() || ":{},*".contains(c);
        if body.trim_start().starts_with(is_ident) && body.chars().all(tree_chars) {
            out.extend(expand(body));
        }
    }
    out
}

/// Every `ident::ident…` path in `text` whose first segment is in `heads`.
pub fn paths(text: &str, heads: &BTreeSet<String>) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let boundary = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if !(boundary && is_ident(chars[i])) {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut path = String::new();
        loop {
            let s = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            path.extend(&chars[s..j]);
            if j + 2 < chars.len()
                && chars[j] == ':'
                && chars[j + 1] == ':'
                && is_ident(chars[j + 2])
            {
                path.push_str("::");
                j += 2;
            } else {
                break;
            }
        }
        // `a::b::{…}` is a use tree's prefix: its branches are the arrows (`use_items`), not `a::b` itself.
        let tree_prefix = chars.get(j..j + 3) == Some(&[':', ':', '{'][..]);
        if !tree_prefix
            && path.contains("::")
            && path.split("::").next().is_some_and(|h| heads.contains(h))
        {
            out.push(path);
        }
        i = j.max(i + 1);
    }
    out
}

impl Graph {
    /// The graph of the library under `src` (the binary's `main.rs` and `cli/` are another crate), without
    /// test-only files.
    pub fn read(src: &Path) -> Graph {
        let mut rels = Vec::new();
        collect(src, src, &mut rels);
        let mut files = BTreeMap::new();
        let mut texts = BTreeMap::new();
        let mut tests = Vec::new();
        for rel in rels {
            if rel == "main.rs" || rel.starts_with("cli/") {
                continue;
            }
            let m = module_of(&rel);
            let raw = std::fs::read_to_string(src.join(&rel)).unwrap();
            tests.extend(test_only(&rel, &raw));
            texts.insert(m.clone(), strip(&raw));
            files.insert(m, rel);
        }
        let test_code = |m: &ModPath| tests.iter().any(|t| m.starts_with(t));
        files.retain(|m, _| !test_code(m));
        texts.retain(|m, _| !test_code(m));
        let reexports = texts
            .iter()
            .map(|(m, text)| (m.clone(), use_items(text, true)))
            .collect();
        let mut g = Graph {
            files,
            edges: BTreeMap::new(),
            reexports,
        };
        for (m, text) in &texts {
            let m = m.clone();
            let mut heads: BTreeSet<String> = ["crate", "super", "self"].map(String::from).into();
            heads.extend(g.children(&m));
            let mut found = use_items(text, false);
            found.extend(paths(text, &heads));
            let mut to = BTreeSet::new();
            for p in found {
                let Some(abs) = g.absolute(&m, &p) else {
                    continue;
                };
                let Some(t) = g.resolve(&abs, 0) else {
                    continue;
                };
                let inside = t.len() > m.len() && t[..m.len()] == m[..];
                if t != m && !t.is_empty() && !inside {
                    to.insert(t);
                }
            }
            g.edges.insert(m, to);
        }
        g
    }

    fn children(&self, m: &[String]) -> BTreeSet<String> {
        self.files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k[..m.len()] == *m)
            .map(|k| k[m.len()].clone())
            .collect()
    }

    /// `path` as written in module `m`, made absolute (`None`: not a path into this crate).
    fn absolute(&self, m: &[String], path: &str) -> Option<ModPath> {
        let path = path.split(" as ").next().unwrap_or(path).trim();
        let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: ModPath = m.to_vec();
        match *segs.first()? {
            "crate" => {
                base.clear();
                segs.remove(0);
            }
            "self" => {
                segs.remove(0);
            }
            "super" => {
                while segs.first() == Some(&"super") {
                    base.pop();
                    segs.remove(0);
                }
            }
            head if self.children(m).contains(head) => {}
            _ => return None,
        }
        base.extend(segs.iter().map(|s| s.to_string()));
        Some(base)
    }

    /// The module a path ends in: its longest prefix that is a file, followed through `pub use` re-exports.
    fn resolve(&self, segs: &[String], depth: usize) -> Option<ModPath> {
        let k = (0..=segs.len())
            .rev()
            .find(|&k| self.files.contains_key(&segs[..k]))?;
        let m = segs[..k].to_vec();
        if k < segs.len() && depth < 8 {
            for re in &self.reexports[&m] {
                let (path, alias) = match re.split_once(" as ") {
                    Some((p, a)) => (p.trim().to_string(), a.trim().to_string()),
                    None => (re.clone(), re.rsplit("::").next().unwrap_or("").to_string()),
                };
                if alias != segs[k] {
                    continue;
                }
                let Some(mut target) = self.absolute(&m, &path) else {
                    continue;
                };
                if target == segs[..=k] {
                    continue;
                }
                target.extend(segs[k + 1..].iter().cloned());
                if let Some(t) = self.resolve(&target, depth + 1) {
                    return Some(t);
                }
            }
        }
        Some(m)
    }

    /// The cycles (strongly connected components of more than one file), as file names.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        // Tarjan's algorithm (recursive: the graph has a few hundred nodes).
        struct State<'a> {
            g: &'a Graph,
            index: BTreeMap<ModPath, usize>,
            low: BTreeMap<ModPath, usize>,
            stack: Vec<ModPath>,
            on: BTreeSet<ModPath>,
            out: Vec<Vec<String>>,
        }
        fn visit(s: &mut State, v: &ModPath) {
            let i = s.index.len();
            s.index.insert(v.clone(), i);
            s.low.insert(v.clone(), i);
            s.stack.push(v.clone());
            s.on.insert(v.clone());
            for w in s.g.edges[v].clone() {
                if !s.index.contains_key(&w) {
                    visit(s, &w);
                    let lw = s.low[&w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if s.on.contains(&w) {
                    let iw = s.index[&w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if s.low[v] == s.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on.remove(&w);
                    let done = &w == v;
                    comp.push(s.g.files[&w].clone());
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    s.out.push(comp);
                }
            }
        }
        let mut s = State {
            g: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.files.keys() {
            if !s.index.contains_key(v) {
                visit(&mut s, v);
            }
        }
        s.out
    }
}
