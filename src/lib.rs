//! llmreplay: replay LLM request traces against inference servers at the trace's own
//! timestamps, and measure what the servers did.
//!
//! Data flows one way: [`trace`] -> [`prompt`] + [`api`] (request bodies) -> [`pipeline`]
//! (producers, bounded channel) -> [`sender`] (mio loops over [`http`]) -> [`record`] ->
//! [`stats`] -> [`report`]. [`mock`] is the built-in server; [`cli`] the command line.

pub mod affinity;
pub mod api;
pub mod calibrate;
pub mod cli;
pub mod clock;
pub mod error;
pub mod fleet;
pub mod http;
pub mod limits;
pub mod mock;
pub mod pipeline;
pub mod progress;
pub mod prompt;
pub mod prompts;
pub mod record;
pub mod replay;
pub mod report;
pub mod sender;
pub mod sockopt;
pub mod stats;
pub mod stop;
pub mod trace;
pub mod transport;

use std::io::Write;

use cli::{Cli, Command};
pub use error::{Error, Result};

/// Runs one command line and returns the exit status; the binary's `main` maps an error to
/// its own status (CONTRACT §2).
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Replay(args) => {
            stop::install_signal_handlers();
            let outcome = replay::replay(&args)?;
            print_summary(&outcome.summary, args.results.output_format);
            let place = match &outcome.dir {
                Some(dir) => format!("results in {}", dir.display()),
                None => format!("requests in {}", outcome.requests_path.display()),
            };
            if outcome.stopped {
                eprintln!("stopped early by a signal; {place}");
                return Ok(stop::STOPPED_EXIT_CODE);
            }
            eprintln!("{place}");
            Ok(0)
        }
        Command::Mock(args) => {
            let server = mock::MockServer::start(args.listen, args.config()?)
                .map_err(|e| Error::Run(format!("mock: cannot listen on {}: {e}", args.listen)))?;
            println!("listening on {}", server.addr());
            let _ = std::io::stdout().flush();
            server
                .wait()
                .map_err(|e| Error::Run(format!("mock: {e}")))?;
            Ok(0)
        }
        Command::Report(args) => report_command(&args).map(|()| 0),
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
                _ => Ok(0),
            }
        }
        Command::Calibrate(args) => {
            let calibration = calibrate::run(&args)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&calibration).expect("calibration serialises")
                );
            } else {
                print!("{calibration}");
            }
            Ok(0)
        }
        Command::Inspect(args) => {
            let format = trace::detect_format(&args.trace, args.format)?;
            let block = args.block_size.unwrap_or(format.default_block_size());
            let options = trace::ReadOptions {
                skip_invalid: args.input.skip_invalid,
                max_records: None,
            };
            let stats = trace::inspect::scan(&args.trace, format, block, options)?;
            if args.input.strict {
                stats.require_order(&args.trace)?;
            }
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&stats).expect("stats serialise")
                );
            } else {
                print!("{stats}");
            }
            Ok(0)
        }
    }
}

fn print_summary(summary: &stats::Summary, format: cli::OutputFormat) {
    let text = match format {
        cli::OutputFormat::Text => summary.to_table(),
        cli::OutputFormat::Json => {
            let mut t = serde_json::to_string_pretty(&summary.to_json()).expect("JSON");
            t.push('\n');
            t
        }
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `llmreplay report DIR [DIR2]`.
fn report_command(args: &cli::ReportArgs) -> Result<()> {
    let opts = args.results.render_options()?;
    let requests = |dir: &std::path::Path| {
        let path = dir.join("requests.jsonl");
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::Usage(format!(
                "{}: no requests.jsonl (give a run directory written by llmreplay replay)",
                dir.display()
            )))
        }
    };
    match args.dirs.as_slice() {
        [dir] => {
            let summary = report::render(dir, &requests(dir)?, &opts)?;
            print_summary(&summary, args.results.output_format);
            eprintln!(
                "re-rendered summary.json, summary.txt, report.html, results.xlsx in {}",
                dir.display()
            );
            Ok(())
        }
        [a, b] => {
            let mut run_a = report::load_run(a, &requests(a)?, &opts, None)?;
            let mut run_b = report::load_run(b, &requests(b)?, &opts, None)?;
            let rows = report::compare::rows(&run_a.summary, &run_b.summary);
            let (name_a, name_b) = (a.display().to_string(), b.display().to_string());
            match args.results.output_format {
                cli::OutputFormat::Text => {
                    print!("{}", report::compare::table(&rows, &name_a, &name_b))
                }
                cli::OutputFormat::Json => println!(
                    "{}",
                    serde_json::json!({
                        "a": {"dir": name_a, "summary": run_a.summary.to_json()},
                        "b": {"dir": name_b, "summary": run_b.summary.to_json()},
                    })
                ),
            }
            let page = report::compare::page(&rows, &mut run_a, &mut run_b, &name_a, &name_b);
            let path = args
                .output
                .clone()
                .unwrap_or_else(|| b.join("compare.html"));
            report::write_atomic(&path, page.as_bytes())?;
            eprintln!("comparison page in {}", path.display());
            Ok(())
        }
        _ => Err(Error::Usage(
            "report takes one or two run directories".into(),
        )),
    }
}
