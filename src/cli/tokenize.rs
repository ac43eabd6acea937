//! `agentd tokenize`: print a text's token ids as a JSON array, as the model is fed them (BOS where it wants one;
//! no model weights are loaded).

use agentd::engine::{GgufFile, Tokenizer};
use anyhow::Context;

use super::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    pub no_special: bool,
    /// Leave out the BOS token a model that wants one (`tokenizer.ggml.add_bos_token`, Gemma, Llama 3) gets in
    /// front of a prompt.
    #[arg(long)]
    pub no_bos: bool,
    pub text: String,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let opts = args.engine.options()?;
    let resolved = agentd::engine::files::resolve(&opts.model, &opts.fetch)?;
    let gguf = GgufFile::open(&resolved.path)?;
    let tokenizer = Tokenizer::from_gguf(&gguf).context("building the tokenizer")?;
    let ids = tokenizer.encode(&args.text, !args.no_special)?;
    let ids = if args.no_bos {
        ids
    } else {
        tokenizer.with_bos(ids)
    };
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
