//! Source text with its comments and the insides of its string literals blanked out (each byte a space, newlines
//! kept), so that brace depth and keywords can be read from it line by line. Byte offsets are the original's:
//! a string key found by position is read back from the original text.

use super::lang::Lang;

/// `text` with comments and string contents made spaces; the quotes themselves are kept.
pub fn blank(lang: Lang, text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let hash_comments = lang == Lang::Python;
    let mut i = 0;
    // Spaces over `from..to`, newlines kept (line numbers and starts stay where they were).
    let clear = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to.min(bytes.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        let c = bytes[i];
        if (hash_comments && c == b'#') || (!hash_comments && rest.starts_with(b"//")) {
            let end = find(bytes, i, b"\n").unwrap_or(bytes.len());
            clear(&mut out, i, end);
            i = end;
        } else if !hash_comments && rest.starts_with(b"/*") {
            let end = find(bytes, i + 2, b"*/").map_or(bytes.len(), |e| e + 2);
            clear(&mut out, i, end);
            i = end;
        } else if lang == Lang::Python && (rest.starts_with(b"\"\"\"") || rest.starts_with(b"'''"))
        {
            let end = closing(bytes, i + 3, &rest[..3], true);
            clear(&mut out, i + 3, end.saturating_sub(3).max(i + 3));
            i = end;
        } else if lang == Lang::Rust && c == b'r' && raw_string_start(rest).is_some() {
            let hashes = raw_string_start(rest).unwrap_or(0);
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let open = 2 + hashes;
            let end = find(bytes, i + open, &close).map_or(bytes.len(), |e| e + close.len());
            clear(
                &mut out,
                i + open,
                end.saturating_sub(close.len()).max(i + open),
            );
            i = end;
        } else if lang == Lang::Rust && c == b'\'' {
            i = rust_quote(bytes, i, &mut out);
        } else if c == b'/'
            && matches!(lang, Lang::JavaScript | Lang::JsLike)
            && regex_can_start(bytes, i)
        {
            // A regex literal (`/'/g`): its quotes must not open strings.
            match regex_end(bytes, i + 1) {
                Some(end) => {
                    clear(&mut out, i + 1, end - 1);
                    i = end;
                }
                None => i += 1,
            }
        } else if c == b'"'
            || c == b'\''
            || (c == b'`' && lang != Lang::Python && lang != Lang::Rust)
        {
            // A string: JS template literals may span lines, the others end at their line.
            let multiline = c == b'`';
            let end = closing(bytes, i + 1, &[c], multiline);
            clear(&mut out, i + 1, end.saturating_sub(1).max(i + 1));
            i = end;
        } else {
            i += 1;
        }
        // Bytes of a character are never split: `i` only stops on ASCII bytes or the end.
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Whether a `/` at `i` starts a regex rather than dividing: what comes before it on its line is nothing, an
/// operator or an opening bracket.
fn regex_can_start(bytes: &[u8], i: usize) -> bool {
    let before = bytes[..i]
        .iter()
        .rev()
        .take_while(|b| **b != b'\n')
        .find(|b| !b.is_ascii_whitespace());
    match before {
        None => true,
        Some(b) => b"(,=:[!&|?{};+-*%<>~^".contains(b),
    }
}

/// The end (past the closing `/`) of a regex literal whose body starts at `from`, on the same line; a `/`
/// inside a class (`[/]`) or escaped does not close it.
fn regex_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    let mut class = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'\n' => return None,
            b'[' => class = true,
            b']' => class = false,
            b'/' if !class => return (i > from).then_some(i + 1),
            _ => {}
        }
        i += 1;
    }
    None
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The end (past the closing quote) of a string whose contents start at `from`; backslashes escape. A
/// single-line string left open ends at its line's end.
fn closing(bytes: &[u8], from: usize, quote: &[u8], multiline: bool) -> usize {
    let mut i = from;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i..].starts_with(quote) {
            return i + quote.len();
        }
        if bytes[i] == b'\n' && !multiline {
            return i;
        }
        i += 1;
    }
    bytes.len()
}

/// `r"…"` or `r#"…"#`: the number of `#`s.
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let hashes = rest[1..].iter().take_while(|b| **b == b'#').count();
    (rest.get(1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// A Rust `'`: a character literal (`'a'`, `'\n'`, `'{'`) is blanked; a lifetime (`'a`) is left alone.
fn rust_quote(bytes: &[u8], i: usize, out: &mut [u8]) -> usize {
    let end = if bytes.get(i + 1) == Some(&b'\\') {
        find(bytes, i + 2, b"'").map(|e| e + 1)
    } else {
        // One character (up to four bytes) and the closing quote.
        (2..=5)
            .map(|len| i + len)
            .find(|&e| {
                bytes.get(e) == Some(&b'\'')
                    && std::str::from_utf8(&bytes[i + 1..e]).is_ok_and(|s| s.chars().count() == 1)
            })
            .map(|e| e + 1)
    };
    match end {
        Some(end) if !bytes[i..end].contains(&b'\n') => {
            for b in &mut out[i + 1..end - 1] {
                *b = b' ';
            }
            end
        }
        _ => i + 1,
    }
}
