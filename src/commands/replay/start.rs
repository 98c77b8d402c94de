//! The run's threads started: the request builder, the producers and the senders, the
//! opening connections, and the clock's time 0 (run.json is written then).

use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::json;

use super::setup::{self, Fleet, Output, Prompts, Say, TraceInput};
use super::{carrying, run_json, time_zero};
use crate::api::BodyOptions;
use crate::error::{Error, Result};
use crate::expected_cache::SharedModel;
use crate::fleet::{Load, Route, Router};
use crate::pipeline::{
    spawn_producers, BodyStyle, BufferPool, ChannelBudget, Passes, Produced, PromptLog,
    RequestBuilder, Salts, ToSenders,
};
use crate::plan::ReplayPlan;
use crate::record::RequestRecord;
use crate::report;
use crate::sender::{
    spawn_null_sender, spawn_sender, Inbox, Progress, SenderConfig, SenderReport, StartGate, Target,
};
use crate::server_metrics::{ScrapeConfig, Scraper};
use crate::session::{SessionMode, SessionTracker};
use crate::sys::affinity;
use crate::sys::clock::RunClock;
use crate::sys::limits;
use crate::sys::stop::{signals_received, StopRequest};

/// The running threads and what the collector needs of them.
pub(super) struct Stages {
    pub clock: RunClock,
    pub t0_ns: u64,
    pub stop: Arc<StopRequest>,
    pub progress: Arc<Progress>,
    pub records: crossbeam_channel::Receiver<RequestRecord>,
    pub producers: Producers,
    pub senders: Vec<JoinHandle<std::io::Result<SenderReport>>>,
    pub builder: Arc<RequestBuilder>,
    pub connections_at_start: usize,
    /// `--server-metrics`, `--scrape-server`: the scraping threads.
    pub scraper: Option<Scraper>,
    /// The collecting thread's cores are given back when the run ends.
    _pinned: affinity::PinnedUntilDrop,
}

/// How many threads of each kind, where they run, and the connections they open.
struct Threads {
    num_sender: usize,
    num_producer: usize,
    placement: affinity::Placement,
    /// Sender pools: one per endpoint per sender.
    pools: usize,
    /// Connections per pool opened before the start for the trace's opening moments.
    warm: usize,
    /// Requests a sender holds in its deadline heap.
    lookahead: usize,
}

impl Threads {
    fn plan(plan: &ReplayPlan, trace: &TraceInput, fleet: &Fleet, say: &Say) -> Result<Threads> {
        let num_sender = plan.num_sender;
        let cores = core_affinity::get_core_ids().map_or(1, |c| c.len());
        let num_producer = plan
            .num_producer
            .unwrap_or_else(|| cores.saturating_sub(num_sender).max(1));
        let placement = affinity::plan(&plan.pin_cores, num_sender, num_producer)?;
        if let Some(w) = &placement.warning {
            say.say(format!("warning: {w}"));
        }
        let pools = fleet.specs.len() * num_sender;
        let fd_limit = setup::check_fd_limit(plan.connections * pools, say)?;
        // The requests of the opening moments, which get connections before the start.
        let opening = plan
            .load
            .pace
            .opening_requests(trace.preview.first_second as usize);
        Ok(Threads {
            num_sender,
            num_producer,
            pools,
            warm: limits::warm_connections(opening, pools, plan.connections, fd_limit),
            lookahead: (plan.channel_capacity / num_sender).clamp(16, 1024),
            placement,
        })
    }

    /// Said before the start when the connections opened for it are many (they take a while).
    fn say_opening(&self, spare: usize, say: &Say) {
        let opening = (self.warm + spare) * self.pools;
        if opening >= 1000 {
            say.say(format!(
                "opening {opening} connections for the trace's first second before the start"
            ));
        }
    }

    /// Room for every buffer that can be out at once: in the channel, in the senders' heaps
    /// and being built.
    fn buffers(&self, plan: &ReplayPlan) -> BufferPool {
        BufferPool::new(
            plan.channel_capacity + self.num_sender * self.lookahead + self.num_producer,
        )
    }
}

