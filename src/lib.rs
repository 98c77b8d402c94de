//! llmreplay: replay LLM request traces against inference servers at the trace's own
//! timestamps, and measure what the servers did.
//!
//! Data flows one way: [`trace`] -> [`prompt`] + [`api`] (request bodies) -> [`pipeline`]
//! (producers, bounded channel) -> [`sender`] (mio loops over [`http`]) -> [`record`] ->
//! [`stats`] -> [`report`]. [`mock`] is the built-in server; [`cli`] the command line.

pub mod affinity;
pub mod api;
pub mod cli;
pub mod clock;
pub mod error;
pub mod http;
pub mod mock;
pub mod pipeline;
pub mod prompt;
pub mod prompts;
pub mod record;
pub mod replay;
pub mod report;
pub mod sender;
pub mod stats;
pub mod trace;

use std::io::Write;

use cli::{Cli, Command};
pub use error::{Error, Result};

/// Runs one command line; the binary's `main` maps the error to an exit status.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Replay(args) => {
            let outcome = replay::replay(&args)?;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(outcome.summary.to_table().as_bytes());
            match &outcome.dir {
                Some(dir) => eprintln!("results in {}", dir.display()),
                None => eprintln!("requests in {}", outcome.requests_path.display()),
            }
            Ok(())
        }
        Command::Mock(args) => {
            let server = mock::MockServer::start(args.listen, args.config()?)
                .map_err(|e| Error::Run(format!("mock: cannot listen on {}: {e}", args.listen)))?;
            println!("listening on {}", server.addr());
            let _ = std::io::stdout().flush();
            server
                .wait()
                .map_err(|e| Error::Run(format!("mock: {e}")))?;
            Ok(())
        }
        Command::Prompts(args) => {
            let report = prompts::run(&args)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("report serialises")
                );
            } else {
                print!("{report}");
            }
            match &report.verify {
                Some(v) if v.exact < v.checked || v.prefix_pairs_differing > 0 => {
                    Err(Error::Run(format!(
                        "{} of {} verified prompts are not exact, {} shared prefixes differ",
                        v.checked - v.exact,
                        v.checked,
                        v.prefix_pairs_differing
                    )))
                }
                _ => Ok(()),
            }
        }
        Command::Inspect(args) => {
            let format = trace::detect_format(&args.trace, args.format)?;
            let block = args.block_size.unwrap_or(format.default_block_size());
            let stats = trace::inspect::scan(&args.trace, format, block, None)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&stats).expect("stats serialise")
                );
            } else {
                print!("{stats}");
            }
            Ok(())
        }
    }
}
