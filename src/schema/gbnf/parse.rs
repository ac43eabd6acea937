//! GBNF text → [`Grammar`]: llama.cpp's syntax (see the parent module), with line and column in every error.

use std::collections::HashMap;

use super::{alt, seq, Class, GbnfError, Grammar, Node, MAX_NESTING, MAX_REPEAT};

fn line_col(src: &str, at: usize) -> (usize, usize) {
    let before = &src[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// Skips spaces, tabs, line breaks and comments from byte `p`.
fn skip_blank(src: &str, mut p: usize) -> usize {
    let b = src.as_bytes();
    while p < b.len() {
        match b[p] {
            b' ' | b'\t' | b'\r' | b'\n' => p += 1,
            b'#' => {
                while p < b.len() && b[p] != b'\n' && b[p] != b'\r' {
                    p += 1;
                }
            }
            _ => break,
        }
    }
    p
}

/// Parses a whole grammar. Errors: the first syntax error; else the undefined rule used first; else no `root`.
pub(super) fn parse(src: &str) -> Result<Grammar, GbnfError> {
    let mut p = Parser {
        src,
        pos: skip_blank(src, 0),
        depth: 0,
        ids: HashMap::new(),
        names: vec![],
        uses: vec![],
    };
    let mut bodies: Vec<Option<Node>> = vec![];
    while p.pos < src.len() {
        let (id, body) = p.rule()?;
        bodies.resize(p.names.len(), None);
        bodies[id] = Some(body);
        p.pos = skip_blank(src, p.pos);
    }
    bodies.resize(p.names.len(), None);
    let undefined = (0..bodies.len())
        .filter(|&id| bodies[id].is_none())
        .min_by_key(|&id| p.uses[id]);
    if let Some(id) = undefined {
        let (line, column) = line_col(src, p.uses[id]);
        return Err(GbnfError::UndefinedRule {
            name: p.names[id].clone(),
            line,
            column,
        });
    }
    let root = p.ids.get("root").copied().ok_or(GbnfError::NoRoot)?;
    let bodies = bodies
        .into_iter()
        .map(|b| b.unwrap_or(Node::Seq(vec![])))
        .collect();
    Ok(Grammar {
        names: p.names,
        bodies,
        root,
    })
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
    ids: HashMap<String, usize>,
    names: Vec<String>,
    /// Where each rule name first occurs.
    uses: Vec<usize>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.src[self.pos..].chars().nth(1)
    }

    fn err(&self, at: usize, message: impl Into<String>) -> GbnfError {
        let (line, column) = line_col(self.src, at);
        GbnfError::Syntax {
            line,
            column,
            message: message.into(),
        }
    }

    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the grammar".into(),
            Some('\n' | '\r') => "the end of the line".into(),
            Some(c) if c.is_control() => format!("`{}`", c.escape_debug()),
            Some(c) => format!("`{c}`"),
        }
    }

    /// Skips spaces, tabs and comments, and line breaks inside parentheses or where no new rule follows.
    fn skip_ws(&mut self, nested: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '#' => {
                    self.pos = self.src[self.pos..]
                        .find(['\n', '\r'])
                        .map_or(self.src.len(), |i| self.pos + i)
                }
                '\n' | '\r' if nested || !self.rule_or_end_follows() => self.pos += 1,
                _ => break,
            }
        }
    }

    fn rule_or_end_follows(&self) -> bool {
        let p = skip_blank(self.src, self.pos);
        let rest = &self.src[p..];
        let name_len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        rest.is_empty()
            || (name_len > 0
                && rest[name_len..]
                    .trim_start_matches([' ', '\t'])
                    .starts_with("::="))
    }

    fn name(&mut self) -> String {
        let rest = &self.src[self.pos..];
        let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        self.pos += len;
        rest[..len].to_string()
    }

    fn intern(&mut self, name: &str, at: usize) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.names.push(name.to_string());
        self.uses.push(at);
        self.ids.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    fn rule(&mut self) -> Result<(usize, Node), GbnfError> {
        let start = self.pos;
        let name = self.name();
        if name.is_empty() {
            return Err(self.err(
                start,
                format!("expected a rule name, found {}", self.found()),
            ));
        }
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.err(
                self.pos,
                format!("expected `::=` after `{name}`, found {}", self.found()),
            ));
        }
        self.pos += 3;
        let id = self.intern(&name, start);
        self.skip_ws(false);
        let body = self.alternatives(false)?;
        match self.peek() {
            None | Some('\n' | '\r') => Ok((id, body)),
            Some(_) => Err(self.err(self.pos, format!("unexpected {}", self.found()))),
        }
    }

    fn alternatives(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_ws(nested);
            alts.push(self.sequence(nested)?);
        }
        Ok(alt(alts))
    }

    fn sequence(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut items: Vec<Node> = vec![];
        let mut ops_in_row = 0;
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '"' => items.push(self.literal()?),
                '[' => items.push(self.class()?),
                '.' => {
                    self.pos += 1;
                    items.push(Node::Class(Class {
                        negated: true,
                        ranges: vec![],
                    }));
                }
                '(' => {
                    if self.depth >= MAX_NESTING {
                        return Err(self.err(start, "parentheses nested too deeply"));
                    }
                    self.pos += 1;
                    self.depth += 1;
                    self.skip_ws(true);
                    let inner = self.alternatives(true)?;
                    self.depth -= 1;
                    match self.peek() {
                        Some(')') => self.pos += 1,
                        None => return Err(self.err(start, "unclosed `(`")),
                        Some(_) => {
                            return Err(
                                self.err(self.pos, format!("expected `)`, found {}", self.found()))
                            )
                        }
                    }
                    items.push(inner);
                }
                '<' => return Err(self.token_reference(start)),
                '!' if self.peek2() == Some('<') => return Err(self.token_reference(start)),
                '*' | '+' | '?' | '{' => {
                    let Some(last) = items.pop() else {
                        return Err(
                            self.err(start, format!("`{c}` has nothing before it to repeat"))
                        );
                    };
                    ops_in_row += 1;
                    if ops_in_row > 8 {
                        return Err(self.err(start, "too many repetition operators in a row"));
                    }
                    let (min, max) = self.repetition(nested)?;
                    items.push(Node::Rep(Box::new(last), min, max));
                    self.skip_ws(nested);
                    continue;
                }
                c if is_name_char(c) => {
                    let name = self.name();
                    items.push(Node::Ref(self.intern(&name, start)));
                }
                _ => break,
            }
            ops_in_row = 0;
            self.skip_ws(nested);
        }
        Ok(seq(items))
    }

    fn token_reference(&self, start: usize) -> GbnfError {
        let rest = &self.src[start..];
        let text = match rest.find(['>', '\n']) {
            Some(end) if end < 80 && rest[end..].starts_with('>') => &rest[..=end],
            _ => &rest[..1],
        };
        let kind = if text.starts_with('!') {
            "negated token references"
        } else {
            "token references"
        };
        let (line, column) = line_col(self.src, start);
        GbnfError::Unsupported {
            line,
            column,
            construct: format!("{kind} (`{text}`)"),
        }
    }

    fn literal(&mut self) -> Result<Node, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.err(start, "unterminated string literal")),
                Some('"') => break,
                Some('\\') => text.push(self.escape()?),
                Some(c) => {
                    text.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
        self.pos += 1;
        Ok(if text.is_empty() {
            Node::Seq(vec![])
        } else {
            Node::Lit(text)
        })
    }

    fn class(&mut self) -> Result<Node, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = vec![];
        loop {
            let at = self.pos;
            let lo = match self.peek() {
                None => return Err(self.err(start, "unterminated character class")),
                Some(']') => break,
                Some('\\') => self.escape()?,
                Some(c) => {
                    self.pos += c.len_utf8();
                    c
                }
            };
            let mut hi = lo;
            if self.peek() == Some('-') && !matches!(self.peek2(), Some(']') | None) {
                self.pos += 1;
                hi = match self.peek() {
                    Some('\\') => self.escape()?,
                    Some(c) => {
                        self.pos += c.len_utf8();
                        c
                    }
                    None => return Err(self.err(start, "unterminated character class")),
                };
                if hi < lo {
                    let range = &self.src[at..self.pos];
                    return Err(self.err(at, format!("character range `{range}` is reversed")));
                }
            }
            ranges.push((lo as u32, hi as u32));
        }
        self.pos += 1;
        if ranges.is_empty() && !negated {
            return Err(self.err(start, "the empty character class `[]` matches nothing"));
        }
        Ok(Node::Class(Class { negated, ranges }))
    }

    fn escape(&mut self) -> Result<char, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek() else {
            return Err(self.err(start, "unterminated escape `\\`"));
        };
        self.pos += c.len_utf8();
        let digits = match c {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' | '-' => return Ok(c),
            _ => return Err(self.err(start, format!("unknown escape `\\{}`", c.escape_debug()))),
        };
        let hex: String = self.src[self.pos..]
            .chars()
            .take(digits)
            .take_while(char::is_ascii_hexdigit)
            .collect();
        if hex.len() != digits {
            return Err(self.err(start, format!("escape `\\{c}` needs {digits} hex digits")));
        }
        self.pos += digits;
        u32::from_str_radix(&hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.err(start, format!("`\\{c}{hex}` is not a Unicode character")))
    }

    /// Parses `*`, `+`, `?` or `{…}` into (minimum, maximum).
    fn repetition(&mut self, nested: bool) -> Result<(u32, Option<u32>), GbnfError> {
        let start = self.pos;
        self.pos += 1;
        match &self.src[start..self.pos] {
            "*" => return Ok((0, None)),
            "+" => return Ok((1, None)),
            "?" => return Ok((0, Some(1))),
            _ => {}
        }
        self.skip_ws(nested);
        let min = if self.peek() == Some(',') {
            0
        } else {
            self.number()?
        };
        self.skip_ws(nested);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.pos += 1;
                self.skip_ws(nested);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    Some(self.number()?)
                } else {
                    None
                };
                self.skip_ws(nested);
                if self.peek() != Some('}') {
                    return Err(self.err(
                        self.pos,
                        format!("expected `}}` to close `{{`, found {}", self.found()),
                    ));
                }
                max
            }
            _ => {
                return Err(self.err(
                    self.pos,
                    format!("expected `,` or `}}` in `{{`, found {}", self.found()),
                ))
            }
        };
        self.pos += 1;
        let text = &self.src[start..self.pos];
        if min > MAX_REPEAT {
            return Err(self.err(
                start,
                format!("repetition `{text}` requires more than {MAX_REPEAT} repetitions"),
            ));
        }
        if max.is_some_and(|max| max < min) {
            return Err(self.err(
                start,
                format!("repetition `{text}` has its maximum below its minimum"),
            ));
        }
        Ok((min, max.filter(|&max| max <= MAX_REPEAT)))
    }

    fn number(&mut self) -> Result<u32, GbnfError> {
        let rest = &self.src[self.pos..];
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(self.err(
                self.pos,
                format!("expected a number in `{{`, found {}", self.found()),
            ));
        }
        self.pos += len;
        Ok(rest[..len].parse::<u32>().unwrap_or(u32::MAX))
    }
}
