//! The `agentd` binary: parse flags, fix the thread count, run the subcommand, and turn errors into a message
//! and an exit code.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Before any other thread exists: candle and rayon read the thread count once.
    #[cfg(feature = "local")]
    agentd::engine::init_threads(args.threads);
    if args.log_json || args.log_file.is_some() {
        let target = match &args.log_file {
            Some(path) => agentd::logging::LogTarget::File(path.clone()),
            None => agentd::logging::LogTarget::Stderr,
        };
        if let Err(e) = agentd::logging::init(target, args.log_json) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("AGENTD_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
