//! Grammars in the style of llama.cpp's grammars/ folder, translated, compiled by llguidance and run byte by
//! byte (a one-byte-per-token vocabulary) on strings GBNF accepts and rejects; and every refusal.

use std::collections::BTreeSet;

use super::*;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, InferenceCapabilities};
use llguidance::{Matcher, ParserFactory};

/// A Lark grammar compiled for a one-byte-per-token vocabulary.
struct Enforcer {
    lark: String,
    factory: ParserFactory,
}

impl Enforcer {
    fn new(gbnf: &str) -> Self {
        let lark = check(gbnf).unwrap_or_else(|e| panic!("{e}\n{gbnf}"));
        let env = ApproximateTokEnv::single_byte_env();
        let factory =
            ParserFactory::new(&env, InferenceCapabilities::default(), &[]).expect("factory");
        Enforcer { lark, factory }
    }

    /// Whether llguidance lets the model write exactly `text`, byte by byte, and then stop.
    fn accepts(&self, text: &str) -> bool {
        let grammar = TopLevelGrammar::from_lark(self.lark.clone());
        let mut m = Matcher::new(self.factory.create_parser(grammar));
        assert!(!m.is_error(), "{:?}\n{}", m.get_error(), self.lark);
        for &b in text.as_bytes() {
            if m.consume_token(u32::from(b)).is_err() || m.is_error() {
                return false;
            }
        }
        m.is_accepting().unwrap_or(false)
    }
}

/// Translates and compiles `gbnf`, checks that llguidance accepts exactly the `accepted` strings, returns the Lark.
fn assert_language(gbnf: &str, accepted: &[&str], rejected: &[&str]) -> String {
    let e = Enforcer::new(gbnf);
    for text in accepted {
        assert!(
            e.accepts(text),
            "rejects {text:?}, which the GBNF accepts\n{}",
            e.lark
        );
    }
    for text in rejected {
        assert!(
            !e.accepts(text),
            "accepts {text:?}, which the GBNF rejects\n{}",
            e.lark
        );
    }
    e.lark
}

fn refusal(gbnf: &str) -> String {
    match gbnf_to_lark(gbnf) {
        Ok(lark) => panic!("translated {gbnf:?} into {lark}"),
        Err(e) => e.to_string(),
    }
}

const JSON: &str = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws

# at most one space, or a line break and an indent
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn json_object_grammar_with_recursion() {
    let lark = assert_language(
        JSON,
        &[
            "{}",
            r#"{"a": 1}"#,
            r#"{"a": [1, 2.5e3, {"b": null}], "c": "x\"y\u00e9", "d": -0.5}"#,
            "{\n  \"k\" : true,\n  \"l\": []\n}",
            r#"{"é": "ü😀", "e": [[], {}]}"#,
        ],
        &[
            r#"{"a" 1}"#,
            r#"{"a": [1,]}"#,
            "[1]",
            r#"{"a": 01}"#,
            r#"{"a": "\q"}"#,
            "{}  ",
            "{",
            "",
        ],
    );
    // Recursion keeps `value`, `object` and `array` rules; strings and numbers stay single lexemes.
    assert!(lark.starts_with("start: root\nroot: object\n"), "{lark}");
    assert!(
        lark.contains("\nvalue: ") && lark.contains("\narray: "),
        "{lark}"
    );
    assert!(
        lark.contains("\nSTRING: ") && lark.contains("\nNUMBER: "),
        "{lark}"
    );
}

#[test]
fn arithmetic_grammar_whose_lexemes_could_run_on() {
    // `num` ends in `ws`, which may swallow the "\n" that `root` wants next: the translation must split it.
    assert_language(
        r#"
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"#,
        &[
            "1=2\n",
            "x = y\n",
            "(a+b)*3 = 4 \n",
            "a=1\nb_2=2\n",
            "1=2\n\n",
            "( 1 )-x1=( y)\n",
        ],
        &["1=2", "1=\n", "(1=2\n", "1+=2\n", "A=1\n", ""],
    );
}

