//! GBNF, llama.cpp's grammar format (what llama-server's `grammar` request field takes), translated into
//! llguidance's Lark dialect so that llguidance can enforce it: [`gbnf_to_lark`] translates, [`check`] also
//! compiles the result with llguidance (no tokenizer). Every refusal is a [`GbnfError`] naming the construct and,
//! where it has one, its line and column. This module owns the GBNF parser (`parse`), the translation (here and
//! in `conflicts`) and the Lark text (`lark`); it knows nothing of requests or engines.
//!
//! **Syntax** is llama.cpp's (grammars/README.md, src/llama-grammar.cpp): `name ::= alternatives`, names
//! `[a-zA-Z0-9-]+`, `root` the start symbol, `"…"` literals and `[…]`/`[^…]` classes with the escapes `\n \r \t
//! \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH`, `.` (any character), `( )`, `|`, empty alternatives, `* + ?`, `{m}`,
//! `{m,}`, `{m,n}`, `#` comments. As in llama.cpp a later definition of a rule replaces an earlier one, at most
//! 2000 repetitions may be required and an upper bound over 2000 means "unbounded". Beyond llama.cpp: `{,n}`,
//! and a rule continues on every line that does not begin a new rule (`name ::=`). Refused: token references
//! (`<[id]>`, `<token>`, `!<…>`: there is no tokenizer here), the empty class `[]`, reversed ranges `[z-a]`, and
//! grammars past the limits below ([`GbnfError::TooComplex`]).
//!
//! **Translation.** GBNF matches characters; llguidance's Lark lexes: UPPERCASE terminals are regexes, lowercase
//! rules sequence lexemes, and the lexer is greedy (longest match among the lexemes the parser allows, no
//! backtracking). A rule-per-rule translation therefore rejects strings GBNF accepts wherever a lexeme can run on
//! into what should follow it (`num ::= [0-9]+ ws` followed by `"\n"`, with `ws ::= [ \t\n]*`, swallows the
//! newline), or wherever one allowed lexeme is a prefix of another. So:
//! 1. A rule that reaches no cycle of rule references is *regular* and becomes a terminal; so does every maximal
//!    run of regular items of a sequence, and the regular branches of an alternation together. A grammar whose
//!    `root` is regular becomes one regex, which is exact. Only rules on or above a cycle stay Lark rules.
//! 2. No lexeme matches the empty string: a nullable part becomes `X?`, `X` its non-empty part.
//! 3. Every lexeme boundary is then checked, with derivre (llguidance's regex engine) deciding the language
//!    questions exactly: for each lexeme L, the lexemes that may be allowed beside it (FIRST/FOLLOW sets over the
//!    rules, kept apart per context a rule is used in) and the first bytes of what may follow it, can one of them
//!    continue a complete match of L with such a byte? If so, that lexeme is split one level (a sequence into its
//!    items, a literal into characters, `x*` into a rule-level `X*`, a rule into its body) and the check runs
//!    again. The sets over-approximate, so this may split more than needed but never less; single characters
//!    never conflict, so it ends, with a Lark grammar that accepts exactly the GBNF's strings (the tests compare
//!    the two on generated strings). llguidance's own Python `gbnf_to_lark` does step 1 only, without the runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

mod conflicts;
mod lark;
mod parse;
#[cfg(test)]
mod tests;

use parse::parse;

