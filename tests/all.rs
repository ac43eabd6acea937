//! All integration tests compile into one binary (one model load shared by many tests).
// Tests are exempt from the crate's `unwrap_used` / `expect_used` denial: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Without the `local` feature the engine's tests are left out, and some helpers they share with the rest go unused.
#![cfg_attr(not(feature = "local"), allow(dead_code, unused_imports))]
mod suite;
