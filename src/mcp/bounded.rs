//! Reading what an MCP server writes without letting it grow our memory: lines of at most a given length (a
//! longer one is consumed to its end and handed back cut, flagged), and a running count of the bytes a server
//! wrote that were not JSON-RPC, past which it is given up on.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest message line kept (a tool's answer with a whole file in it fits).
pub const MAX_LINE: usize = 32 << 20;
/// Bytes of output that are not JSON-RPC a server may write before it is given up on.
pub const MAX_GARBAGE: usize = 8 << 20;
/// The longest stderr line kept for error messages.
pub const MAX_STDERR_LINE: usize = 2048;

/// One line read by [`next_line`]: its bytes (without the newline), cut at the limit, and whether it was cut.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    pub bytes: Vec<u8>,
    pub cut: bool,
    /// Its whole length on the wire, newline included.
    pub wire_len: usize,
}

/// The next line of `reader`, at most `max` bytes of it kept; `None` at the end of the stream (a last line
/// without a newline is still a line).
pub async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<Line>> {
    let mut line = Line {
        bytes: Vec::new(),
        cut: false,
        wire_len: 0,
    };
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((line.wire_len > 0).then_some(line));
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        let room = max.saturating_sub(line.bytes.len());
        if take > room {
            line.cut = true;
        }
        line.bytes.extend_from_slice(&buf[..take.min(room)]);
        let consumed = take + done as usize;
        line.wire_len += consumed;
        reader.consume(consumed);
        if done {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_cut_at_the_limit_and_the_rest_is_skipped() {
        let data = b"short\nthis one is long\n\nlast".to_vec();
        let mut r = tokio::io::BufReader::with_capacity(4, &data[..]);
        let mut got = Vec::new();
        while let Some(l) = next_line(&mut r, 8).await.unwrap() {
            got.push((String::from_utf8(l.bytes).unwrap(), l.cut, l.wire_len));
        }
        assert_eq!(
            got,
            [
                ("short".into(), false, 6),
                ("this one".into(), true, 17),
                (String::new(), false, 1),
                ("last".into(), false, 4),
            ]
        );
    }
}