/// Builds the request builder, the router and the senders' configuration, starts producers
/// and senders, waits for the opening connections and starts the clock.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
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
    let threads = Threads::plan(plan, trace, fleet, say)?;
    // This thread collects the records: keep it, and the helpers it starts, off the senders'
    // cores, until the run ends.
    let pinned = affinity::pin_current_to(&threads.placement.producers);
    let tokenizer_analysis = prompts.analyses.clone();
    let carrying = plan.sessions.carry_forward.carries() && trace.stats.turns_with_parent > 0;
    let seams = Arc::new(carrying::seams(&prompts, carrying)?);
    let run = time_zero::requests_run(starting.run_id.as_deref(), trace);
    let builder = Arc::new(request_builder(
        plan, trace, prompts, fleet, out, &run, &threads,
    )?);
    let (router, load, peers) = routing(plan, fleet, &builder);
    limits::keep_bodies_off_mmap();
    let clock = RunClock::new();
    let shared = Shared { load, peers, seams };
    let sender_cfg = Arc::new(sender_config(
        plan,
        trace,
        fleet,
        expected,
        (&threads, &builder),
        shared,
    ));

    let (rec_tx, records) = crossbeam_channel::unbounded::<RequestRecord>();
    let (producers, channels, measure_cuts) = start_producers(
        plan,
        trace,
        &threads,
        expected,
        &builder,
        router,
        &sender_cfg,
    )?;
    // Before any load connection: each target's scrape connection and baseline scrape.
    // The reference clock (the checked one) minus this host's: the instant is on it.
    let offset_ns = starting.clock_check.as_ref().map_or(0, |c| c.offset_ns);
    let scraper = scrape
        .map(|config| Scraper::start(config, clock.clone(), &out.dir))
        .transpose()
        .map_err(|e| Error::io(&out.dir, e))?;
    time_zero::wait_for_start_at(starting.at, offset_ns, say);
    let progress = Arc::new(Progress::default());
    let inboxes = channels.own.iter().map(|own| Inbox {
        shared: channels.shared.clone(),
        own: own.clone(),
    });
    let senders = spawn_senders(
        plan,
        &threads,
        &sender_cfg,
        &clock,
        inboxes,
        &rec_tx,
        &progress,
    );

    // The start: once every sender has its opening connections, the clock begins.
    crate::sys::stop::run_started();
    threads.say_opening(plan.connections, say);
    let gate = &sender_cfg.start;
    let connections_at_start =
        gate.wait_ready(|id| senders[id].is_finished(), || signals_received() > 0);
    let first_built = || {
        !channels.shared.is_empty()
            || channels.own.iter().any(|r| !r.is_empty())
            || producers.iter().all(JoinHandle::is_finished)
    };
    let begun = time_zero::begin(starting.at, offset_ns, &clock, first_built);
    gate.start(begun.t0_ns);
    if let Some(scraper) = &scraper {
        scraper.begin(begun.t0_ns);
    }
    let resolved = run_json::Resolved {
        trace,
        fleet,
        builder: &builder,
        num_producer: threads.num_producer,
        started_unix_ms: begun.started_unix_ms,
        t0_monotonic_ns: begun.t0_monotonic_ns,
        connections_at_start,
        common_start: begun.common_start,
        clock_check: starting.clock_check.as_ref(),
        run_id: starting.run_id.as_deref(),
        tokenizer_analysis: &tokenizer_analysis,
        measure_cuts: &measure_cuts,
    };
    report::write_json(
        &out.dir.join("run.json"),
        &run_json::run_json(plan, &resolved),
    )?;
    Ok(Stages {
        clock,
        t0_ns: begun.t0_ns,
        stop: Arc::clone(&sender_cfg.stop),
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

/// The channels to the senders (the shared one, and each sender's own for the turns of the
/// conversations it runs), and the producers started on them.
struct Channels {
    shared: crossbeam_channel::Receiver<crate::pipeline::PreparedRequest>,
    own: Vec<crossbeam_channel::Receiver<crate::pipeline::PreparedRequest>>,
}

/// Starts the producers on the trace (its `--loop` passes, sessions and shard), and the
/// channels they fill; with `--measure-from mid`'s cuts, which run.json states.
fn start_producers(
    plan: &ReplayPlan,
    trace: &TraceInput,
    threads: &Threads,
    expected: &SharedModel,
    builder: &Arc<RequestBuilder>,
    router: Router,
    cfg: &SenderConfig,
) -> Result<(Producers, Channels, Arc<crate::session::MeasureCuts>)> {
    let (tx, shared) = crossbeam_channel::bounded(plan.channel_capacity);
    let (conversations, own): (Vec<_>, Vec<_>) = (0..threads.num_sender)
        .map(|_| crossbeam_channel::bounded(plan.channel_capacity))
        .unzip();
    let reader = setup::replay_reader(&trace.file, trace.format, plan.read)?;
    let (sessions, passes, measure_cuts) = sessions_and_passes(plan, trace)?;
    let producers = spawn_producers(
        threads.num_producer,
        reader,
        passes,
        trace.shaping.shaper(),
        plan.hosts.shard.map(crate::shard::ShardFilter::new),
        router,
        sessions,
        Arc::clone(expected),
        Arc::clone(builder),
        ToSenders {
            tx,
            conversations,
            budget: Arc::clone(&cfg.channel_budget),
        },
        threads.placement.producers.clone(),
        Arc::clone(&cfg.stop),
    );
    Ok((producers, Channels { shared, own }, measure_cuts))
}

type Producers = Vec<JoinHandle<Result<Produced>>>;

/// What the senders share with the producers' side: the in-flight counts and peers of
/// `least-inflight`, the carried turns' seams.
struct Shared {
    load: Arc<Load>,
    peers: Option<Vec<Vec<u32>>>,
    seams: Arc<crate::carry::Seams>,
}

/// The senders' configuration: the targets, timeouts, pacing and the run's shared parts (its
/// stop request, start gate and channel budget are made here).
fn sender_config(
    plan: &ReplayPlan,
    trace: &TraceInput,
    fleet: &Fleet,
    expected: &SharedModel,
    (threads, builder): (&Threads, &RequestBuilder),
    shared: Shared,
) -> SenderConfig {
    let num_sender = threads.num_sender;
    SenderConfig {
        targets: targets(plan, fleet),
        load: shared.load,
        peers: shared.peers,
        stream: plan.stream,
        request_timeout_ns: (plan.request_timeout_s * 1e9) as u64,
        first_token_timeout_ns: plan.first_token_timeout_s.map(|s| (s * 1e9) as u64),
        stall_timeout_ns: (plan.stall_timeout_s * 1e9) as u64,
        drain_timeout_ns: (plan.drain_timeout_s * 1e9) as u64,
        stop: Arc::new(StopRequest::default()),
        spare_connections: plan.connections,
        warm_connections: threads.warm,
        lookahead: threads.lookahead,
        spin_ns: plan.spin_us * 1000,
        record_itl: plan.record_itl,
        read_coalesce_ns: plan.read_coalesce_us * 1000,
        buffers: builder.buffers.clone(),
        channel_budget: Arc::new(ChannelBudget::new(plan.channel_mb << 20, num_sender)),
        realtime: plan.realtime,
        in_flight_caps: (0..num_sender)
            .filter_map(|i| plan.load.per_sender_concurrency(num_sender, i))
            .collect(),
        start: Arc::new(StartGate::new(num_sender)),
        expected: Arc::clone(expected),
        session_cap: plan
            .sessions
            .max_active
            .map(|n| Arc::new(crate::sender::SessionCap::new(n))),
        session_bound_ns: trace.shaping.bound_ns(),
        seams: shared.seams,
        save_prompts: plan.save_prompts,
    }
}

/// One sender thread per inbox, each on its core; `--null-sink`: senders that send nothing.
fn spawn_senders(
    plan: &ReplayPlan,
    threads: &Threads,
    cfg: &Arc<SenderConfig>,
    clock: &RunClock,
    inboxes: impl Iterator<Item = Inbox>,
    records: &crossbeam_channel::Sender<RequestRecord>,
    progress: &Arc<Progress>,
) -> Vec<JoinHandle<std::io::Result<SenderReport>>> {
    inboxes
        .enumerate()
        .map(|(i, inbox)| match plan.null_sink {
            true => spawn_null_sender(i, Arc::clone(cfg), inbox),
            false => spawn_sender(
                i,
                Arc::clone(cfg),
                clock.clone(),
                inbox,
                records.clone(),
                Arc::clone(progress),
                threads.placement.senders[i],
            ),
        })
        .collect()
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

/// How each endpoint's bodies are written: its dialect, model and prompt synthesis, and the
/// identity of run `run`'s requests.
fn request_builder(
    plan: &ReplayPlan,
    trace: &TraceInput,
    prompts: Prompts,
    fleet: &Fleet,
    out: &Output,
    run: &str,
    threads: &Threads,
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
        cache_bytes_per_producer: plan.prompt.block_cache_bytes() / threads.num_producer,
        prompt_log,
        buffers: threads.buffers(plan),
        slow_build: plan.slow_build,
        identity: Some(plan.identity.for_run(run)),
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
            request_head: spec.endpoint.request_head(
                spec.api.path(plan.stream),
                plan.stream,
                &fleet.headers.for_endpoint(&spec.endpoint),
            ),
            tls: tls.clone(),
            api: spec.api,
        })
        .collect()
}