/// Every way a GBNF grammar can be refused. Lines and columns count from 1; columns count characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GbnfError {
    /// Not GBNF (or not GBNF llama.cpp would take): the message names what is wrong.
    #[error("GBNF line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// GBNF llama.cpp takes that cannot be enforced here: token references (there is no tokenizer).
    #[error("GBNF line {line}, column {column}: {construct} are not supported")]
    Unsupported {
        line: usize,
        column: usize,
        construct: String,
    },
    /// A rule is referenced (first at `line`:`column`) but has no definition.
    #[error("GBNF line {line}, column {column}: rule `{name}` is used but never defined")]
    UndefinedRule {
        name: String,
        line: usize,
        column: usize,
    },
    /// There is no `root` rule, the start symbol.
    #[error("GBNF: no `root` rule")]
    NoRoot,
    /// The grammar exceeds a size or depth limit of the translation.
    #[error("GBNF: the grammar is too complex to translate: {0}")]
    TooComplex(String),
    /// The translation was made but llguidance refuses it; the message is llguidance's.
    #[error("llguidance cannot compile the grammar: {0}")]
    Llguidance(String),
}

/// GBNF source → llguidance Lark source whose start rule is GBNF's `root`.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String, GbnfError> {
    let grammar = parse(gbnf)?;
    let mut translator = Translator::new(&grammar)?;
    translator.build();
    translator.resolve_conflicts()?;
    Ok(translator.emit())
}

/// Translates and compiles standalone (no tokenizer) with llguidance; returns the Lark source.
pub fn check(gbnf: &str) -> Result<String, GbnfError> {
    let lark = gbnf_to_lark(gbnf)?;
    compile(&lark)?;
    Ok(lark)
}

/// Compiles the Lark with llguidance as admission does ([`super::lark::check_lark`]: a byte-level vocabulary
/// stands in for the model's).
fn compile(lark: &str) -> Result<(), GbnfError> {
    super::lark::check_lark(lark, "the translated grammar").map_err(|e| {
        GbnfError::Llguidance(match e {
            super::SchemaError::InvalidGrammar(m) => m,
            other => other.to_string(),
        })
    })
}

/// llama.cpp refuses more required repetitions than this and reads a larger maximum as unbounded.
const MAX_REPEAT: u32 = 2000;
/// Parentheses nested deeper than this, or more repetition operators in a row, are refused.
const MAX_NESTING: usize = 64;
/// Regular rules referring to each other deeper than this are refused (the translation recurses through them).
const MAX_DEPTH: usize = 200;
/// Bounds on the conflict resolution (rounds of splitting, lexemes made).
const MAX_ROUNDS: usize = 256;
const MAX_LEXEMES: usize = 20_000;
/// derivre fuel for one emptiness check; running out counts as "not empty" (splits more, never less).
const FUEL: u64 = 1_000_000;

/// A GBNF expression. The empty string is `Seq([])`; `Lit` is never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Lit(String),
    Class(Class),
    Ref(usize),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Rep(Box<Node>, u32, Option<u32>),
    /// The language of the (regular, nullable) rule reference inside, less the empty string.
    NonEmpty(Box<Node>),
}

/// A character class: inclusive code point ranges; `.` is the negated empty class.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Class {
    negated: bool,
    ranges: Vec<(u32, u32)>,
}

fn seq(mut v: Vec<Node>) -> Node {
    if v.len() == 1 {
        v.swap_remove(0)
    } else {
        Node::Seq(v)
    }
}

fn alt(mut v: Vec<Node>) -> Node {
    if v.len() == 1 {
        v.swap_remove(0)
    } else {
        Node::Alt(v)
    }
}

/// A parsed grammar: rule names and bodies by id (ids in order of first mention), and `root`'s id.
struct Grammar {
    names: Vec<String>,
    bodies: Vec<Node>,
    root: usize,
}

/// A set of bytes (the first bytes of a language), as derivre's `ByteSet` bitset.
type Bytes = [u32; 8];

fn add_bytes(set: &mut Bytes, lo: u8, hi: u8) {
    for b in lo..=hi {
        set[usize::from(b) / 32] |= 1 << (b % 32);
    }
}

fn union(a: &mut Bytes, b: &Bytes) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x |= y);
}

fn meet(a: &Bytes, b: &Bytes) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

