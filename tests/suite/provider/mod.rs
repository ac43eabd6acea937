//! The provider boundary: the shared contract (`contract`) run against every provider, the fake vLLM server
//! (`fake_openai`), and each provider's own tests.

pub mod contract;
pub mod fake_openai;
#[cfg(feature = "local")]
mod local;
mod remote;
mod scripted;
