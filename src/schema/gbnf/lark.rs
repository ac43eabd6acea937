//! The translation's rules and lexemes as Lark text: names made valid and unique, terminals for regular rules.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use super::{collect_refs, Class, Node, RExpr, Set, Translator};

impl Translator<'_> {
    /// The Lark grammar: `start: root`, the rules (root first), the lexemes given names, the regular rules.
    pub(super) fn emit(&self) -> String {
        let mut names = Names {
            used: BTreeSet::from(["start".to_string()]),
            rules: HashMap::new(),
        };
        let mut terminals = Set::new();
        for body in self.rules.values() {
            self.terminal_refs(body, &mut terminals);
        }
        let root = self.g.root;
        let order: Vec<usize> = std::iter::once(root)
            .chain(self.rules.keys().copied().filter(|&r| r != root))
            .collect();
        for &r in &order {
            names.add(r, false, sanitize(&self.g.names[r], false));
        }
        let mut out = format!("start: {}\n", names.get(root, false));
        for &r in &terminals {
            names.add(r, true, sanitize(&self.g.names[r], true));
        }
        let mut defs = vec![];
        for &r in &order {
            let name = names.get(r, false);
            let mut em = Emit {
                t: self,
                names: &mut names,
                base: name.to_uppercase(),
                count: 0,
                defs: &mut defs,
            };
            let body = self
                .rules
                .get(&r)
                .map_or_else(String::new, |e| em.rule_text(e, IN_ALT));
            let _ = writeln!(out, "{name}: {body}");
        }
        for def in defs {
            let _ = writeln!(out, "{def}");
        }
        for &r in &terminals {
            let mut em = Emit {
                t: self,
                names: &mut names,
                base: String::new(),
                count: 0,
                defs: &mut vec![],
            };
            let body = em.term_text(&self.g.bodies[r], IN_ALT);
            let _ = writeln!(out, "{}: {body}", names.get(r, true));
        }
        out
    }

    /// The regular rules the lexemes of `e` refer to, transitively.
    fn terminal_refs(&self, e: &RExpr, out: &mut Set) {
        match e {
            RExpr::Lex(l) => {
                let mut todo = Set::new();
                collect_refs(&self.lexemes[*l].0, &mut todo);
                while let Some(r) = todo.pop_first() {
                    if out.insert(r) {
                        collect_refs(&self.g.bodies[r], &mut todo);
                    }
                }
            }
            RExpr::Rule(_) => {}
            RExpr::Seq(v) | RExpr::Alt(v) => v.iter().for_each(|x| self.terminal_refs(x, out)),
            RExpr::Rep(x, _, _) => self.terminal_refs(x, out),
        }
    }
}

pub(super) fn class_regex(class: &Class) -> String {
    if class.negated && class.ranges.is_empty() {
        return "(?s:.)".into();
    }
    let show = |cp: u32| match char::from_u32(cp) {
        Some(c) if c.is_ascii_alphanumeric() => c.to_string(),
        _ => format!("\\x{{{cp:X}}}"),
    };
    let mut rx = String::from(if class.negated { "[^" } else { "[" });
    for &(lo, hi) in &class.ranges {
        rx.push_str(&show(lo));
        if hi != lo {
            rx.push('-');
            rx.push_str(&show(hi));
        }
    }
    rx.push(']');
    rx
}

/// A Lark string literal (a JSON string without raw control characters or DEL).
fn lark_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || c == '\x7f' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A GBNF rule name as a Lark rule (`[a-z][a-z0-9_]*`) or terminal (`[A-Z][A-Z0-9_]*`) name.
fn sanitize(name: &str, terminal: bool) -> String {
    let name = name.replace('-', "_");
    let name = if terminal {
        name.to_ascii_uppercase()
    } else {
        name.to_ascii_lowercase()
    };
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name
    } else {
        format!("{}{name}", if terminal { "R" } else { "r" })
    }
}

/// Lark names in use, and the names of GBNF rules as rules (`false`) or terminals (`true`).
struct Names {
    used: BTreeSet<String>,
    rules: HashMap<(usize, bool), String>,
}

impl Names {
    fn fresh(&mut self, base: String) -> String {
        let mut name = base.clone();
        let mut k = 1;
        while !self.used.insert(name.clone()) {
            k += 1;
            name = format!("{base}_{k}");
        }
        name
    }