/// The first UTF-8 bytes of the characters of a class (UTF-8 first bytes grow with the code point).
fn class_first(class: &Class) -> Bytes {
    let mut ranges = class.ranges.clone();
    if class.negated {
        ranges.sort_unstable();
        let mut next = 0;
        let mut gaps = vec![];
        for (lo, hi) in ranges {
            if lo > next {
                gaps.push((next, lo - 1));
            }
            next = next.max(hi.saturating_add(1));
        }
        if next <= 0x10FFFF {
            gaps.push((next, 0x10FFFF));
        }
        ranges = gaps;
    }
    let first = |cp: u32| -> u8 {
        let b = match cp {
            0..=0x7F => cp,
            0x80..=0x7FF => 0xC0 | (cp >> 6),
            0x800..=0xFFFF => 0xE0 | (cp >> 12),
            _ => 0xF0 | (cp >> 18),
        };
        u8::try_from(b).unwrap_or(0xF4)
    };
    let mut set = [0; 8];
    for (lo, hi) in ranges {
        for (a, b) in [
            (0, 0x7F),
            (0x80, 0x7FF),
            (0x800, 0xFFFF),
            (0x10000, 0x10FFFF),
        ] {
            if lo.max(a) <= hi.min(b) {
                add_bytes(&mut set, first(lo.max(a)), first(hi.min(b)));
            }
        }
    }
    set
}

/// An expression over lexemes and (non-regular) rules: the body of a Lark rule.
#[derive(Clone, Debug)]
enum RExpr {
    Lex(usize),
    Rule(usize),
    Seq(Vec<RExpr>),
    Alt(Vec<RExpr>),
    Rep(Box<RExpr>, u32, Option<u32>),
}

type Set = BTreeSet<usize>;

struct Translator<'g> {
    g: &'g Grammar,
    nullable: Vec<bool>,
    regular: Vec<bool>,
    /// For regular rules: whether they match only the empty string, and their first bytes.
    empty_only: Vec<bool>,
    first: Vec<Bytes>,
    lexemes: Vec<(Node, Bytes)>,
    rules: BTreeMap<usize, RExpr>,
    meet_cache: HashMap<(usize, usize), bool>,
    continue_cache: HashMap<(usize, usize, Bytes), bool>,
}

impl<'g> Translator<'g> {
    fn new(g: &'g Grammar) -> Result<Self, GbnfError> {
        let n = g.bodies.len();
        let mut t = Translator {
            g,
            nullable: vec![false; n],
            regular: vec![false; n],
            empty_only: vec![false; n],
            first: vec![[0; 8]; n],
            lexemes: vec![],
            rules: BTreeMap::new(),
            meet_cache: HashMap::new(),
            continue_cache: HashMap::new(),
        };
        let mut changed = true;
        while std::mem::take(&mut changed) {
            for r in 0..n {
                if !t.nullable[r] && t.is_nullable(&g.bodies[r]) {
                    t.nullable[r] = true;
                    changed = true;
                }
            }
        }
        // Regular rules, leaves first: peel off rules all of whose references are already regular.
        let mut refs: Vec<Set> = vec![Set::new(); n];
        let mut users: Vec<Vec<usize>> = vec![vec![]; n];
        for (r, body) in g.bodies.iter().enumerate() {
            collect_refs(body, &mut refs[r]);
            refs[r].iter().for_each(|&s| users[s].push(r));
        }
        let mut pending: Vec<usize> = refs.iter().map(BTreeSet::len).collect();
        let mut order: Vec<usize> = (0..n).filter(|&r| pending[r] == 0).collect();
        let mut depth = vec![0; n];
        let mut i = 0;
        while let Some(&r) = order.get(i) {
            i += 1;
            t.regular[r] = true;
            depth[r] = refs[r].iter().map(|&s| depth[s] + 1).max().unwrap_or(0);
            if depth[r] > MAX_DEPTH {
                return Err(GbnfError::TooComplex(format!(
                    "rules refer to each other over {MAX_DEPTH} deep"
                )));
            }
            t.empty_only[r] = t.is_empty_only(&g.bodies[r]);
            t.first[r] = t.first_bytes(&g.bodies[r]);
            for &u in &users[r] {
                pending[u] -= 1;
                if pending[u] == 0 {
                    order.push(u);
                }
            }
        }
        Ok(t)
    }