#[test]
fn list_of_items() {
    assert_language(
        r#"
root ::= item+
# an item is one line; no other line break characters inside
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
"#,
        &["- a\n", "- milk\n- eggs and ham\n", "- ünïcödé ✓\n"],
        &["", "- \n", "- a", "* a\n", "- a\n\n", "- a\u{2028}b\n"],
    );
}

#[test]
fn yes_no_choice() {
    assert_language(
        "root ::= answer (\".\" | \"!\")?\nanswer ::= \"Yes\" | \"No\" | \"yes\" | \"no\"\n",
        &["yes", "No", "no!", "Yes."],
        &["yesno", "y", "maybe", "yes!!", "YES", ""],
    );
}

#[test]
fn chess_moves() {
    assert_language(
        r#"
# moves in algebraic notation, numbered like PGN
root    ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")+
move    ::= (pawn | piece | castle) [+#]?
piece   ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle  ::= "O-O" "-O"?
"#,
        &[
            "1. e4 e5\n2. Nf3 Nc6\n",
            "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8+\n12. e8=Q# Rb1\n",
        ],
        &[
            "1. e4 e5\n",
            "1. e9 e5\n2. a3 a6\n",
            "1. e4  e5\n2. a3 a6\n",
            "1. e4 e5\n0. a3 a6\n",
        ],
    );
}

#[test]
fn character_classes_and_bounds() {
    assert_language(
        r#"
root   ::= plate "-" serial tag?
plate  ::= [A-Z]{2,3}
serial ::= [0-9]{4}
tag    ::= "-" [a-f0-9]{,2} | "/" [^/\n]{1,} | "~" [x]{3}
"#,
        &[
            "AB-1234",
            "ABC-0000-f",
            "AB-1234-",
            "AB-1234-9a",
            "AB-1234/x y",
            "AB-1234~xxx",
        ],
        &[
            "A-1234",
            "ABCD-1234",
            "AB-123",
            "AB-1234-abc",
            "AB-1234/",
            "AB-1234/a/",
            "AB-1234~xx",
        ],
    );
}

#[test]
fn a_lexeme_that_runs_into_its_follower_is_split() {
    let lark = assert_language(
        "root ::= expr \"\\n\"\nexpr ::= num | \"(\" expr \")\"\nnum ::= [0-9]+ ws\nws ::= [ \\n]*\n",
        &["12\n", "12 \n", "(3)\n", "((3 \n))\n", "12\n\n", "7 \n \n"],
        &["12", "(3\n", "(3))\n", "\n"],
    );
    assert!(
        !lark.contains("NUM"),
        "num must not stay one lexeme:\n{lark}"
    );
}

#[test]
fn a_lexeme_that_is_a_prefix_of_another_allowed_one_is_split() {
    // "a" and "abc" are both allowed first: greedy lexing would read "ab" as the start of "abc".
    assert_language(
        "root ::= \"a\" root | \"ab\" \"c\" | \"b\"\n",
        &["ab", "aab", "abc", "aabc", "b"],
        &["a", "abcb", "ac", ""],
    );
}

#[test]
fn a_rule_used_in_several_contexts_does_not_split_lexemes_needlessly() {
    // In the style of llama.cpp's json_schema_to_grammar output: `value` ends inside `root` and inside `object`
    // and `array`; what may follow it differs per context, and merging the contexts would (wrongly) make the
    // root's `,"p1": ...` run and the object's `, "key":` lexeme look allowed together.
    let mut gbnf = String::from(
        "root ::= \"{\" space p0-kv \",\" space p1-kv \",\" space p2-kv \"}\" space\n",
    );
    gbnf += "p0-kv ::= \"\\\"p0\\\"\" space \":\" space value\n";
    gbnf += "p1-kv ::= \"\\\"p1\\\"\" space \":\" space string\n";
    gbnf += "p2-kv ::= \"\\\"p2\\\"\" space \":\" space value\n";
    gbnf += &JSON
        .replace("root   ::= object\n", "")
        .replace("ws", "space");
    let lark = assert_language(
        &gbnf,
        &[
            r#"{"p0": 1,"p1": "x","p2": {"p1": [true]}}"#,
            r#"{"p0": {},"p1": "","p2": null}"#,
        ],
        &[r#"{"p0": 1,"p2": 2}"#, r#"{"p0": 1,"p1": 2,"p2": 3}"#],
    );
    assert!(
        !lark.contains("\"\\\"\" \"p\""),
        "split into characters:\n{lark}"
    );
    assert!(lark.lines().count() < 30, "{lark}");
}

#[test]
fn names_with_dashes_digits_and_uppercase() {
    let lark = assert_language(
        r#"
root ::= My-Rule my-rule 2nd start
My-Rule ::= "A" My-Rule | "B"
my-rule ::= "c" my-rule | "d"
2nd ::= "2" 2nd | "!"
start ::= "s" | "t" start
x-Y ::= "unused"
"#,
        &["Bd!s", "AABccd22!tts"],
        &["bd!s", "Bd!", "Bd2s"],
    );
    for rule in ["\nmy_rule: ", "\nmy_rule_2: ", "\nr2nd: ", "\nstart_2: "] {
        assert!(lark.contains(rule), "no `{rule}` in\n{lark}");
    }
    assert!(
        lark.starts_with("start: root\n") && !lark.contains("x_y"),
        "{lark}"
    );
}

#[test]
fn multiline_rules_comments_escapes_and_empty_alternatives() {
    assert_language(
        r#"# a comment line
root ::= greeting space (   # a group across lines
    "x" |
    "\x41\u00e9\U0001F600\t\\\"\[\]\-"
  ) tail
  "!"      # this line continues `root`: it does not start `name ::=`
greeting ::= "hi" |
space ::= [ ]?
tail ::= "<" [^>]* ">" .
"#,
        &[
            "x<>z!",
            "hi x<a\nb>é!",
            "hiAé😀\t\\\"[]-<>>!",
            "hi Aé😀\t\\\"[]-<>\n!",
        ],
        &["x<>!", "y<>z!", "x<>z", "hi  x<>z!", "x<a>b>z!"],
    );
}

#[test]
fn repetition_of_recursive_groups_and_empty_rules() {
    assert_language(
        r#"
root ::= "[" (item ("," item){0,2})? "]" | nothing
item ::= "(" item? ")" | [0-9]
nothing ::=
"#,
        &["", "[]", "[1]", "[(),1,(())]", "[(1)]"],
        &["[1,2,3,4]", "[,]", "[(]", "["],
    );
}

#[test]
fn check_returns_the_translation() {
    let gbnf = "root ::= [a-z]+ (\" \" [a-z]+)*\n";
    assert_eq!(check(gbnf), gbnf_to_lark(gbnf));
    assert!(check(gbnf).is_ok_and(|lark| lark.starts_with("start: root\nroot: ")));
}

#[test]
fn token_references_are_refused() {
    assert_eq!(
        refusal("root ::= <[1234]> \"x\""),
        "GBNF line 1, column 10: token references (`<[1234]>`) are not supported"
    );
    assert_eq!(
        refusal("root ::= \"a\"\n  | <think> \"b\""),
        "GBNF line 2, column 5: token references (`<think>`) are not supported"
    );
    assert_eq!(
        refusal("root ::= (\"a\" !<[7]>)*"),
        "GBNF line 1, column 15: negated token references (`!<[7]>`) are not supported"
    );
}

#[test]
fn undefined_rules_and_missing_root_are_refused() {
    assert_eq!(
        refusal("root ::= greeting name\ngreeting ::= \"hi\"\n"),
        "GBNF line 1, column 19: rule `name` is used but never defined"
    );
    assert_eq!(refusal("main ::= \"x\"\n"), "GBNF: no `root` rule");
    assert_eq!(refusal("# only a comment\n"), "GBNF: no `root` rule");
}

#[test]
fn over_deep_rule_chains_are_refused() {
    let mut gbnf = String::from("root ::= a0\n");
    for i in 0..MAX_DEPTH {
        gbnf.push_str(&format!("a{i} ::= \"x\" a{} | \"y\"\n", i + 1));
    }
    gbnf.push_str(&format!("a{MAX_DEPTH} ::= \"z\"\n"));
    let message = format!("GBNF: the grammar is too complex to translate: rules refer to each other over {MAX_DEPTH} deep");
    assert_eq!(refusal(&gbnf), message);
    // One level less translates, compiles and runs.
    let shallower = gbnf.replacen("root ::= a0", "root ::= a1", 1);
    assert_language(
        &shallower,
        &["y", "xxy", &format!("{}z", "x".repeat(MAX_DEPTH - 1))],
        &["x", "z"],
    );
}

#[test]
fn unterminated_and_malformed_syntax_is_refused() {
    let cases = [
        (
            "root ::= \"x\"\nfoo ::= \"abc",
            "GBNF line 2, column 9: unterminated string literal",
        ),
        (
            "root ::= [a-z",
            "GBNF line 1, column 10: unterminated character class",
        ),
        (
            "root ::= (\"a\" | \"b\"",
            "GBNF line 1, column 10: unclosed `(`",
        ),
        ("root ::= \"a\" )", "GBNF line 1, column 14: unexpected `)`"),
        (
            "root ::= \"\\q\"",
            "GBNF line 1, column 11: unknown escape `\\q`",
        ),
        (
            "root ::= \"\\x4\"",
            "GBNF line 1, column 11: escape `\\x` needs 2 hex digits",
        ),
        (
            "root ::= [z-a]",
            "GBNF line 1, column 11: character range `z-a` is reversed",
        ),
        (
            "root ::= []",
            "GBNF line 1, column 10: the empty character class `[]` matches nothing",
        ),
        (
            "root ::= * \"a\"",
            "GBNF line 1, column 10: `*` has nothing before it to repeat",
        ),
        (
            "root := \"a\"",
            "GBNF line 1, column 6: expected `::=` after `root`, found `:`",
        ),
        (
            "| \"b\"\nroot ::= \"a\"",
            "GBNF line 1, column 1: expected a rule name, found `|`",
        ),
        (
            "root ::= \"a\"\n| \"b\"\n::= \"c\"",
            "GBNF line 3, column 1: unexpected `:`",
        ),
    ];
    for (gbnf, message) in cases {
        assert_eq!(refusal(gbnf), message, "{gbnf:?}");
    }
}

#[test]
fn bad_repetition_bounds_are_refused() {
    let cases = [
        (
            "root ::= \"a\"{3,1}",
            "GBNF line 1, column 13: repetition `{3,1}` has its maximum below its minimum",
        ),
        (
            "root ::= \"a\"{x}",
            "GBNF line 1, column 14: expected a number in `{`, found `x`",
        ),
        (
            "root ::= \"a\"{3",
            "GBNF line 1, column 15: expected `,` or `}` in `{`, found the end of the grammar",
        ),
        (
            "root ::= \"a\"{1,2 \"b\"",
            "GBNF line 1, column 18: expected `}` to close `{`, found `\"`",
        ),
        (
            "root ::= \"a\"{2001}",
            "GBNF line 1, column 13: repetition `{2001}` requires more than 2000 repetitions",
        ),
    ];
    for (gbnf, message) in cases {
        assert_eq!(refusal(gbnf), message, "{gbnf:?}");
    }
    // As in llama.cpp, a maximum over 2000 means unbounded.
    assert_language(
        "root ::= \"a\"{1,5000}",
        &["a", &"a".repeat(2500)],
        &["", "b"],
    );
}

#[test]
fn llguidance_refusals_are_reported_as_such() {
    // Every translation compiles; what llguidance refuses (here an undefined rule) comes back with its message.
    let err = compile("start: nowhere\n")
        .map(|()| "compiled")
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("llguidance cannot compile the grammar: "),
        "{err}"
    );
    assert!(err.to_string().contains("nowhere"), "{err}");
    // A grammar whose language is empty (no string ends the recursion) translates, but admission refuses it:
    // the model could write nothing.
    let lark = gbnf_to_lark("root ::= root \"a\"\n").unwrap();
    let err = compile(&lark).unwrap_err();
    assert!(err.to_string().contains("accepts no output"), "{err}");
}

/// GBNF's own semantics by brute force (no left recursion): where `node`, started at `at`, can end.
fn ends(g: &Grammar, node: &Node, text: &[char], at: usize, depth: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let step = |cur: &BTreeSet<usize>, x: &Node| -> BTreeSet<usize> {
        cur.iter()
            .flat_map(|&p| ends(g, x, text, p, depth + 1))
            .collect()
    };
    match node {
        _ if depth > 300 => {}
        Node::Lit(s) => {
            let s: Vec<char> = s.chars().collect();
            if text[at..].starts_with(&s) {
                out.insert(at + s.len());
            }
        }
        Node::Class(c) => {
            let inside = |ch: char| {
                c.ranges
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(&u32::from(ch)))
            };
            if text.get(at).is_some_and(|&ch| inside(ch) != c.negated) {
                out.insert(at + 1);
            }
        }
        Node::Ref(r) => out = ends(g, &g.bodies[*r], text, at, depth + 1),
        Node::NonEmpty(x) => out = ends(g, x, text, at, depth + 1).split_off(&(at + 1)),
        Node::Seq(v) => out = v.iter().fold(BTreeSet::from([at]), |cur, x| step(&cur, x)),
        Node::Alt(v) => v
            .iter()
            .for_each(|x| out.extend(ends(g, x, text, at, depth + 1))),
        Node::Rep(x, min, max) => {
            let mut cur = BTreeSet::from([at]);
            for k in 0.. {
                if k >= *min {
                    out.extend(&cur);
                }
                if max.is_some_and(|max| k >= max) || cur.is_empty() {
                    break;
                }
                let next = step(&cur, x);
                if k >= *min && next.is_subset(&out) {
                    break;
                }
                cur = next;
            }
        }
    }
    out
}

