//! The integration suite, in folders by the layer each test drives (`src/`'s top-level modules), plus the
//! fuzzers and the layering check.

mod agent;
mod app;
mod cli;
#[cfg(feature = "local")]
mod clients;
mod common;
#[cfg(feature = "local")]
mod engine;
#[cfg(feature = "local")]
mod fuzz;
mod layers;
mod model_files;
mod provider;
mod server;
mod tools;
