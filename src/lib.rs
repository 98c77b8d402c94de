//! llmreplay: replay LLM request traces against inference servers at the trace's own
//! timestamps, and measure what the servers did.
//!
//! Data flows one way: [`trace`] -> [`fleet`] (endpoints, routing) + [`prompt`] + [`api`]
//! (request bodies in each endpoint's dialect) -> [`pipeline`] (producers, bounded channel)
//! -> [`sender`] (mio loops over [`transport`] and [`http`]) -> [`record`] -> [`stats`] ->
//! [`report`]. [`cli`] parses the command line, [`plan`] validates it into plain values,
//! [`commands`] run them; [`mock`] is the built-in server. [`sys`] is the floor: the clock,
//! pinning, limits, raw socket calls, signals and civil time, and every `unsafe` block.
//! Enums named by words (`--route`, `"format"`) are declared with [`choices!`], which gives
//! them `FromStr`, `Display` and `Serialize` from one list of names.

pub mod api;
pub mod capture;
pub mod carry;
pub mod choice;
pub mod cli;
pub mod commands;
pub mod digest;
pub mod ending;
pub mod error;
pub mod error_rate;
pub mod expected_cache;
pub mod fleet;
pub mod headline;
pub mod http;
pub mod jsonl;
pub mod load;
pub mod mock;
pub mod ntp;
pub mod pipeline;
pub mod plan;
pub mod prefix_cache;
pub mod printable;
pub mod progress;
pub mod prompt;
pub mod record;
pub mod rendezvous;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod secrets;
pub mod sender;
pub mod server_metrics;
pub mod server_timing;
pub mod session;
pub mod shard;
pub mod stats;
pub mod synthetic;
pub mod sys;
pub mod trace;
pub mod transport;

use std::io::Write;

use cli::{Cli, Command};
use commands::report::Reported;
use ending::Ending;
pub use error::{Error, Result};
use plan::{CalibratePlan, OutputFormat, PromptsPlan, ReplayPlan};

pub use ending::{NO_SUCCESS_EXIT_CODE, STOPPED_EXIT_CODE};

/// Points `TMPDIR` beside the command's outputs, so that temporary files (a spooled trace, the
/// results.xlsx writer's sheet) never go to /tmp: an image with no /tmp or a read-only root
/// (a scratch container, a Kubernetes pod) runs, and nothing is written outside the results.
/// For the binary, before any thread starts (the environment may only be set then); a
/// library caller keeps its own.
pub fn temporary_files_beside_outputs(cli: &Cli) {
    use std::path::{Path, PathBuf};
    let parent = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let results_root = || PathBuf::from("llmreplay-results");
    let dir = match &cli.command {
        Command::Replay(a) if a.dry_run => return,
        Command::Replay(a) => a.output.as_deref().map_or_else(results_root, parent),
        Command::Sweep(a) => a.replay.output.as_deref().map_or_else(results_root, parent),
        Command::Merge(a) => parent(&a.out),
        Command::Report(a) => match (&a.output, a.dirs.first()) {
            (Some(o), _) => parent(o),
            (None, Some(d)) if d.is_dir() => d.clone(),
            (None, Some(d)) => parent(d),
            (None, None) => return,
        },
        _ => return,
    };
    if std::fs::create_dir_all(&dir).is_err() {
        return; // the command itself says why it cannot write there
    }
    if let Ok(dir) = std::fs::canonicalize(&dir) {
        std::env::set_var("TMPDIR", dir);
    }
}

/// Runs one command line and returns the exit status; the binary's `main` maps an error to
/// its own status (CONTRACT §2).
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Replay(args) => replay_command(&args),
        Command::Sweep(args) => sweep_command(&args),
        Command::Mock(args) => mock_command(&args),
        Command::Report(args) => report_command(&args),
        Command::Prompts(args) => prompts_command(&args),
        Command::Calibrate(args) => calibrate_command(&args),
        Command::Merge(args) => merge_command(&args),
        Command::Watch(args) => watch_command(&args),
        Command::K8sJob(args) => k8s_job_command(&args),
        Command::Inspect(args) => inspect_command(&args),
        Command::Capture(args) => capture_command(&args),
    }
}

