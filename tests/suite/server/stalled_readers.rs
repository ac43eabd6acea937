//! Streaming clients that stop reading while their answers are larger than the socket buffers between them and
//! the server (long answers with 20 alternatives per token, a 4 KiB receive buffer): the server's send queue
//! fills and stays full, yet the other clients' streams run to the end meanwhile, the server's memory stays
//! bounded, and once the stalled clients read again each gets its whole answer — every token, then `[DONE]`.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ServeProcess;

const STALLED: usize = 6;
const TOKENS: usize = 400;

/// A streaming chat request on a socket with a small receive buffer; the response head is read, nothing more.
async fn stalled_stream(root: &str, i: usize) -> tokio::net::TcpStream {
    let addr: std::net::SocketAddr = root.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let body = json!({
        "messages": [{"role": "user", "content": format!("Write a long story, number {i}.")}],
        "max_tokens": TOKENS, "ignore_eos": true, "temperature": 0.7, "seed": i,
        "logprobs": true, "top_logprobs": 20, "stream": true,
    })
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// `(tx_queue, rx_queue)` of the TCP connection from local port `local` to remote port `remote` (Linux
/// `/proc/net/tcp`): bytes written and not yet acknowledged, bytes received and not yet read.
fn queues(local: u16, remote: u16) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |a: &str| u16::from_str_radix(a.rsplit(':').next()?, 16).ok();
        if port(f.get(1)?)? != local || port(f.get(2)?)? != remote {
            return None;
        }
        let (tx, rx) = f.get(4)?.split_once(':')?;
        Some((
            u64::from_str_radix(tx, 16).ok()?,
            u64::from_str_radix(rx, 16).ok()?,
        ))
    })
}

/// The events of a whole HTTP/1.1 chunked SSE response read from `stream`: the data lines, `[DONE]` as a string.
async fn read_all(stream: &mut tokio::net::TcpStream) -> (usize, Vec<Value>) {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let events = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect();
    (bytes.len(), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_of_answers_larger_than_socket_buffers_hold_nobody_back() {
    let server = ServeProcess::start(&[]);
    let port: u16 = server.root.rsplit(':').next().unwrap().parse().unwrap();
    let before = server.rss_mb().unwrap();

    let mut stalled = Vec::new();
    for i in 0..STALLED {
        stalled.push(stalled_stream(&server.root, i).await);
    }
    // Clients that read as they go, started while the stalled ones are not reading.
    let http = reqwest::Client::new();
    let mut fast = Vec::new();
    for i in 0..8usize {
        let http = http.clone();
        let root = server.root.clone();
        fast.push(tokio::spawn(async move {
            let body = json!({"messages": [{"role": "user", "content": format!("Say hello, number {i}.")}],
                              "max_tokens": 16, "temperature": 0, "stream": true});
            super::stream_chat(&http, &root, &body, Duration::ZERO).await
        }));
    }
    for f in fast {
        assert!(
            tokio::time::timeout(Duration::from_secs(300), f)
                .await
                .expect("a reading client was held back by the stalled ones")
                .unwrap(),
            "a reading client's stream ended without [DONE]"
        );
    }

    // The stalled answers fill the sockets: bytes wait unread on our side and unsent on the server's.
    let mut filled = 0;
    for _ in 0..600 {
        filled = stalled
            .iter()
            .filter(|s| {
                let local = s.local_addr().unwrap().port();
                let ours = queues(local, port).map_or(0, |q| q.1);
                let theirs = queues(port, local).map_or(0, |q| q.0);
                ours > 0 && theirs > 0
            })
            .count();
        if filled == STALLED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = server.rss_mb().unwrap();
    assert_eq!(
        filled, STALLED,
        "the stalled answers never filled their sockets"
    );
    for s in &stalled {
        let local = s.local_addr().unwrap().port();
        eprintln!(
            "stalled socket: {} bytes unread here, {} unsent by the server",
            queues(local, port).map_or(0, |q| q.1),
            queues(port, local).map_or(0, |q| q.0)
        );
    }

    // Read again: every answer whole.
    for (i, s) in stalled.iter_mut().enumerate() {
        let (bytes, events) = read_all(s).await;
        assert_eq!(events.last(), Some(&json!("[DONE]")), "stream {i}");
        let tokens: usize = events
            .iter()
            .filter_map(|e| e["choices"][0]["logprobs"]["content"].as_array())
            .map(Vec::len)
            .sum();
        assert_eq!(tokens, TOKENS, "stream {i}: tokens delivered");
        let finish = events
            .iter()
            .filter_map(|e| e["choices"][0]["finish_reason"].as_str())
            .next_back();
        assert_eq!(finish, Some("length"), "stream {i}");
        assert!(
            bytes > 256 * 1024,
            "stream {i}: {bytes} bytes is not larger than the socket buffers"
        );
        eprintln!("stalled stream {i}: {bytes} bytes, {tokens} tokens");
    }
    eprintln!("server RSS before {before:.0} MB, with {STALLED} stalled answers {during:.0} MB");
    assert!(
        during < before + 512.0,
        "the server grew from {before:.0} to {during:.0} MB"
    );
    let (status, _) = super::get(&format!("{}/health", server.root)).await;
    assert_eq!(status, 200);
}
