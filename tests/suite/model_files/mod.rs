//! Finding, fetching and verifying model files (`agentd::model_files`): no model is loaded.

mod fetch;
