//! `agentd bench fim`: completion as you type, against any server with llama.cpp's `/infill` (agentd,
//! llama-server). [`typing`] replays an editor: a cursor moves through real files, a line is typed a few
//! characters at a time, every pause sends a request (llama.vscode's shape: up to 256 lines before, 64 after,
//! `n_indent` of the line), and a request still running when the next pause comes is cancelled (the client hangs
//! up, as the editor does). Reported: time to the first piece and to the whole middle (p50/p95), the share of
//! prompt tokens the server had cached, and the share of requests cancelled. [`quality`] scores middles of
//! held-out code; [`parity`] compares two servers' greedy middles token by token up to the first near-tie.

pub mod client;
pub mod parity;
pub mod quality;
pub mod typing;

pub use client::{InfillAnswer, InfillClient};
