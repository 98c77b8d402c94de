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
mod time_zero;

pub use null_sink::null_sink;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use crate::api::BodyOptions;
use crate::ending::Ending;
use crate::error::{Error, Result};
use crate::error_rate::ErrorRateJudge;
use crate::expected_cache::{ExpectedPrefixHits, SharedModel};
use crate::fleet::{Load, Route, Router};
use crate::pipeline::{
    spawn_producers, BodyStyle, BufferPool, ChannelBudget, Passes, Produced, PromptLog,
    RequestBuilder, Salts, ToSenders,
};
use crate::plan::ReplayPlan;
use crate::progress::{LiveProgress, Snapshot};
use crate::record::{RecordFormat, RecordWriter, RequestRecord};
use crate::rendezvous::Rendezvous;
use crate::report;
use crate::sender::Inbox;
use crate::sender::{
    spawn_null_sender, spawn_sender, Progress, SenderConfig, SenderReport, StartGate, Target,
};
use crate::server_metrics::{ScrapeConfig, Scraper};
use crate::session::{SessionMode, SessionTracker};
use crate::stats::Summary;
use crate::sys::affinity;
use crate::sys::clock::RunClock;
use crate::sys::limits;
use crate::sys::stop::{signals_received, StopRequest};
use setup::{Fleet, Output, Prompts, Say, TraceInput};

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
    let starting = time_zero::Starting::default();
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

/// The running threads and what the collector needs of them.
struct Stages {
    clock: RunClock,
    t0_ns: u64,
    stop: Arc<StopRequest>,
    progress: Arc<Progress>,
    records: crossbeam_channel::Receiver<RequestRecord>,
    producers: Vec<JoinHandle<Result<Produced>>>,
    senders: Vec<JoinHandle<std::io::Result<SenderReport>>>,
    builder: Arc<RequestBuilder>,
    connections_at_start: usize,
    /// `--server-metrics`, `--scrape-server`: the scraping threads.
    scraper: Option<Scraper>,
    /// The collecting thread's cores are given back when the run ends.
    _pinned: affinity::PinnedUntilDrop,
}