    /// Names GBNF rule `rule` as a Lark rule, or as a terminal.
    fn add(&mut self, rule: usize, terminal: bool, base: String) {
        let name = self.fresh(base);
        self.rules.insert((rule, terminal), name);
    }

    /// The Lark name of a rule (never missing: every rule emitted or referred to was named first).
    fn get(&self, rule: usize, terminal: bool) -> String {
        self.rules
            .get(&(rule, terminal))
            .cloned()
            .unwrap_or_default()
    }
}

struct Emit<'a, 'g> {
    t: &'a Translator<'g>,
    names: &'a mut Names,
    base: String,
    count: usize,
    defs: &'a mut Vec<String>,
}

/// Precedence contexts of an expression: inside alternatives, a sequence, or an operand of a repetition.
const IN_ALT: u8 = 0;
const IN_SEQ: u8 = 1;
const IN_REP: u8 = 2;

fn join(parts: Vec<String>, sep: &str, parens: bool) -> String {
    match parts.len() {
        0 => "\"\"".into(),
        1 => parts.concat(),
        _ if parens => format!("({})", parts.join(sep)),
        _ => parts.join(sep),
    }
}

fn repeat(inner: String, min: u32, max: Option<u32>, ctx: u8) -> String {
    let text = match (min, max) {
        (_, Some(0)) => return "\"\"".into(),
        (1, Some(1)) => return inner,
        (0, None) => format!("{inner}*"),
        (1, None) => format!("{inner}+"),
        (0, Some(1)) => format!("{inner}?"),
        (min, Some(max)) if min == max => format!("{inner}{{{min}}}"),
        (min, Some(max)) => format!("{inner}{{{min},{max}}}"),
        (min, None) => format!("{inner}{{{min},}}"),
    };
    if ctx == IN_REP {
        format!("({text})")
    } else {
        text
    }
}

impl Emit<'_, '_> {
    fn rule_text(&mut self, e: &RExpr, ctx: u8) -> String {
        match e {
            RExpr::Lex(l) => self.lexeme_text(*l),
            RExpr::Rule(r) => self.names.get(*r, false),
            RExpr::Seq(v) => {
                let v: Vec<&RExpr> = v
                    .iter()
                    .filter(|x| !matches!(x, RExpr::Seq(s) if s.is_empty()))
                    .collect();
                if v.len() == 1 {
                    return self.rule_text(v[0], ctx);
                }
                let parts = v.into_iter().map(|x| self.rule_text(x, IN_SEQ)).collect();
                join(parts, " ", ctx > IN_SEQ)
            }
            RExpr::Alt(v) if v.len() == 1 => self.rule_text(&v[0], ctx),
            RExpr::Alt(v) => {
                let parts = v.iter().map(|x| self.rule_text(x, IN_ALT)).collect();
                join(parts, " | ", ctx > IN_ALT)
            }
            RExpr::Rep(x, min, max) => {
                let inner = self.rule_text(x, IN_REP);
                repeat(inner, *min, *max, ctx)
            }
        }
    }

    fn lexeme_text(&mut self, l: usize) -> String {
        let node = &self.t.lexemes[l].0;
        match node {
            Node::Lit(_) | Node::Class(_) | Node::Ref(_) => self.term_text(node, IN_SEQ),
            _ => {
                self.count += 1;
                let name = self.names.fresh(format!("{}_{}", self.base, self.count));
                let def = format!("{name}: {}", self.term_text(node, IN_ALT));
                self.defs.push(def);
                name
            }
        }
    }

    fn term_text(&mut self, node: &Node, ctx: u8) -> String {
        match node {
            Node::Lit(s) => lark_str(s),
            Node::Class(c) => format!("/{}/", class_regex(c)),
            Node::Ref(r) => self.names.get(*r, true),
            Node::NonEmpty(x) => format!("({} & /(?s:.)+/)", self.term_text(x, IN_SEQ)),
            Node::Seq(v) if v.len() == 1 => self.term_text(&v[0], ctx),
            Node::Seq(v) => {
                let parts = v.iter().map(|x| self.term_text(x, IN_SEQ)).collect();
                join(parts, " ", ctx > IN_SEQ)
            }
            Node::Alt(v) => {
                let parts = v.iter().map(|x| self.term_text(x, IN_ALT)).collect();
                join(parts, " | ", ctx > IN_ALT)
            }
            Node::Rep(x, min, max) => {
                let inner = self.term_text(x, IN_REP);
                repeat(inner, *min, *max, ctx)
            }
        }
    }
}
