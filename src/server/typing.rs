//! Completion as you type: an editor sends a fill-in-the-middle request on every pause, so a newer request for
//! the same document makes the one still running stale. [`Typing`] keeps the request in flight per document and
//! cancels it when the next one for that document arrives (llama.cpp leaves this to the client closing the
//! connection; a client that does not, still gets its newest answer first).
//!
//! A document is known by its model and the two ends that do not move while the cursor does: the first line
//! of the text before the cursor and the last line of the text after it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// How much of each end names the document.
const END_BYTES: usize = 256;

/// The FIM requests in flight, one per document.
#[derive(Default)]
pub struct Typing {
    inflight: Mutex<HashMap<u64, (u64, CancellationToken)>>,
    next: AtomicU64,
    superseded: AtomicU64,
}

/// A request's place in [`Typing`]; dropping it frees the place if no newer request took it.
pub struct Turn {
    typing: Arc<Typing>,
    key: u64,
    seq: u64,
    /// Cancelled when a newer request for the same document arrives.
    pub cancel: CancellationToken,
}

impl Typing {
    /// Registers a request for the document `key`, cancelling the one in flight for it; `cancel` is the
    /// request's own token (a child of the server's).
    pub fn begin(self: &Arc<Self>, key: u64, cancel: CancellationToken) -> Turn {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let old = match self.inflight.lock() {
            Ok(mut map) => map.insert(key, (seq, cancel.clone())),
            Err(poisoned) => poisoned.into_inner().insert(key, (seq, cancel.clone())),
        };
        if let Some((_, old)) = old {
            if !old.is_cancelled() {
                old.cancel();
                self.superseded.fetch_add(1, Ordering::Relaxed);
            }
        }
        Turn {
            typing: self.clone(),
            key,
            seq,
            cancel,
        }
    }

    /// How many requests a newer one for the same document cancelled.
    pub fn superseded(&self) -> u64 {
        self.superseded.load(Ordering::Relaxed)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut map = match self.typing.inflight.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map.get(&self.key).is_some_and(|(seq, _)| *seq == self.seq) {
            map.remove(&self.key);
        }
    }
}

/// The document a FIM request edits: its model, the first line of the text before the cursor and the last line
/// with text after it (each up to [`END_BYTES`]) — what typing on a line leaves alone. Two files that begin and
/// end alike are one document here; the worst that does is cancel a request the editor no longer waits for.
pub fn document_key(model: &str, prefix: &str, suffix: &str) -> u64 {
    let first = match prefix.find('\n') {
        Some(nl) => &prefix[..nl],
        None => "",
    };
    let last = match suffix.rfind('\n') {
        Some(_) => suffix
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default(),
        None => "",
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (model, clip(first), clip(last)).hash(&mut h);
    h.finish()
}

/// At most [`END_BYTES`] bytes of `s`, cut at a character boundary.
fn clip(s: &str) -> &str {
    let mut end = s.len().min(END_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_request_for_the_document_cancels_the_older_one_only() {
        let typing = Arc::new(Typing::default());
        let doc = document_key("m", "def f():\n    ret", "\n\nprint(f())\n");
        let moved = document_key("m", "def f():\n    return 1", "\n\nprint(f())\n");
        assert_eq!(doc, moved, "the cursor moved: the same document");
        let other = document_key("m", "import os\ndef f():\n", "\n\nprint(f())\n");
        let first = typing.begin(doc, CancellationToken::new());
        let elsewhere = typing.begin(other, CancellationToken::new());
        let second = typing.begin(moved, CancellationToken::new());
        assert!(first.cancel.is_cancelled());
        assert!(!second.cancel.is_cancelled());
        assert!(!elsewhere.cancel.is_cancelled());
        assert_eq!(typing.superseded(), 1);
        drop(first);
        // The newer request keeps its place after the older one ends.
        let third = typing.begin(doc, CancellationToken::new());
        assert!(second.cancel.is_cancelled());
        drop(third);
    }
}