/// Builds the request builder, the router and the senders' configuration, starts producers
/// and senders, waits for the opening connections and starts the clock.
#[allow(clippy::too_many_arguments)]
fn start(
    plan: &ReplayPlan,
    trace: &TraceInput,
    prompts: Prompts,
    fleet: &Fleet,
    out: &Output,
    scrape: Option<ScrapeConfig>,
    expected: &SharedModel,
    starting: time_zero::Starting,
    say: &Say,
) -> Result<Stages> {
    let time_zero::Starting {
        clock_check,
        at,
        run_id,
    } = starting;
    let num_sender = plan.num_sender;
    let cores = core_affinity::get_core_ids().map_or(1, |c| c.len());
    let num_producer = plan
        .num_producer
        .unwrap_or_else(|| cores.saturating_sub(num_sender).max(1));
    let placement = affinity::plan(&plan.pin_cores, num_sender, num_producer)?;
    if let Some(w) = &placement.warning {
        say.say(format!("warning: {w}"));
    }
    // This thread collects the records: keep it, and the helpers it starts, off the senders'
    // cores, until the run ends.
    let pinned = affinity::pin_current_to(&placement.producers);
    let pools = fleet.specs.len() * num_sender;
    let fd_limit = setup::check_fd_limit(plan.connections * pools, say)?;
    // The requests of the opening moments, which get connections before the start.
    let opening = plan
        .load
        .pace
        .opening_requests(trace.preview.first_second as usize);
    let warm = limits::warm_connections(opening, pools, plan.connections, fd_limit);

    // Requests a sender holds in its deadline heap.
    let lookahead = (plan.channel_capacity / num_sender).clamp(16, 1024);
    // Room for every buffer that can be out at once: in the channel, in the senders' heaps
    // and being built.
    let buffers = BufferPool::new(plan.channel_capacity + num_sender * lookahead + num_producer);
    let tokenizer_analysis = prompts.analyses.clone();
    let carrying = plan.sessions.carry_forward.carries() && trace.stats.turns_with_parent > 0;
    let seams = Arc::new(carrying::seams(&prompts, carrying)?);
    let builder = Arc::new(request_builder(
        plan,
        trace,
        prompts,
        fleet,
        out,
        num_producer,
        &buffers,
    )?);
    let (router, load, peers) = routing(plan, fleet, &builder);

    limits::keep_bodies_off_mmap();
    let clock = RunClock::new();
    let stop = Arc::new(StopRequest::default());
    let gate = Arc::new(StartGate::new(num_sender));
    let channel_budget = Arc::new(ChannelBudget::new(plan.channel_mb << 20, num_sender));
    let sender_cfg = Arc::new(SenderConfig {
        targets: targets(plan, fleet),
        load,
        peers,
        stream: plan.stream,
        request_timeout_ns: (plan.request_timeout_s * 1e9) as u64,
        first_token_timeout_ns: plan.first_token_timeout_s.map(|s| (s * 1e9) as u64),
        stall_timeout_ns: (plan.stall_timeout_s * 1e9) as u64,
        drain_timeout_ns: (plan.drain_timeout_s * 1e9) as u64,
        stop: Arc::clone(&stop),
        spare_connections: plan.connections,
        warm_connections: warm,
        lookahead,
        spin_ns: plan.spin_us * 1000,
        record_itl: plan.record_itl,
        read_coalesce_ns: plan.read_coalesce_us * 1000,
        buffers,
        channel_budget: Arc::clone(&channel_budget),
        realtime: plan.realtime,
        in_flight_caps: (0..num_sender)
            .filter_map(|i| plan.load.per_sender_concurrency(num_sender, i))
            .collect(),
        start: Arc::clone(&gate),
        expected: Arc::clone(expected),
        session_cap: plan
            .sessions
            .max_active
            .map(|n| Arc::new(crate::sender::SessionCap::new(n))),
        session_bound_ns: trace.shaping.bound_ns(),
        seams,
        save_prompts: plan.save_prompts,
    });

    let (tx, rx) = crossbeam_channel::bounded(plan.channel_capacity);
    // Each sender's own channel: the turns of the conversations it runs.
    let (conversations, own_rx): (Vec<_>, Vec<_>) = (0..num_sender)
        .map(|_| crossbeam_channel::bounded(plan.channel_capacity))
        .unzip();
    let (rec_tx, records) = crossbeam_channel::unbounded::<RequestRecord>();
    let reader = setup::replay_reader(&trace.file, trace.format, plan.read)?;
    let (sessions, passes, measure_cuts) = sessions_and_passes(plan, trace)?;
    let producers = spawn_producers(
        num_producer,
        reader,
        passes,
        trace.shaping.shaper(),
        plan.hosts.shard.map(crate::shard::ShardFilter::new),
        router,
        sessions,
        Arc::clone(expected),
        Arc::clone(&builder),
        ToSenders {
            tx,
            conversations,
            budget: channel_budget,
        },
        placement.producers.clone(),
        Arc::clone(&stop),
    );
    // Before any load connection: each target's scrape connection and baseline scrape.
    // The reference clock (the checked one) minus this host's: the instant is on it.
    let offset_ns = clock_check.as_ref().map_or(0, |c| c.offset_ns);
    let scraper = scrape
        .map(|config| Scraper::start(config, clock.clone(), &out.dir))
        .transpose()
        .map_err(|e| Error::io(&out.dir, e))?;
    if let Some(at) = at {
        say.say(format!(
            "waiting for the common start at {}",
            crate::sys::wall_start::rfc3339_utc(at)
        ));
        let own_at = crate::sys::wall_start::on_this_host(at, offset_ns);
        crate::sys::wall_start::sleep_until(own_at, time_zero::START_AT_LEAD, || {
            signals_received() > 0
        });
    }
    let progress = Arc::new(Progress::default());
    let senders: Vec<_> = (0..num_sender)
        .map(|i| {
            let inbox = Inbox {
                shared: rx.clone(),
                own: own_rx[i].clone(),
            };
            let cfg = Arc::clone(&sender_cfg);
            match plan.null_sink {
                true => spawn_null_sender(i, cfg, inbox),
                false => {
                    let (records, progress) = (rec_tx.clone(), Arc::clone(&progress));
                    spawn_sender(
                        i,
                        cfg,
                        clock.clone(),
                        inbox,
                        records,
                        progress,
                        placement.senders[i],
                    )
                }
            }
        })
        .collect();

    // The start: once every sender has its opening connections, the clock begins.
    crate::sys::stop::run_started();
    let opening = (warm + plan.connections) * pools;
    if opening >= 1000 {
        say.say(format!(
            "opening {opening} connections for the trace's first second before the start"
        ));
    }
    let connections_at_start =
        gate.wait_ready(|id| senders[id].is_finished(), || signals_received() > 0);
    let first_built = || {
        !rx.is_empty()
            || own_rx.iter().any(|r| !r.is_empty())
            || producers.iter().all(JoinHandle::is_finished)
    };
    let (t0_ns, common_start) = time_zero::time_zero(at, offset_ns, &clock, first_built);
    let t0_monotonic_ns = crate::sys::clock::on_monotonic(&clock, t0_ns);
    let started_unix_ms = match common_start {
        Some(s) => s.actual_unix_ns,
        None => {
            let ahead = t0_ns.saturating_sub(clock.now_ns());
            crate::sys::wall_start::unix_ns_now() + ahead
        }
    } / 1_000_000;
    gate.start(t0_ns);
    if let Some(late) = common_start.filter(|s| s.late_ns > 0) {
        eprintln!(
            "warning: this host was ready {:.1} ms after --start-at: its schedule runs that much \
             later than the other shards' (run.json records it as start.late_ms)",
            late.late_ns as f64 / 1e6
        );
    }
    if let Some(scraper) = &scraper {
        scraper.begin(t0_ns);
    }
    {
        let resolved = run_json::Resolved {
            trace,
            fleet,
            builder: &builder,
            num_producer,
            started_unix_ms,
            t0_monotonic_ns,
            connections_at_start,
            common_start,
            clock_check: clock_check.as_ref(),
            run_id: run_id.as_deref(),
            tokenizer_analysis: &tokenizer_analysis,
            measure_cuts: &measure_cuts,
        };
        let run = run_json::run_json(plan, &resolved);
        report::write_json(&out.dir.join("run.json"), &run)?;
    }
    Ok(Stages {
        clock,
        t0_ns,
        stop,
        progress,
        records,
        producers,
        senders,
        builder,
        connections_at_start,
        scraper,
        _pinned: pinned,
    })
}

