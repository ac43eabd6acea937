//! Step 3 of the translation (see the parent module): find where llguidance's greedy lexer could cut a string
//! differently than GBNF would, and split the lexemes responsible until it cannot anywhere.
//!
//! llguidance lexes with the union of the lexemes its parser allows at a position and takes the longest match.
//! A string is lost when lexeme `l` must end at a point where that union could go on with the next byte, i.e.
//! when some lexeme `m` allowed beside `l` has a string that continues a string of `l` with a byte that can
//! start what follows `l`. What is allowed where is over-approximated from FIRST and FOLLOW sets, kept per kind
//! of context (the follow sets of a rule are not merged across the places it is used, up to
//! [`MAX_CONTEXTS`]), and the language questions are answered exactly by derivre.

use std::collections::{BTreeSet, HashMap};

use llguidance::derivre::{ExprRef, RegexAst, RegexBuilder};

use super::lark::class_regex;
use super::{meet, union, Bytes, GbnfError, Node, RExpr, Set, Translator};
use super::{FUEL, MAX_LEXEMES, MAX_ROUNDS};

/// Distinct follow sets kept for one rule or lexeme before they are merged into one.
const MAX_CONTEXTS: usize = 256;

/// The sets of lexemes that may come right after a rule or lexeme, one per kind of context: none is a subset
/// of another, and every real context's set is contained in one of them.
#[derive(Default)]
struct Family(Vec<Set>);

impl Family {
    /// Adds `set`; returns whether that changed anything.
    fn add(&mut self, set: &Set) -> bool {
        if self.0.iter().any(|have| have.is_superset(set)) {
            return false;
        }
        self.0.retain(|have| !have.is_subset(set));
        self.0.push(set.clone());
        if self.0.len() > MAX_CONTEXTS {
            let all: Set = self.0.iter().flatten().copied().collect();
            self.0 = vec![all];
        }
        true
    }

    fn all(&self) -> Set {
        self.0.iter().flatten().copied().collect()
    }
}

/// Follow families of the rules and lexemes of the translation.
#[derive(Default)]
struct Follow {
    rules: HashMap<usize, Family>,
    lexemes: HashMap<usize, Family>,
    changed: bool,
}