/// `replay`: the run, its summary, where its results are, and its exit status.
fn replay_command(args: &cli::ReplayArgs) -> Result<i32> {
    let plan = ReplayPlan::from_args(args)?;
    if plan.dry_run {
        commands::replay::dry_run(&plan)?;
        return Ok(0);
    }
    if plan.null_sink {
        commands::replay::null_sink(&plan)?;
        return Ok(0);
    }
    sys::stop::install_signal_handlers();
    let outcome = commands::replay::run(&plan)?;
    print_summary(&outcome.summary, plan.output_format);
    if plan.tls.insecure {
        eprintln!("note: --insecure: server certificates were not verified");
    }
    let place = match &outcome.copy_path {
        None => format!("results in {}", outcome.dir.display()),
        Some(copy) => format!(
            "results in {} (requests also in {})",
            outcome.dir.display(),
            copy.display()
        ),
    };
    let ending = &outcome.ending;
    match ending {
        Ending::Completed => eprintln!("{place}"),
        Ending::Signal => eprintln!("stopped early by a signal; {place}"),
        Ending::MaxErrorRate { reason }
        | Ending::WriteFailed { reason }
        | Ending::ShardLost { reason } => {
            eprintln!("{place}\nerror: {reason}")
        }
        Ending::NoSuccess { failed, hint } => {
            let first = outcome.summary.first_error_by_kind.iter().next();
            eprintln!(
                "{place}\nerror: no request succeeded ({failed} failed){}",
                first.map_or(String::new(), |(kind, m)| format!(
                    "; first {kind} error: {m}"
                ))
            );
            if let Some(hint) = hint {
                eprintln!("hint: {hint}");
            }
        }
    }
    // What summary.json says (`ended.exit_code`: --strict's 4 included) is what the
    // process exits with.
    let said = outcome.summary.ended.as_ref();
    let code = said.and_then(|e| e["exit_code"].as_i64());
    Ok(code.map_or(ending.exit_code(), |c| c as i32))
}

/// `sweep`: the steps, their table, and whether any step passed.
fn sweep_command(args: &cli::SweepArgs) -> Result<i32> {
    let plan = plan::SweepPlan::from_args(args)?;
    sys::stop::install_signal_handlers();
    let sweep = commands::sweep::run(&plan)?;
    print!("{}", sweep.table());
    eprintln!("sweep results in {}", plan.dir.display());
    Ok(match (sweep.stopped, sweep.passed) {
        (true, _) => STOPPED_EXIT_CODE,
        (false, Some(_)) => 0,
        (false, None) => NO_SUCCESS_EXIT_CODE,
    })
}

/// `mock`: serves until stopped.
fn mock_command(args: &cli::MockArgs) -> Result<i32> {
    let cfg = plan::mock_config(args)?;
    match &cfg.counting {
        mock::PromptCounting::Approximate => eprintln!(
            "mock: no --tokenizer: usage.prompt_tokens counts words, an estimate; each \
             response says so ({}) and llmreplay reports input lengths as not checked",
            mock::APPROXIMATE_COUNT_HEADER
        ),
        _ => eprintln!(
            "mock: counting prompts with the tokenizer on {} background threads, and one \
             for requests that wait on their count",
            cfg.count_threads
        ),
    }
    let server = mock::MockServer::start(args.listen, cfg)
        .map_err(|e| Error::Run(format!("mock: cannot listen on {}: {e}", args.listen)))?;
    println!("listening on {}", server.addr());
    let _ = std::io::stdout().flush();
    server
        .wait()
        .map_err(|e| Error::Run(format!("mock: {e}")))?;
    Ok(0)
}

/// `report`: one run rendered again, or several compared.
fn report_command(args: &cli::ReportArgs) -> Result<i32> {
    let render = plan::render_options(&args.results)?;
    let format = args.results.output_format;
    let timings = plan::server_timings(&args.server_timings)?;
    if !timings.is_empty() {
        let [dir] = args.dirs.as_slice() else {
            return Err(Error::Usage(
                "--server-timings joins one run directory's records: give one DIR".into(),
            ));
        };
        let joined = commands::report::join_server_timings(dir, &timings)?;
        eprintln!("{joined}");
    }
    match commands::report::run(&args.dirs, args.output.as_deref(), &render, format)? {
        Reported::One(summary, dir) => {
            print_summary(&summary, format);
            eprintln!(
                "re-rendered summary.json, summary.txt, report.html, results.xlsx in {}",
                dir.display()
            );
        }
        Reported::Compared { page } => {
            eprintln!("comparison page in {}", page.display())
        }
    }
    Ok(0)
}