/// What the producers need to follow the trace's conversations (each one's last turn, and
/// `--measure-from mid`'s cuts, both one more read of the trace) and its `--loop` passes.
fn sessions_and_passes(
    plan: &ReplayPlan,
    trace: &TraceInput,
) -> Result<(SessionTracker, Passes, Arc<crate::session::MeasureCuts>)> {
    let last_turns =
        match plan.session_mode == SessionMode::AfterParent && trace.stats.turns_with_parent > 0 {
            true => Arc::new(crate::session::last_turns(setup::replay_reader(
                &trace.file,
                trace.format,
                plan.read,
            )?)?),
            false => Arc::default(),
        };
    let measure_cuts = measure_cuts(plan, trace)?;
    let salts = Salts::new(plan.prompt.salt, plan.loop_prompts);
    let passes = match plan.passes {
        1 => Passes::once(salts),
        n => {
            let (file, format, read) = (trace.file.clone(), trace.format, plan.read);
            Passes {
                left: n - 1,
                reopen: Box::new(move || setup::replay_reader(&file, format, read)),
                per_pass: trace.stats.records,
                salts,
            }
        }
    };
    let think_ns = plan.think_time_s.map(|s| (s * 1e9) as u64);
    let sessions = SessionTracker::new(plan.session_mode, think_ns, plan.time_scale)
        .with_last_turns(last_turns)
        .with_measure_cuts(Arc::clone(&measure_cuts))
        .with_carry(plan.sessions.carry_forward);
    Ok((sessions, passes, measure_cuts))
}

