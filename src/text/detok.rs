//! Turning generated token ids into text as they arrive: UTF-8 sequences split across tokens are held back
//! until complete, and text that could be the start of a stop string is held back until it is known not to
//! be one (the stop string itself is never emitted).

/// Incremental byte → UTF-8 decoder.
#[derive(Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds bytes and returns the text that is now complete. Invalid bytes become U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // from_utf8 just validated this prefix.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An incomplete sequence at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is still held back (an incomplete sequence), lossily.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// Result of feeding text to a [`StopMatcher`].
#[derive(Debug, PartialEq, Eq)]
pub enum StopScan {
    /// Text safe to emit now.
    Emit(String),
    /// A stop string matched: the text before it, to emit before ending.
    Stopped(String),
}

/// Holds back text that may be the beginning of a stop string.
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan::Emit(text.to_string());
        }
        self.held.push_str(text);
        // The earliest complete match wins.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let before = self.held[..at].to_string();
            self.held.clear();
            return StopScan::Stopped(before);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.held.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopScan::Emit(out)
    }

    /// Text held back when generation ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multibyte_split_across_pushes() {
        let mut d = Utf8Stream::default();
        let bytes = "é😀".as_bytes();
        assert_eq!(d.push(&bytes[..1]), "");
        assert_eq!(d.push(&bytes[1..3]), "é");
        assert_eq!(d.push(&bytes[3..5]), "");
        assert_eq!(d.push(&bytes[5..]), "😀");
        assert_eq!(d.finish(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = Utf8Stream::default();
        assert_eq!(d.push(&[b'a', 0xff, b'b']), "a\u{FFFD}b");
    }

    #[test]
    fn stop_string_across_pieces_is_not_emitted() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abc E"), StopScan::Emit("abc ".into()));
        assert_eq!(m.push("N"), StopScan::Emit("".into()));
        assert_eq!(m.push("Dxyz"), StopScan::Stopped("".into()));
    }

    #[test]
    fn false_start_is_released() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("EN"), StopScan::Emit("".into()));
        assert_eq!(m.push("x"), StopScan::Emit("ENx".into()));
        assert_eq!(m.push("E"), StopScan::Emit("".into()));
        assert_eq!(m.finish(), "E");
    }

    #[test]
    fn earliest_of_several_stops() {
        let mut m = StopMatcher::new(vec!["b".into(), "a".into()]);
        assert_eq!(m.push("xxab"), StopScan::Stopped("xx".into()));
    }
}