    fn is_nullable(&self, node: &Node) -> bool {
        match node {
            Node::Lit(_) | Node::Class(_) | Node::NonEmpty(_) => false,
            Node::Ref(r) => self.nullable[*r],
            Node::Seq(v) => v.iter().all(|x| self.is_nullable(x)),
            Node::Alt(v) => v.iter().any(|x| self.is_nullable(x)),
            Node::Rep(x, min, max) => *min == 0 || *max == Some(0) || self.is_nullable(x),
        }
    }

    fn is_empty_only(&self, node: &Node) -> bool {
        match node {
            Node::Lit(_) | Node::Class(_) | Node::NonEmpty(_) => false,
            Node::Ref(r) => self.empty_only[*r],
            Node::Seq(v) | Node::Alt(v) => v.iter().all(|x| self.is_empty_only(x)),
            Node::Rep(x, _, max) => *max == Some(0) || self.is_empty_only(x),
        }
    }

    fn is_regular(&self, node: &Node) -> bool {
        match node {
            Node::Lit(_) | Node::Class(_) => true,
            Node::Ref(r) => self.regular[*r],
            Node::Seq(v) | Node::Alt(v) => v.iter().all(|x| self.is_regular(x)),
            Node::Rep(x, _, _) | Node::NonEmpty(x) => self.is_regular(x),
        }
    }

    fn first_bytes(&self, node: &Node) -> Bytes {
        let mut set = [0; 8];
        match node {
            Node::Lit(s) => {
                if let Some(&b) = s.as_bytes().first() {
                    add_bytes(&mut set, b, b);
                }
            }
            Node::Class(c) => set = class_first(c),
            Node::Ref(r) => set = self.first[*r],
            Node::Seq(v) => {
                for x in v {
                    union(&mut set, &self.first_bytes(x));
                    if !self.is_nullable(x) {
                        break;
                    }
                }
            }
            Node::Alt(v) => v.iter().for_each(|x| union(&mut set, &self.first_bytes(x))),
            Node::Rep(_, _, Some(0)) => {}
            Node::Rep(x, _, _) | Node::NonEmpty(x) => set = self.first_bytes(x),
        }
        set
    }

    /// The node's language less the empty string (`None`: nothing left). Structural, rules stay references.
    fn non_empty(&self, node: &Node) -> Option<Node> {
        if !self.is_nullable(node) {
            return Some(node.clone());
        }
        if self.is_empty_only(node) {
            return None;
        }
        Some(match node {
            Node::Seq(v) => alt((0..v.len())
                .filter_map(|i| {
                    Some(seq(
                        [vec![self.non_empty(&v[i])?], v[i + 1..].to_vec()].concat()
                    ))
                })
                .collect()),
            Node::Alt(v) => alt(v.iter().filter_map(|x| self.non_empty(x)).collect()),
            Node::Rep(x, _, max) => Node::Rep(Box::new(self.non_empty(x)?), 1, *max),
            _ => Node::NonEmpty(Box::new(node.clone())),
        })
    }

    fn lexeme(&mut self, node: Node) -> RExpr {
        let first = self.first_bytes(&node);
        self.lexemes.push((node, first));
        RExpr::Lex(self.lexemes.len() - 1)
    }

    /// A regular node as one lexeme, or as an optional lexeme when it matches the empty string.
    fn piece(&mut self, node: &Node) -> RExpr {
        if !self.is_nullable(node) {
            return self.lexeme(node.clone());
        }
        let inner = match node {
            Node::Ref(r) => self.non_empty(&self.g.bodies[*r]),
            _ => self.non_empty(node),
        };
        match inner {
            Some(inner) => RExpr::Rep(Box::new(self.lexeme(inner)), 0, Some(1)),
            None => RExpr::Seq(vec![]),
        }
    }