/// A small xorshift generator, so the strings below are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

const POOL: &str = "ab xyz019-+*/=()[]{}\"\\:,.!#\n\tNOe8é😀";

/// A random string of `node`'s language (`None` when the derivation got too deep).
fn generate(g: &Grammar, node: &Node, rng: &mut Rng, depth: usize, out: &mut String) -> Option<()> {
    if depth > 40 {
        return None;
    }
    match node {
        Node::Lit(s) => out.push_str(s),
        Node::Class(c) => {
            let pool: Vec<char> = POOL
                .chars()
                .chain(c.ranges.iter().filter_map(|r| char::from_u32(r.0)))
                .collect();
            let inside = |ch: &char| {
                c.ranges
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(&u32::from(*ch)))
            };
            let allowed: Vec<char> = pool
                .into_iter()
                .filter(|ch| inside(ch) != c.negated)
                .collect();
            out.push(allowed[rng.below(allowed.len())]);
        }
        Node::Ref(r) => generate(g, &g.bodies[*r], rng, depth + 1, out)?,
        Node::NonEmpty(x) => generate(g, x, rng, depth + 1, out)?,
        Node::Seq(v) => v
            .iter()
            .try_for_each(|x| generate(g, x, rng, depth + 1, out))?,
        Node::Alt(v) => generate(g, &v[rng.below(v.len())], rng, depth + 1, out)?,
        Node::Rep(x, min, max) => {
            let count =
                *min as usize + rng.below(max.map_or(4, |max| (max - min) as usize + 1).min(4));
            (0..count).try_for_each(|_| generate(g, x, rng, depth + 1, out))?;
        }
    }
    Some(())
}

