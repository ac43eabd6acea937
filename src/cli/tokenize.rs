//! `agentd tokenize`: print a text's token ids as a JSON array (no model weights are loaded).

use agentd::engine::gguf::GgufFile;
use agentd::engine::tokenizer::Tokenizer;
use anyhow::Context;

use super::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    pub no_special: bool,
    pub text: String,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let opts = args.engine.options()?;
    let resolved = agentd::engine::fetch::resolve(&opts.model, &opts.fetch)?;
    let gguf = GgufFile::open(&resolved.path)?;
    let tokenizer = Tokenizer::from_gguf(&gguf).context("building the tokenizer")?;
    let ids = tokenizer.encode(&args.text, !args.no_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