    /// Rule-level form of a node: regular parts (maximal runs of them) as lexemes.
    fn lower(&mut self, node: &Node) -> RExpr {
        if self.is_regular(node) {
            return self.piece(node);
        }
        match node {
            Node::Ref(r) => RExpr::Rule(*r),
            Node::Seq(v) => {
                let mut out = vec![];
                let mut run = vec![];
                for x in v {
                    if self.is_regular(x) {
                        run.push(x.clone());
                        continue;
                    }
                    if !run.is_empty() {
                        out.push(self.piece(&seq(std::mem::take(&mut run))));
                    }
                    out.push(self.lower(x));
                }
                if !run.is_empty() {
                    out.push(self.piece(&seq(run)));
                }
                RExpr::Seq(out)
            }
            Node::Alt(v) => {
                let (regular, other): (Vec<&Node>, Vec<&Node>) =
                    v.iter().partition(|x| self.is_regular(x));
                let mut out = vec![];
                if !regular.is_empty() {
                    out.push(self.piece(&alt(regular.into_iter().cloned().collect())));
                }
                out.extend(other.into_iter().map(|x| self.lower(x)));
                RExpr::Alt(out)
            }
            Node::Rep(x, min, max) => RExpr::Rep(Box::new(self.lower(x)), *min, *max),
            _ => self.piece(node),
        }
    }

    /// A lexeme's node split one level into smaller lexemes.
    fn explode(&mut self, node: &Node) -> RExpr {
        match node {
            Node::Ref(r) => self.explode(&self.g.bodies[*r]),
            Node::NonEmpty(x) => match x.as_ref() {
                Node::Ref(r) => match self.non_empty(&self.g.bodies[*r]) {
                    Some(inner) => self.explode(&inner),
                    None => RExpr::Seq(vec![]),
                },
                other => self.explode(other),
            },
            Node::Lit(s) if s.chars().count() > 1 => RExpr::Seq(
                s.chars()
                    .map(|c| self.lexeme(Node::Lit(c.to_string())))
                    .collect(),
            ),
            Node::Lit(_) | Node::Class(_) => self.lexeme(node.clone()),
            Node::Seq(v) => RExpr::Seq(v.iter().map(|x| self.piece(x)).collect()),
            Node::Alt(v) => RExpr::Alt(v.iter().map(|x| self.piece(x)).collect()),
            Node::Rep(x, min, max) => RExpr::Rep(Box::new(self.piece(x)), *min, *max),
        }
    }

    /// Lark rules for `root` and every rule it reaches that is not regular.
    fn build(&mut self) {
        let mut todo = vec![self.g.root];
        while let Some(r) = todo.pop() {
            if self.rules.contains_key(&r) {
                continue;
            }
            let body = self.lower(&self.g.bodies[r]);
            collect_rules(&body, &mut todo);
            self.rules.insert(r, body);
        }
    }
}

fn collect_refs(node: &Node, out: &mut Set) {
    match node {
        Node::Ref(r) => {
            out.insert(*r);
        }
        Node::Seq(v) | Node::Alt(v) => v.iter().for_each(|x| collect_refs(x, out)),
        Node::Rep(x, _, _) | Node::NonEmpty(x) => collect_refs(x, out),
        Node::Lit(_) | Node::Class(_) => {}
    }
}

fn collect_rules(e: &RExpr, out: &mut Vec<usize>) {
    match e {
        RExpr::Rule(r) => out.push(*r),
        RExpr::Seq(v) | RExpr::Alt(v) => v.iter().for_each(|x| collect_rules(x, out)),
        RExpr::Rep(x, _, _) => collect_rules(x, out),
        RExpr::Lex(_) => {}
    }
}