/// Strings of the grammar, and random edits of them: llguidance must agree with GBNF's semantics on each.
fn assert_same_language_as_gbnf(gbnf: &str, samples: usize) {
    let g = parse(gbnf).expect("parses");
    let e = Enforcer::new(gbnf);
    let gbnf_accepts = |text: &str| {
        let chars: Vec<char> = text.chars().collect();
        ends(&g, &g.bodies[g.root], &chars, 0, 0).contains(&chars.len())
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let pool: Vec<char> = POOL.chars().collect();
    let (mut generated, mut accepted) = (0, 0);
    while generated < samples {
        let mut text = String::new();
        if generate(&g, &g.bodies[g.root], &mut rng, 0, &mut text).is_none()
            || text.chars().count() > 40
        {
            continue;
        }
        generated += 1;
        assert!(gbnf_accepts(&text), "the generator made {text:?}");
        assert!(
            e.accepts(&text),
            "rejects {text:?}, which the GBNF accepts\n{}",
            e.lark
        );
        for _ in 0..4 {
            let mut chars: Vec<char> = text.chars().collect();
            let at = rng.below(chars.len() + 1);
            match rng.below(3) {
                0 if at < chars.len() => drop(chars.remove(at)),
                1 if at < chars.len() => chars[at] = pool[rng.below(pool.len())],
                _ => chars.insert(at, pool[rng.below(pool.len())]),
            }
            let edited: String = chars.into_iter().collect();
            let expected = gbnf_accepts(&edited);
            accepted += usize::from(expected);
            assert_eq!(e.accepts(&edited), expected, "on {edited:?}\n{}", e.lark);
        }
    }
    assert!(
        accepted > 0,
        "no edit stayed in the language: the comparison is too weak"
    );
}

#[test]
fn llguidance_agrees_with_gbnf_on_generated_and_edited_strings() {
    assert_same_language_as_gbnf(JSON, 60);
    assert_same_language_as_gbnf(
        "root ::= item (\" \" item)* ws \".\"\nitem ::= \"(\" root \")\" | [a-z]+ ws\nws ::= \" \"*\n",
        80,
    );
    assert_same_language_as_gbnf(
        "root ::= (expr \"=\" ws term \"\\n\")+\nexpr ::= term ([-+*/] term)*\n\
         term ::= [a-z] [a-z0-9]* ws | [0-9]+ ws | \"(\" ws expr \")\" ws\nws ::= [ \\t\\n]*\n",
        80,
    );
    assert_same_language_as_gbnf(
        "root ::= a | b\na ::= \"x\" a \"y\"? | \"xy\" \"z\"* | \"-\"\nb ::= \"x\"+ \"-\" b? \"y\"\n",
        80,
    );
    let tricky = [
        "root ::= a b\na ::= \"x\" | \"x\" a\nb ::= \"xy\" | \"y\" b?\n",
        "root ::= (p | q)* \"!\"\np ::= \"(\" root \")\" | [a-c]+ ws\nq ::= ws \",\" ws\nws ::= [ ]*\n",
        "root ::= \"(\" a \")\" | \"[\" a \"]x\" | a \"]\" \"y\"\na ::= [a-z]* b\nb ::= \"]\" b | \"\"\n",
        "root ::= x y z\nx ::= \"a\"* | \"(\" x \")\"\ny ::= \"a\"? \"b\"* | \"(\" y \")\"\nz ::= \"b\"? | \"(\" z \")\"\n",
        "root ::= (a | b)+\na ::= \"x\" \"y\"* | \"(\" root \")\"\nb ::= \"y\" \"x\"* | \"{\" root \"}\"\n",
        "root ::= k | i\nk ::= \"if\" rest\ni ::= [a-z]+ rest2\nrest ::= \" \" root | \"!\"\nrest2 ::= \"?\" | \"i\" \"f\"? root?\n",
    ];
    for gbnf in tricky {
        assert_same_language_as_gbnf(gbnf, 40);
    }
}