/// `--measure-from mid`: each conversation's measured-from instant (one more read of the
/// trace); empty otherwise.
fn measure_cuts(plan: &ReplayPlan, trace: &TraceInput) -> Result<Arc<crate::session::MeasureCuts>> {
    if plan.sessions.measure_from != crate::session::MeasureFrom::Mid {
        return Ok(Arc::default());
    }
    if trace.stats.turns_with_parent == 0 {
        return Err(Error::Usage(format!(
            "--measure-from mid draws an instant inside each conversation, but {} has none \
             (no session_id, chat_id or parent chain)",
            trace.file.shown().display()
        )));
    }
    let reader = setup::replay_reader(&trace.file, trace.format, plan.read)?;
    Ok(Arc::new(crate::session::measure_cuts(
        reader,
        plan.load.seed,
    )?))
}

/// How each endpoint's bodies are written: its dialect, model and prompt synthesis.
fn request_builder(
    plan: &ReplayPlan,
    trace: &TraceInput,
    prompts: Prompts,
    fleet: &Fleet,
    out: &Output,
    num_producer: usize,
    buffers: &BufferPool,
) -> Result<RequestBuilder> {
    let styles = fleet
        .specs
        .iter()
        .zip(&fleet.models)
        .zip(&prompts.synth_of_endpoint)
        .map(|((spec, model), &synth)| BodyStyle {
            api: spec.api,
            body: BodyOptions {
                model_json: json!(model).to_string(),
                stream: plan.stream,
                exact_output: plan.exact_output,
                extra_body: plan.extra_body.clone(),
            },
            synth: (!prompts.synths.is_empty()).then_some(synth),
        })
        .collect();
    let prompt_log = match plan.save_prompts {
        true => Some(PromptLog::create(&out.dir.join("prompts.jsonl"))?),
        false => None,
    };
    let dataset = setup::prepare_dataset(plan, &prompts)?;
    let carry = match plan.sessions.carry_forward.carries() && trace.stats.turns_with_parent > 0 {
        true => Some(carrying::turn_overheads(&prompts)?),
        false => None,
    };
    Ok(RequestBuilder {
        carry,
        carry_forward: plan.sessions.carry_forward,
        server_block: plan.server_block_size,
        dataset,
        styles,
        synths: prompts.synths,
        cache_bytes_per_producer: plan.prompt.block_cache_bytes() / num_producer,
        prompt_log,
        buffers: buffers.clone(),
        slow_build: plan.slow_build,
    })
}

/// The router of the producers, the in-flight counts, and for `least-inflight` the
/// endpoints each body suits (the senders decide among them when a request is due).
fn routing(
    plan: &ReplayPlan,
    fleet: &Fleet,
    builder: &RequestBuilder,
) -> (Router, Arc<Load>, Option<Vec<Vec<u32>>>) {
    let weights: Vec<u32> = fleet.specs.iter().map(|s| s.weight).collect();
    let load = Arc::new(Load::new(&weights));
    if plan.route != Route::LeastInflight {
        return (Router::new(plan.route, &weights), load, None);
    }
    let body_of = |e: usize| {
        let style = &builder.styles[e];
        (style.api, style.body.model_json.as_str(), style.synth)
    };
    let n = fleet.specs.len();
    let peers: Vec<Vec<u32>> = (0..n)
        .map(|e| {
            (0..n)
                .filter(|&o| body_of(o) == body_of(e))
                .map(|o| o as u32)
                .collect()
        })
        .collect();
    let mut groups: Vec<u32> = peers.iter().map(|p| p[0]).collect();
    groups.sort_unstable();
    groups.dedup();
    let router = Router::least_inflight(Arc::clone(&load), groups, &weights);
    (router, load, Some(peers))
}

/// The endpoints as the senders see them.
fn targets(plan: &ReplayPlan, fleet: &Fleet) -> Vec<Target> {
    fleet
        .specs
        .iter()
        .zip(&fleet.addrs)
        .zip(&fleet.tls)
        .map(|((spec, addr), tls)| Target {
            url: spec.endpoint.url.clone(),
            host: spec.endpoint.host_header(),
            addr: *addr,
            request_head: setup::request_head(
                &spec.endpoint,
                spec.api.path(plan.stream),
                plan.stream,
                &fleet.headers.for_endpoint(&spec.endpoint),
            ),
            tls: tls.clone(),
            api: spec.api,
        })
        .collect()
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