impl Translator<'_> {
    /// Splits lexemes until greedy lexing can cut no string differently than GBNF would.
    pub(super) fn resolve_conflicts(&mut self) -> Result<(), GbnfError> {
        for _ in 0..MAX_ROUNDS {
            if self.lexemes.len() > MAX_LEXEMES {
                break;
            }
            let first = self.first_sets();
            let follow = self.follow_families(&first);
            let live: Set = follow.lexemes.keys().copied().collect();
            let together = self.allowed_together(&first, &follow);
            let mut split = Set::new();
            for &l in &live {
                let mut after = [0; 8];
                for f in follow.lexemes.get(&l).map(Family::all).unwrap_or_default() {
                    union(&mut after, &self.lexemes[f].1);
                }
                if after == [0; 8] {
                    continue;
                }
                let beside: Set = together
                    .iter()
                    .filter(|s| s.contains(&l))
                    .flatten()
                    .copied()
                    .collect();
                for m in beside {
                    if meet(&self.lexemes[l].1, &self.lexemes[m].1) && self.continues(l, m, after) {
                        split.insert(m);
                    }
                }
            }
            if split.is_empty() {
                return Ok(());
            }
            let rules = std::mem::take(&mut self.rules);
            self.rules = rules
                .into_iter()
                .map(|(r, body)| (r, self.replace(body, &split)))
                .collect();
        }
        Err(GbnfError::TooComplex(
            "lexing conflicts did not resolve within the limits".into(),
        ))
    }

    /// The sets of lexemes that may be allowed together at a position: at the start, and after each lexeme in
    /// each kind of context. When lexemes allowed together meet, both may match the same text, and then what
    /// follows either may follow: that grows the sets, until they are stable.
    fn allowed_together(&mut self, first: &HashMap<usize, Set>, follow: &Follow) -> BTreeSet<Set> {
        let mut peers_follow: HashMap<usize, Set> = HashMap::new();
        loop {
            let mut together: BTreeSet<Set> =
                first.get(&self.g.root).cloned().into_iter().collect();
            for (l, family) in &follow.lexemes {
                let extra = peers_follow.get(l).cloned().unwrap_or_default();
                together.extend(
                    family
                        .0
                        .iter()
                        .map(|set| set.union(&extra).copied().collect()),
                );
            }
            let mut changed = false;
            for group in &together {
                for &l in group {
                    for &p in group {
                        if p != l
                            && meet(&self.lexemes[l].1, &self.lexemes[p].1)
                            && self.meets(l, p)
                        {
                            let set = peers_follow.entry(l).or_default();
                            let before = set.len();
                            set.extend(follow.lexemes.get(&p).map(Family::all).unwrap_or_default());
                            changed |= set.len() != before;
                        }
                    }
                }
            }
            if !changed {
                return together;
            }
        }
    }

    /// FIRST sets (lexemes) of the rules.
    fn first_sets(&self) -> HashMap<usize, Set> {
        let mut first: HashMap<usize, Set> = HashMap::new();
        loop {
            let mut changed = false;
            for (r, body) in &self.rules {
                let mut set = Set::new();
                self.first_of(body, &first, &mut set);
                changed |= first.get(r) != Some(&set);
                first.insert(*r, set);
            }
            if !changed {
                return first;
            }
        }
    }

    fn follow_families(&self, first: &HashMap<usize, Set>) -> Follow {
        let mut fol = Follow::default();
        fol.rules.entry(self.g.root).or_default().add(&Set::new());
        fol.changed = true;
        while std::mem::take(&mut fol.changed) {
            for (r, body) in &self.rules {
                let sets = fol.rules.get(r).map(|f| f.0.clone()).unwrap_or_default();
                for set in sets {
                    self.walk(body, &set, first, &mut fol);
                }
            }
        }
        fol
    }

    /// Adds the first lexemes of `e` to `out`; returns whether `e` matches the empty string.
    fn first_of(&self, e: &RExpr, first: &HashMap<usize, Set>, out: &mut Set) -> bool {
        match e {
            RExpr::Lex(l) => {
                out.insert(*l);
                false
            }
            RExpr::Rule(r) => {
                out.extend(first.get(r).into_iter().flatten());
                self.nullable[*r]
            }
            RExpr::Seq(v) => v.iter().all(|x| self.first_of(x, first, out)),
            RExpr::Alt(v) => {
                // Every branch adds its first lexemes, so no short-circuit.
                let mut nullable = false;
                for x in v {
                    nullable |= self.first_of(x, first, out);
                }
                nullable
            }
            RExpr::Rep(_, _, Some(0)) => true,
            RExpr::Rep(x, min, _) => self.first_of(x, first, out) || *min == 0,
        }
    }

    /// Records that `follow` may come right after `e`, and what may then come after each part of `e`.
    fn walk(&self, e: &RExpr, follow: &Set, first: &HashMap<usize, Set>, fol: &mut Follow) {
        match e {
            RExpr::Lex(l) => {
                fol.lexemes.entry(*l).or_default().add(follow);
            }
            RExpr::Rule(r) => fol.changed |= fol.rules.entry(*r).or_default().add(follow),
            RExpr::Seq(v) => {
                let mut after = follow.clone();
                for x in v.iter().rev() {
                    self.walk(x, &after, first, fol);
                    let mut set = Set::new();
                    if self.first_of(x, first, &mut set) {
                        after.extend(set);
                    } else {
                        after = set;
                    }
                }
            }
            RExpr::Alt(v) => v.iter().for_each(|x| self.walk(x, follow, first, fol)),
            RExpr::Rep(_, _, Some(0)) => {}
            RExpr::Rep(x, _, max) => {
                let mut inner = follow.clone();
                if *max != Some(1) {
                    self.first_of(x, first, &mut inner);
                }
                self.walk(x, &inner, first, fol);
            }
        }
    }

    /// Whether the languages of lexemes `a` and `b` meet (cached).
    fn meets(&mut self, a: usize, b: usize) -> bool {
        let key = (a.min(b), a.max(b));
        if let Some(&hit) = self.meet_cache.get(&key) {
            return hit;
        }
        let hit = self.nonempty(a, b, None);
        self.meet_cache.insert(key, hit);
        hit
    }

    /// Whether lexeme `b` has a string that continues a string of `a` with a byte in `after` (cached).
    fn continues(&mut self, a: usize, b: usize, after: Bytes) -> bool {
        if let Some(&hit) = self.continue_cache.get(&(a, b, after)) {
            return hit;
        }
        let hit = self.nonempty(a, b, Some(&after));
        self.continue_cache.insert((a, b, after), hit);
        hit
    }

    /// Whether `L(a) ∩ L(b)` (`after: None`) or `L(a)·after·bytes* ∩ L(b)` is non-empty; "yes" when derivre
    /// runs out of fuel.
    fn nonempty(&self, a: usize, b: usize, after: Option<&Bytes>) -> bool {
        let mut builder = RegexBuilder::new();
        let mut memo = HashMap::new();
        let (Some(x), Some(y)) = (
            self.rx(&self.lexemes[a].0, &mut builder, &mut memo),
            self.rx(&self.lexemes[b].0, &mut builder, &mut memo),
        ) else {
            return true;
        };
        let left = match after {
            None => RegexAst::ExprRef(x),
            Some(bytes) => RegexAst::Concat(vec![
                RegexAst::ExprRef(x),
                RegexAst::ByteSet(bytes.to_vec()),
                RegexAst::Not(Box::new(RegexAst::NoMatch)),
            ]),
        };
        let Ok(both) = builder.mk(&RegexAst::And(vec![left, RegexAst::ExprRef(y)])) else {
            return true;
        };
        builder
            .into_regex_limited(both, FUEL)
            .map_or(true, |mut rx| !rx.always_empty())
    }

    /// A regular node as a derivre expression (rules memoized by id).
    fn rx(
        &self,
        node: &Node,
        b: &mut RegexBuilder,
        memo: &mut HashMap<usize, ExprRef>,
    ) -> Option<ExprRef> {
        let ast = match node {
            Node::Lit(s) => RegexAst::Literal(s.clone()),
            Node::Class(c) => RegexAst::Regex(class_regex(c)),
            Node::Ref(r) => {
                if let Some(e) = memo.get(r) {
                    return Some(*e);
                }
                let e = self.rx(&self.g.bodies[*r], b, memo)?;
                memo.insert(*r, e);
                return Some(e);
            }
            Node::Seq(v) => RegexAst::Concat(self.rx_all(v, b, memo)?),
            Node::Alt(v) => RegexAst::Or(self.rx_all(v, b, memo)?),
            Node::Rep(x, min, max) => {
                let x = RegexAst::ExprRef(self.rx(x, b, memo)?);
                RegexAst::Repeat(Box::new(x), *min, max.unwrap_or(u32::MAX))
            }
            Node::NonEmpty(x) => RegexAst::And(vec![
                RegexAst::ExprRef(self.rx(x, b, memo)?),
                RegexAst::Regex("(?s:.)+".into()),
            ]),
        };
        b.mk(&ast).ok()
    }

    fn rx_all(
        &self,
        v: &[Node],
        b: &mut RegexBuilder,
        memo: &mut HashMap<usize, ExprRef>,
    ) -> Option<Vec<RegexAst>> {
        v.iter()
            .map(|x| self.rx(x, b, memo).map(RegexAst::ExprRef))
            .collect()
    }

    /// `e` with the lexemes in `split` split one level.
    fn replace(&mut self, e: RExpr, split: &Set) -> RExpr {
        match e {
            RExpr::Lex(l) if split.contains(&l) => {
                let node = self.lexemes[l].0.clone();
                self.explode(&node)
            }
            RExpr::Seq(v) => RExpr::Seq(v.into_iter().map(|x| self.replace(x, split)).collect()),
            RExpr::Alt(v) => RExpr::Alt(v.into_iter().map(|x| self.replace(x, split)).collect()),
            RExpr::Rep(x, min, max) => RExpr::Rep(Box::new(self.replace(*x, split)), min, max),
            other => other,
        }
    }
}