/// `prompts`: the prompts built (and checked, with `--verify`).
fn prompts_command(args: &cli::PromptsArgs) -> Result<i32> {
    let report = commands::prompts::run(&PromptsPlan::from_args(args)?)?;
    print_json_or_text(&report, args.json);
    match &report.verify {
        Some(v) if v.failed() > 0 || v.prefix_pairs_differing > 0 => Err(Error::Run(format!(
            "{} of {} verified prompts are not exact, {} shared prefixes differ",
            v.failed(),
            v.checked,
            v.prefix_pairs_differing
        ))),
        _ => Ok(0),
    }
}

/// `calibrate`: the highest rate this host keeps on schedule.
fn calibrate_command(args: &cli::CalibrateArgs) -> Result<i32> {
    let calibration = commands::calibrate::run(&CalibratePlan::from_args(args)?, args.json)?;
    print_json_or_text(&calibration, args.json);
    Ok(0)
}

/// `merge`: the shards joined; the merged run's exit status.
fn merge_command(args: &cli::MergeArgs) -> Result<i32> {
    crate::sys::stop::exit_on_signal();
    let merged = commands::merge::run(&plan::hosts::merge_plan(args)?)?;
    print_summary(&merged.summary, args.results.output_format);
    eprint!("{merged}");
    eprintln!("merged run in {}", merged.dir.display());
    Ok(merged
        .summary
        .ended
        .as_ref()
        .and_then(|e| e["exit_code"].as_i64())
        .map_or(0, |c| c as i32))
}

/// `watch`: the shards' heartbeats until all end.
fn watch_command(args: &cli::WatchArgs) -> Result<i32> {
    let view = commands::watch::run(&plan::hosts::watch_plan(args)?, |line| eprintln!("{line}"))?;
    // As a run's: 2 when a shard failed, stopped or was lost.
    Ok(match view.trouble.is_empty() {
        true => 0,
        false => ending::RUN_ERROR_EXIT_CODE,
    })
}

/// `k8s-job`: the manifest on stdout.
fn k8s_job_command(args: &cli::K8sJobArgs) -> Result<i32> {
    let plan = plan::hosts::k8s_job_plan(args)?;
    for w in &plan.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", commands::k8s_job::manifest(&plan));
    Ok(0)
}

/// `capture`: the proxy until a signal or `--max-requests`, then what went through.
fn capture_command(args: &cli::CaptureArgs) -> Result<i32> {
    let plan = plan::CapturePlan::from_args(args)?;
    let first = capture::parts::Parts::path(&plan.output, &plan.rotation, 0);
    sys::stop::install_signal_handlers();
    let stats = commands::capture::run(plan)?;
    let files = match stats.parts {
        1 => first.display().to_string(),
        n => format!(
            "{n} parts, {} to {}",
            first.display(),
            stats.last_part.display()
        ),
    };
    eprintln!(
        "capture: {} requests in {files} ({} failed); {} bodies that could not be read, {} left \
         out by --sample and {} other requests went through unrecorded",
        stats.recorded, stats.failed, stats.unread, stats.sampled_out, stats.other
    );
    if let Some(why) = &stats.unread_why {
        eprintln!(
            "capture: the first body that could not be read: {}",
            printable::printable(why)
        );
    }
    Ok(0)
}

/// `inspect`: what a trace holds.
fn inspect_command(args: &cli::InspectArgs) -> Result<i32> {
    let read = trace::ReadOptions {
        skip_invalid: args.input.skip_invalid,
        max_records: None,
    };
    let (_, stats) = commands::inspect(
        &trace::TraceFile::resolve(&args.trace, None)?,
        args.format,
        args.block_size,
        read,
        args.input.strict,
    )?;
    print_json_or_text(&stats, args.json);
    Ok(0)
}

/// `--json`: `value` as pretty JSON on stdout; else as its text.
fn print_json_or_text<T: serde::Serialize + std::fmt::Display>(value: &T, json: bool) {
    match json {
        true => println!(
            "{}",
            serde_json::to_string_pretty(value).expect("outputs serialise")
        ),
        false => print!("{value}"),
    }
}

fn print_summary(summary: &stats::Summary, format: OutputFormat) {
    let text = match format {
        OutputFormat::Text => summary.to_table(),
        OutputFormat::Json => {
            let mut t = serde_json::to_string_pretty(&summary.to_json()).expect("JSON");
            t.push('\n');
            t
        }
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
