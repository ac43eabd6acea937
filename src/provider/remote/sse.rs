//! A server-sent-events parser (the WHATWG event-stream format) fed with arbitrary byte chunks: lines end in
//! LF, CRLF or CR; `data:` lines of one event are joined with LF; a blank line dispatches the event; comments
//! (`:` lines, vLLM's keep-alives) and `id:`/`retry:` are ignored. A line or event longer than [`MAX_LINE`], a
//! line that is not UTF-8, or any other field is a protocol error, so a misbehaving server cannot grow memory
//! without bound.

use super::super::ProviderError;

/// The longest line accepted (a whole chunk of JSON is one line).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty for the default `message` type.
    pub event: String,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous byte was a CR (so an LF right after it ends nothing).
    after_cr: bool,
    event: String,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
        let mut out = Vec::new();
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line, &mut out)?;
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() >= MAX_LINE {
                        return Err(ProviderError::Protocol(format!(
                            "an event-stream line is longer than {MAX_LINE} bytes"
                        )));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    /// The end of the body: a last line without a newline, or an event without its blank line, is dispatched.
    pub fn finish(&mut self) -> Result<Vec<SseEvent>, ProviderError> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut out)?;
        }
        self.dispatch(&mut out);
        Ok(out)
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|e| {
            ProviderError::Protocol(format!("an event-stream line is not UTF-8: {e}"))
        })?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                let held: usize = self.data.iter().map(String::len).sum();
                if held + value.len() > MAX_LINE {
                    return Err(ProviderError::Protocol(format!(
                        "an event-stream event is longer than {MAX_LINE} bytes"
                    )));
                }
                self.data.push(value.to_string())
            }
            "event" => self.event = value.to_string(),
            "id" | "retry" => {}
            other => {
                return Err(ProviderError::Protocol(format!(
                    "unexpected line in the event stream (field `{}`): {}",
                    truncate(other, 40),
                    truncate(line, 200)
                )))
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.data.is_empty() {
            self.event.clear();
            return;
        }
        out.push(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data).join("\n"),
        });
    }
}

/// At most `max` bytes of `s`, cut on a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn events_split_anywhere_and_any_line_ending() {
        let text = "data: {\"a\":1}\n\n: keep-alive\r\n\r\ndata:{\"b\":2}\r\rdata: x\ndata: y\n\ndata: [DONE]\n\n";
        for split in 0..text.len() {
            let mut p = SseParser::new();
            let mut all = p.push(&text.as_bytes()[..split]).unwrap();
            all.extend(p.push(&text.as_bytes()[split..]).unwrap());
            all.extend(p.finish().unwrap());
            assert_eq!(
                data(&all),
                ["{\"a\":1}", "{\"b\":2}", "x\ny", "[DONE]"],
                "split at {split}"
            );
        }
    }

    #[test]
    fn last_event_without_blank_line_is_dispatched_at_the_end() {
        let mut p = SseParser::new();
        assert!(p.push(b"event: error\ndata: oops").unwrap().is_empty());
        let events = p.finish().unwrap();
        assert_eq!(
            events,
            [SseEvent {
                event: "error".into(),
                data: "oops".into()
            }]
        );
    }

    #[test]
    fn oversized_lines_and_events_are_refused() {
        let long = vec![b'a'; MAX_LINE + 1];
        let err = SseParser::new().push(&long).unwrap_err();
        assert!(err.to_string().contains("line is longer"), "{err}");
        let mut p = SseParser::new();
        let half = format!("data: {}\n", "a".repeat(MAX_LINE / 2 + 1));
        p.push(half.as_bytes()).unwrap();
        let err = p.push(half.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("event is longer"), "{err}");
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let mut p = SseParser::new();
        let err = p.push(b"<html>Bad Gateway</html>\n").unwrap_err();
        assert!(err.to_string().contains("unexpected line"), "{err}");
        let err = SseParser::new().push(b"data: \xff\xfe\n").unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }
}
