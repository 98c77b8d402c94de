//! `llmreplay replay`: wires the stages together.
//!
//! trace (validated up front) -> prompt synthesis -> endpoints (probed, models found) ->
//! producers (route, build bodies) -> bounded channel -> senders -> records -> collector
//! (JSONL, flushed per batch) -> summary and reports. [`setup`] prepares and checks; this file
//! starts the threads, collects the records and finishes.

mod cache_check;
mod carrying;
mod collect;
mod describe;
mod diagnose;
mod mock;
mod null_sink;
mod run_json;
mod setup;
mod start;
mod time_zero;

pub use null_sink::null_sink;
use start::{start, Stages};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use crate::ending::Ending;
use crate::error::{Error, Result};
use crate::error_rate::ErrorRateJudge;
use crate::expected_cache::{ExpectedPrefixHits, SharedModel};
use crate::pipeline::Produced;
use crate::plan::ReplayPlan;
use crate::progress::{LiveProgress, Snapshot};
use crate::record::{RecordFormat, RecordWriter, RequestRecord};
use crate::rendezvous::Rendezvous;
use crate::report;
use crate::sender::SenderReport;
use crate::stats::Summary;
use crate::sys::stop::signals_received;
use setup::{Fleet, Output, Say, TraceInput};

/// What a finished replay leaves behind.
pub struct RunOutcome {
    pub summary: Summary,
    /// The run directory.
    pub dir: PathBuf,
    pub requests_path: PathBuf,
    /// `--output-path`: the copy of the records written there.
    pub copy_path: Option<PathBuf>,
    pub sender_cpu_s: f64,
    /// Successful read(2) calls of all senders (tokens per read shows how reads batch).
    pub sender_reads: u64,
    /// Connections open when the clock started (spare ones and the trace opening's).
    pub connections_at_start: usize,
    /// How it ended (completed, stopped by a signal or by `--max-error-rate`, ...): the
    /// exit status, and what run.json, the summary and report.html say.
    pub ending: Ending,
}

/// `--dry-run`: reads the trace and says what the run would do, sending nothing.
pub fn dry_run(plan: &ReplayPlan) -> Result<()> {
    let synthetic = setup::write_synthetic(plan)?;
    let trace = setup::scan_trace(plan, &Say(false));
    if let Some(temp) = synthetic {
        std::fs::remove_file(&temp).ok();
    }
    let trace = trace?;
    let (line, warnings) = describe::describe(plan, &trace);
    println!("{line}");
    for w in warnings {
        println!("warning: {w}");
    }
    Ok(())
}

/// One model of the servers' caches for a run (its priming pass and measured run share it).
fn expected_model(plan: &ReplayPlan) -> SharedModel {
    Arc::new(std::sync::Mutex::new(ExpectedPrefixHits::new(
        plan.expected_cache_blocks,
        plan.server_block_size,
    )))
}

pub fn run(plan: &ReplayPlan) -> Result<RunOutcome> {
    let say = Say(plan.quiet);
    let synthetic = setup::write_synthetic(plan)?;
    let mut meeting = time_zero::join(plan)?;
    let outcome = run_trace(plan, &say, meeting.as_mut());
    if let Some(rv) = meeting.as_mut() {
        time_zero::say_how_it_ended(rv, &outcome);
    }
    if let Some(temp) = synthetic {
        // Kept with the run's results (the same load can be replayed as a trace).
        if let Ok(o) = &outcome {
            let to = o.dir.join("synthetic_trace.jsonl");
            std::fs::copy(&temp, &to).map_err(|e| Error::io(&to, e))?;
        }
        std::fs::remove_file(&temp).ok();
    }
    outcome
}

fn run_trace(
    plan: &ReplayPlan,
    say: &Say,
    mut meeting: Option<&mut Rendezvous>,
) -> Result<RunOutcome> {
    let trace = setup::scan_trace(plan, say)?;
    let (line, warnings) = describe::describe(plan, &trace);
    say.say(line);
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let prompts = setup::prepare_prompts(plan, &setup::endpoint_apis(plan), &trace, say)?;
    let mock = mock::start_mock(plan, &prompts, trace.stats.block_size, say)?;
    let fleet = setup::connect(plan, mock.as_ref())?;
    let clock_check = time_zero::check_clock(plan, &fleet, say)?;
    if plan.sessions.require_cache_report {
        let cached = cache_check::require_cache_report(&fleet, plan.extra_body.as_ref())?;
        say.say(format!(
            "cache report: a repeated prompt found {} cached tokens (per endpoint)",
            cached
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let out = setup::prepare_output(plan, &trace)?;
    // One model for the priming pass and the measured run: what the first leaves in the
    // servers' caches, the second finds.
    let expected = expected_model(plan);
    if plan.prime {
        let primed = prime(
            plan,
            &trace,
            prompts.clone(),
            &fleet,
            &out.dir,
            &expected,
            say,
        )?;
        if let Some(stopped) = primed {
            return Ok(stopped);
        }
    }
    let scrape = setup::scrape_config(plan, &fleet, say)?;
    let offset = clock_check.as_ref().map(|c| c.offset_ns);
    let at = time_zero::meet(plan, &trace, meeting.as_deref_mut(), offset, say)?;
    let run_id = time_zero::run_id(plan, &trace, at);
    if let (Some(rv), Some(id)) = (meeting.as_deref(), &run_id) {
        rv.name_run(id);
    }
    let starting = time_zero::Starting {
        clock_check,
        at,
        run_id,
    };
    let stages = start(
        plan, &trace, prompts, &fleet, &out, scrape, &expected, starting, say,
    )?;
    let collected = collect::collect(plan, &trace, &stages, out, meeting)?;
    let outcome = finish(plan, &fleet, stages, collected);
    if let Some(m) = mock {
        let late = m.stop().ok().and_then(|s| s.lateness.summary(false));
        if let Some(late) = late {
            eprintln!("warning: {late}");
        }
    }
    outcome
}

/// `--prime`: the same schedule once, unmeasured, into `dir/prime`, against the same servers
/// (the in-process mock included), so that the measured run meets filled caches. Returns the
/// priming pass's outcome when a signal stopped it (nothing more runs); a priming pass that
/// ended otherwise than complete is an error: the caches were not filled as planned.
fn prime(
    plan: &ReplayPlan,
    trace: &TraceInput,
    prompts: setup::Prompts,
    fleet: &Fleet,
    dir: &std::path::Path,
    expected: &SharedModel,
    say: &Say,
) -> Result<Option<RunOutcome>> {
    let mut pass = plan.clone();
    pass.output = Some(dir.join("prime"));
    pass.output_path = None;
    pass.force = true;
    pass.quiet = true;
    pass.scrape = None;
    // Primed as soon as ready; the measured run is the one that starts at --start-at.
    pass.hosts.start_at_unix_ns = None;
    pass.hosts.ntp = None;
    pass.hosts.rendezvous = None;
    say.say(format!(
        "priming: the same schedule once, unmeasured, to fill the servers' caches (its records: \
         {})",
        dir.join("prime").display()
    ));
    let out = setup::prepare_output(&pass, trace)?;
    // Its requests are named apart from the measured run's (a server may refuse an id it has
    // seen).
    let run = time_zero::requests_run(plan.hosts.run_id.as_deref(), trace);
    let starting = time_zero::Starting {
        run_id: Some(format!("{run}-prime")),
        ..Default::default()
    };
    let stages = start(
        &pass, trace, prompts, fleet, &out, None, expected, starting, say,
    )?;
    let collected = collect::collect(&pass, trace, &stages, out, None)?;
    let outcome = finish(&pass, fleet, stages, collected)?;
    match outcome.ending {
        Ending::Completed => Ok(None),
        Ending::Signal => Ok(Some(outcome)),
        ending => Err(Error::Run(format!(
            "--prime: the priming pass did not fill the caches ({}); nothing was measured (its \
             records are in {})",
            ending.describe(),
            outcome.dir.display()
        ))),
    }
}

/// Waits for every producer: what they did together, or the first one's error.
fn join_producers(producers: Vec<JoinHandle<Result<Produced>>>) -> Result<Produced> {
    let (mut error, mut produced) = (None, Produced::default());
    for p in producers {
        let result = p
            .join()
            .unwrap_or_else(|_| Err(Error::Run("a producer thread panicked".into())));
        match result {
            Ok(p) => produced.add(p),
            Err(e) => error = error.or(Some(e)),
        }
    }
    error.map_or(Ok(produced), Err)
}

/// Joins the threads and renders the outputs from requests.jsonl, as `report DIR` does.
fn finish(
    plan: &ReplayPlan,
    fleet: &Fleet,
    stages: Stages,
    c: collect::Collected,
) -> Result<RunOutcome> {
    let producer_error = join_producers(stages.producers).err();
    if let Some(log) = &stages.builder.prompt_log {
        log.finish()?;
    }
    if let Some(n) = stages
        .builder
        .dataset
        .as_ref()
        .map(|d| d.fallbacks())
        .filter(|&n| n > 0)
    {
        eprintln!(
            "warning: {n} records got synthetic text: no cut of their dataset text came to their \
             input_length (one shorter than what the chat template adds cannot)"
        );
    }
    let mut senders = SenderReport::default();
    for s in stages.senders {
        let report: SenderReport = s
            .join()
            .map_err(|_| Error::Run("a sender thread panicked".into()))?
            .map_err(|e| Error::Run(format!("sender: {e}")))?;
        senders.add(report);
    }
    if let Some(scraper) = stages.scraper {
        scraper.finish();
    }
    // Said in run.json, which report renders read with the records.
    let mut run = report::run_config(&c.dir).unwrap_or_default();
    // Nothing answered, and connections were closed without a word: ask whether an http://
    // endpoint is a TLS port.
    let hint = || match (c.measured_ok, c.closed_unanswered) {
        (0, 1..) => fleet.plain_http_to_tls(),
        _ => None,
    };
    let ending = match (c.stopped, &c.stopped_early) {
        _ if c.write_failed.is_some() => Ending::WriteFailed {
            reason: c.write_failed.clone().unwrap_or_default(),
        },
        _ if c.shard_lost.is_some() => Ending::ShardLost {
            reason: c.shard_lost.clone().unwrap_or_default(),
        },
        (true, _) => Ending::Signal,
        (false, Some(reason)) => Ending::MaxErrorRate {
            reason: match hint() {
                Some(h) => format!("{reason}; {h}"),
                None => reason.clone(),
            },
        },
        (false, None) if c.measured_ok == 0 => Ending::NoSuccess {
            failed: c.measured_failed,
            hint: hint(),
        },
        (false, None) => Ending::Completed,
    };
    run["ended"] = ending.to_json();
    // The planned records that a session bound kept from being sent (the schedule's count is
    // then an upper bound: sent + turns_cut = records).
    run["schedule"]["turns_cut"] = json!(senders.turns_cut);
    // Sessions still waiting for a place at the bound (their turns are among those cut).
    run["schedule"]["sessions_dropped"] = json!(senders.sessions_dropped);
    let end_ns = stages.clock.now_ns();
    // For the verdict: how busy the senders were, how many requests reached them late, and
    // (for its causes) how busy the machine was at the end.
    run["senders"] = json!({
        "threads": plan.num_sender,
        "cpu_s": senders.cpu_ns as f64 / 1e9,
        "wall_s": end_ns.saturating_sub(stages.t0_ns) as f64 / 1e9,
        "arrived_late": senders.arrived_late,
        "queued_late": senders.queued_late,
        "out_of_descriptors": senders.out_of_descriptors,
    });
    run["host"] = crate::sys::host_load();
    run["clock"]["end"] = json!({
        "run_ns": end_ns.saturating_sub(stages.t0_ns),
        "monotonic_ns": crate::sys::clock::on_monotonic(&stages.clock, end_ns),
    });
    // `--ntp`: checked again at the end (the clock may have been stepped during the run).
    if let Some(server) = &plan.hosts.ntp {
        run["clock_check"]["end"] = match crate::ntp::check(server) {
            Ok(c) => c.to_json(),
            Err(e) => json!({"error": e}),
        };
    }
    report::write_json(&c.dir.join("run.json"), &run)?;
    // Everything in the directory is rendered from requests.jsonl, as `report DIR` does.
    report::save_itl(&c.dir, &senders.gaps)?;
    let summary = report::render(&c.dir, &c.requests_path, &plan.render)?;
    if let Some(e) = producer_error {
        return Err(e);
    }
    Ok(RunOutcome {
        summary,
        dir: c.dir,
        requests_path: c.requests_path,
        copy_path: c.copy_path,
        sender_cpu_s: senders.cpu_ns as f64 / 1e9,
        sender_reads: senders.reads,
        connections_at_start: stages.connections_at_start,
        ending,
    })
}
