//! `llmreplay replay`: wires the stages together.
//!
//! trace (validated up front) -> producers -> bounded channel -> senders -> records ->
//! collector (JSONL, flushed per batch) -> summary and reports.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::affinity;
use crate::api::{Api, BodyOptions};
use crate::cli::{ms_to_ns, ReplayArgs};
use crate::clock::RunClock;
use crate::error::{Error, Result};
use crate::fleet::{EndpointSpec, Load, Route, Router};
use crate::http::endpoint::Endpoint;
use crate::http::probe;
use crate::limits;
use crate::mock::{MockConfig, MockServer, PromptCounting};
use crate::pipeline::{
    spawn_producers, BodyStyle, BufferPool, ChannelBudget, PromptLog, RequestBuilder, Schedule,
    ToSenders,
};
use crate::progress::{LiveProgress, Snapshot};
use crate::prompt;
use crate::record::{RecordWriter, RequestRecord};
use crate::report;
use crate::sender::{spawn_sender, Progress, SenderConfig, SenderReport, StartGate, Target};
use crate::stats::{latency_histogram, Summary, SummaryBuilder};
use crate::stop::{signals_received, StopRequest};
use crate::trace::{detect_format, inspect, OrderedReader, ReadOptions, TraceReader};
use crate::transport::{ClientTls, TlsOptions, TlsTarget};

/// Time between the senders' connections being open and the first possible deadline:
/// producers have been filling the channel since before the connections, and go on.
const START_LEAD_NS: u64 = 500_000_000;
/// Connections for the requests due in the run's first second are opened before the start...
const WARM_WINDOW_MS: f64 = 1000.0;
/// ...up to this many per sender and endpoint: a bound on what is opened in one go.
const WARM_MAX_PER_POOL: usize = 16_384;
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a finished replay leaves behind.
pub struct RunOutcome {
    pub summary: Summary,
    /// The output directory, when one was written.
    pub dir: Option<PathBuf>,
    pub requests_path: PathBuf,
    pub sender_cpu_s: f64,
    /// Successful read(2) calls of all senders (tokens per read shows how reads batch).
    pub sender_reads: u64,
    /// The run was stopped early by a signal (the outputs hold what was measured until then).
    pub stopped: bool,
    /// Connections open when the clock started (spare ones and the trace opening's).
    pub connections_at_start: usize,
}

pub fn replay(args: &ReplayArgs) -> Result<RunOutcome> {
    check_args(args)?;
    let format = detect_format(&args.trace, args.format)?;
    let block_size = args
        .prompt
        .block_size
        .unwrap_or(format.default_block_size());
    let read_options = ReadOptions {
        skip_invalid: args.input.skip_invalid,
        max_records: args.max_requests,
    };
    let trace_stats = inspect::scan(&args.trace, format, block_size, read_options)?;
    if args.input.strict {
        trace_stats.require_order(&args.trace)?;
    }
    if trace_stats.records == 0 {
        return Err(Error::Trace {
            file: args.trace.clone(),
            line: 1,
            message: "the trace has no records".into(),
        });
    }
    let say = |msg: String| {
        if !args.quiet {
            eprintln!("{msg}");
        }
    };
    say(format!(
        "trace {}: {} records ({:?}), {:.1} s of trace time, {:.2} req/s",
        args.trace.display(),
        trace_stats.records,
        format,
        trace_stats.span_ms / 1000.0,
        trace_stats.mean_rate()
    ));

    for w in trace_stats.warnings() {
        eprintln!("warning: {w}");
    }
    if trace_stats.hash_length_mismatches > 0 {
        say(format!(
            "note: {} records have a hash_ids count that disagrees with ceil(input_length / {block_size}): \
             their prompts are padded or cut to input_length",
            trace_stats.hash_length_mismatches
        ));
    }

    // Endpoints as given (the in-process mock's address is known once it runs).
    let default_api = args.api.unwrap_or(Api::OpenaiChat);
    let mut specs: Vec<EndpointSpec> = args
        .endpoints
        .iter()
        .map(|text| EndpointSpec::parse(text, args.api, default_api).map_err(Error::Usage))
        .collect::<Result<_>>()?;
    let apis: Vec<Api> = if args.mock {
        vec![default_api]
    } else {
        specs.iter().map(|s| s.api).collect()
    };

    // Prompt synthesis, only when some record carries lengths instead of text: one
    // synthesiser per way the endpoints' servers wrap the content.
    let needs_tokenizer = trace_stats.verbatim_records < trace_stats.records;
    // Distinct wrappings, each with an API that needs it; and each endpoint's wrapping.
    let mut wrappings: Vec<(prompt::Wrapping, Api)> = Vec::new();
    let mut synth_of_endpoint = Vec::with_capacity(apis.len());
    for &api in &apis {
        let wrapping = args.prompt.wrapping(api)?;
        let at = match wrappings.iter().position(|(w, _)| *w == wrapping) {
            Some(at) => at,
            None => {
                wrappings.push((wrapping, api));
                wrappings.len() - 1
            }
        };
        synth_of_endpoint.push(at);
    }
    let mut synths = Vec::new();
    for &(_, api) in wrappings.iter().filter(|_| needs_tokenizer) {
        let Some(opts) = args.prompt.synth_options(api, format)? else {
            return Err(Error::Usage(
                "the trace gives lengths, not text: give --tokenizer PATH (a tokenizer.json or a model directory) to synthesise prompts"
                    .into(),
            ));
        };
        let prepared = prompt::prepare(&opts)?;
        say(prepared.description);
        if let Some(w) = prepared.warning {
            eprintln!("warning: {w}");
        }
        synths.push(prepared.synth);
    }
    let chat_overhead = wrappings
        .iter()
        .position(|(w, _)| *w == prompt::Wrapping::Chat)
        .and_then(|i| synths.get(i))
        .map_or(0, |s| s.overhead());

    // Endpoints: the in-process mock, or the given servers.
    let mock = if args.mock {
        let cfg = MockConfig {
            ttft_ns: ms_to_ns(args.mock_ttft_ms),
            itl_ns: ms_to_ns(args.mock_itl_ms),
            // The in-process mock counts words; it is told the template overhead measured
            // above so that its usage.prompt_tokens stands for what a server would count.
            counting: PromptCounting::Words { chat_overhead },
            ..MockConfig::default()
        };
        let server = MockServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), cfg)
            .map_err(|e| Error::Run(format!("cannot start the mock: {e}")))?;
        say(format!("mock server on {}", server.addr()));
        Some(server)
    } else {
        None
    };
    if let Some(m) = &mock {
        let url = format!("http://{}", m.addr());
        specs =
            vec![EndpointSpec::parse(&url, Some(default_api), default_api).map_err(Error::Usage)?];
    }
    let endpoints: Vec<Endpoint> = specs.iter().map(|s| s.endpoint.clone()).collect();
    let addrs: Vec<SocketAddr> = endpoints
        .iter()
        .map(|e| e.resolve().map_err(Error::Usage))
        .collect::<Result<_>>()?;
    let tls = tls_targets(&endpoints, &args.tls_options())?;
    if args.insecure && tls.iter().any(Option::is_some) {
        eprintln!("warning: --insecure: server certificates are not verified");
    }
    let mut reachable = 0;
    for ((e, addr), tls) in endpoints.iter().zip(&addrs).zip(&tls) {
        match probe::reachable(*addr, tls.as_ref(), PROBE_TIMEOUT) {
            Ok(()) => reachable += 1,
            Err(probe::ProbeError::Tls(err)) => {
                return Err(Error::Run(format!("endpoint {}: {err}", e.url)))
            }
            Err(probe::ProbeError::Connect(err)) => eprintln!(
                "warning: endpoint {} ({addr}) is not reachable: {err}",
                e.url
            ),
        }
    }
    if reachable == 0 {
        return Err(Error::Run(
            "no endpoint is reachable; nothing was sent".into(),
        ));
    }

    let auth = std::env::var(&args.api_key_env)
        .ok()
        .filter(|k| !k.is_empty());
    let mut extra_headers = String::new();
    if let Some(key) = &auth {
        extra_headers.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    for h in &args.headers {
        extra_headers.push_str(&parse_header(h)?);
    }
    // Each endpoint's model: its own `model=`, else --model, else what it serves.
    let models: Vec<String> = specs
        .iter()
        .zip(&addrs)
        .zip(&tls)
        .map(
            |((spec, addr), tls)| match spec.model.as_ref().or(args.model.as_ref()) {
                Some(m) => Ok(m.clone()),
                None => discover_model(spec, *addr, tls.as_ref(), &extra_headers),
            },
        )
        .collect::<Result<_>>()?;
    if !args.no_exact_output {
        for spec in specs.iter().filter(|s| !s.api.enforces_output_length()) {
            eprintln!(
                "warning: endpoint {}: the {} API cannot ask for exactly output_length tokens \
                 (no min_tokens or ignore_eos): outputs are only capped at it",
                spec.endpoint.url,
                spec.api.name()
            );
        }
    }

    // Output.
    let dir = match (&args.output, &args.output_path) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(report::default_dir()),
    };
    if let Some(d) = &dir {
        report::prepare_dir(d, args.force)?;
    }
    let requests_path = args.output_path.clone().unwrap_or_else(|| {
        dir.as_ref()
            .expect("a dir or a path")
            .join("requests.jsonl")
    });
    let requests_file = File::create(&requests_path).map_err(|e| Error::io(&requests_path, e))?;
    warn_if_disk_short(&requests_path, &trace_stats, args.record_itl);

    let stream = !args.no_stream;
    let extra_body = match &args.extra_body {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Some(m),
            _ => {
                return Err(Error::Usage(format!(
                    "--extra-body {text:?}: expected a JSON object"
                )))
            }
        },
    };
    let num_sender = args.num_sender.max(1);
    let cores = core_affinity::get_core_ids().map_or(1, |c| c.len());
    let num_producer = args
        .num_producer
        .unwrap_or_else(|| cores.saturating_sub(num_sender).max(1));
    let placement = affinity::plan(&args.pin_cores, num_sender, num_producer)?;
    // This thread collects the records: keep it, and the helpers it starts, off the senders'
    // cores.
    let _pinned = affinity::pin_current_to(&placement.producers);
    let pools = endpoints.len() * num_sender;
    let fd_limit = check_fd_limit(args.connections.max(1) * pools, &say)?;
    let warm_connections = warm_connections(
        trace_stats.opening_count(WARM_WINDOW_MS * args.time_scale),
        pools,
        args.connections.max(1),
        fd_limit,
    );
    let prompt_log =
        match (&dir, args.save_prompts) {
            (Some(d), true) => Some(PromptLog::create(&d.join("prompts.jsonl"))?),
            (None, true) => return Err(Error::Usage(
                "--save-prompts writes prompts.jsonl into the output directory: give --output DIR"
                    .into(),
            )),
            (_, false) => None,
        };
    let channel_budget = Arc::new(ChannelBudget::new(args.channel_mb.max(1) << 20, num_sender));
    // Requests a sender holds in its deadline heap.
    let lookahead = (args.channel_capacity / num_sender).clamp(16, 1024);
    // Room for every buffer that can be out at once: in the channel, in the senders' heaps
    // and being built.
    let buffers = BufferPool::new(args.channel_capacity + num_sender * lookahead + num_producer);
    let styles = specs
        .iter()
        .zip(&models)
        .zip(&synth_of_endpoint)
        .map(|((spec, model), &synth)| BodyStyle {
            api: spec.api,
            body: BodyOptions {
                model_json: json!(model).to_string(),
                stream,
                exact_output: !args.no_exact_output,
                extra_body: extra_body.clone(),
            },
            synth: (!synths.is_empty()).then_some(synth),
        })
        .collect();
    let builder = Arc::new(RequestBuilder {
        styles,
        synths,
        cache_bytes_per_producer: args.prompt.block_cache_bytes() / num_producer,
        prompt_log,
        buffers: buffers.clone(),
    });
    if let Some(w) = &placement.warning {
        say(format!("warning: {w}"));
    }

    keep_bodies_off_mmap();
    let clock = RunClock::new();
    let stop_request = Arc::new(StopRequest::default());
    let start = Arc::new(StartGate::new(num_sender));
    let targets: Vec<Target> = specs
        .iter()
        .zip(&addrs)
        .zip(tls)
        .map(|((spec, addr), tls)| Target {
            url: spec.endpoint.url.clone(),
            addr: *addr,
            request_head: request_head(
                &spec.endpoint,
                spec.api.path(stream),
                stream,
                &extra_headers,
            ),
            tls,
            api: spec.api,
        })
        .collect();
    // Routing. `least-inflight` is decided by the senders among endpoints that take the
    // same body (dialect, model, prompt synthesis); the producers pick among the groups.
    let weights: Vec<u32> = specs.iter().map(|s| s.weight).collect();
    let load = Arc::new(Load::new(&weights));
    let body_of = |e: usize| {
        let style = &builder.styles[e];
        (style.api, style.body.model_json.as_str(), style.synth)
    };
    let peers: Vec<Vec<u32>> = (0..specs.len())
        .map(|e| {
            (0..specs.len())
                .filter(|&o| body_of(o) == body_of(e))
                .map(|o| o as u32)
                .collect()
        })
        .collect();
    let router = match args.route {
        Route::LeastInflight => {
            let mut groups: Vec<u32> = peers.iter().map(|p| p[0]).collect();
            groups.sort_unstable();
            groups.dedup();
            Router::least_inflight(Arc::clone(&load), groups, &weights)
        }
        route => Router::new(route, &weights),
    };
    let sender_cfg = Arc::new(SenderConfig {
        targets,
        load,
        peers: (args.route == Route::LeastInflight).then_some(peers),
        stream,
        request_timeout_ns: (args.request_timeout * 1e9) as u64,
        first_token_timeout_ns: args.first_token_timeout.map(|s| (s * 1e9) as u64),
        drain_timeout_ns: (args.drain_timeout * 1e9) as u64,
        stop: Arc::clone(&stop_request),
        spare_connections: args.connections.max(1),
        warm_connections,
        lookahead,
        spin_ns: args.spin_us * 1000,
        record_itl: args.record_itl,
        read_coalesce_ns: args.read_coalesce_us * 1000,
        buffers,
        channel_budget: Arc::clone(&channel_budget),
        realtime: args.realtime,
        start: Arc::clone(&start),
    });

    // Start the stages.
    let (tx, rx) = crossbeam_channel::bounded(args.channel_capacity.max(1));
    let (rec_tx, rec_rx) = crossbeam_channel::unbounded::<RequestRecord>();
    let schedule = Schedule {
        origin_ms: trace_stats.first_timestamp_ms,
        time_scale: args.time_scale,
        duration_ms: args.duration.map(|d| d * 1000.0),
    };
    let reader =
        OrderedReader::new(TraceReader::open(&args.trace, format)?.with_options(read_options));
    let producers = spawn_producers(
        num_producer,
        reader,
        router,
        schedule,
        Arc::clone(&builder),
        ToSenders {
            tx,
            budget: channel_budget,
        },
        placement.producers.clone(),
        Arc::clone(&stop_request),
    );
    let progress = Arc::new(Progress::default());
    let senders: Vec<_> = (0..num_sender)
        .map(|i| {
            spawn_sender(
                i,
                Arc::clone(&sender_cfg),
                clock.clone(),
                rx.clone(),
                rec_tx.clone(),
                Arc::clone(&progress),
                placement.senders[i],
            )
        })
        .collect();
    drop(rx);
    drop(rec_tx);

    // The start: once every sender has its opening connections, the clock begins.
    let opening = (warm_connections + args.connections.max(1)) * pools;
    if opening >= 1000 {
        say(format!(
            "opening {opening} connections for the trace's first second before the start"
        ));
    }
    let connections_at_start =
        start.wait_ready(|id| senders[id].is_finished(), || signals_received() > 0);
    let t0_ns = clock.now_ns() + START_LEAD_NS;
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        + START_LEAD_NS / 1_000_000;
    start.start(t0_ns);
    if let Some(d) = &dir {
        let fleet: Vec<Value> = specs
            .iter()
            .zip(&models)
            .zip(&builder.styles)
            .map(|((spec, model), style)| {
                json!({
                    "url": spec.endpoint.url,
                    "api": spec.api,
                    "model": model,
                    "weight": spec.weight,
                    "prompt_overhead_tokens": style.synth.map(|i| builder.synths[i].overhead()),
                })
            })
            .collect();
        let mut run = run_json(
            args,
            format,
            block_size,
            &trace_stats,
            fleet,
            num_producer,
            num_sender,
            auth.is_some(),
            started_unix_ms,
        );
        run["connections_at_start"] = json!(connections_at_start);
        report::write_json(&d.join("run.json"), &run)?;
    }

    // Collect records as they complete.
    let mut writer = RecordWriter::new(requests_file);
    let render = args.results.render_options()?;
    let mut summary = SummaryBuilder::new(render.slo.clone());
    let span_s = match args.duration {
        Some(d) => (trace_stats.span_ms / 1000.0).min(d),
        None => trace_stats.span_ms / 1000.0,
    };
    let mut live = LiveProgress::new(trace_stats.records, span_s, args.time_scale, !args.quiet);
    let write_err = |e| Error::io(&requests_path, e);
    let mut stopped = false;
    loop {
        if !stopped && signals_received() > 0 {
            stopped = true;
            stop_request.request(clock.now_ns());
            live.finish();
            eprintln!(
                "stopping: nothing new is sent; waiting up to {} s for requests in flight \
                 (signal again to exit at once)",
                args.drain_timeout
            );
        }
        match rec_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(first) => {
                for r in std::iter::once(first).chain(rec_rx.try_iter()) {
                    writer.write(&r).map_err(write_err)?;
                    summary.add(&r);
                    live.add(&r);
                }
                writer.flush().map_err(write_err)?;
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
        if !stopped {
            live.tick(Snapshot {
                sent: progress.sent.load(Ordering::Relaxed),
                run_s: (clock.now_ns() as f64 - t0_ns as f64) / 1e9,
            });
        }
    }
    writer.flush().map_err(write_err)?;
    if !stopped {
        live.finish();
    }

    let mut producer_error = None;
    for p in producers {
        match p.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => producer_error = producer_error.or(Some(e)),
            Err(_) => {
                producer_error =
                    producer_error.or(Some(Error::Run("a producer thread panicked".into())))
            }
        }
    }
    if let Some(log) = &builder.prompt_log {
        log.finish()?;
    }
    let mut itl = latency_histogram();
    let mut token_itl = latency_histogram();
    let mut sender_cpu_ns = 0;
    let mut sender_reads = 0;
    for s in senders {
        let report: SenderReport = s
            .join()
            .map_err(|_| Error::Run("a sender thread panicked".into()))?
            .map_err(|e| Error::Run(format!("sender: {e}")))?;
        itl.add(&report.itl_ns).ok();
        token_itl.add(&report.token_itl_ns).ok();
        sender_cpu_ns += report.cpu_ns;
        sender_reads += report.reads;
    }
    if let Some(m) = mock {
        m.stop().ok();
    }

    let mut summary = summary.finish(&itl, &token_itl, &render.percentiles);
    if let Some(d) = &dir {
        // Everything in the directory is rendered from requests.jsonl, as `report DIR` does.
        report::save_itl(d, &itl, &token_itl)?;
        summary = report::render(d, &requests_path, &render)?;
    }
    if let Some(e) = producer_error {
        return Err(e);
    }
    Ok(RunOutcome {
        summary,
        dir,
        requests_path,
        sender_cpu_s: sender_cpu_ns as f64 / 1e9,
        sender_reads,
        stopped,
        connections_at_start,
    })
}

fn check_args(args: &ReplayArgs) -> Result<()> {
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{name} must be a positive number, got {v}"
            )))
        }
    };
    positive("--time-scale", args.time_scale)?;
    positive("--request-timeout", args.request_timeout)?;
    if let Some(t) = args.first_token_timeout {
        positive("--first-token-timeout", t)?;
    }
    if !(args.drain_timeout.is_finite() && args.drain_timeout >= 0.0) {
        return Err(Error::Usage(format!(
            "--drain-timeout must be zero or more seconds, got {}",
            args.drain_timeout
        )));
    }
    if let Some(d) = args.duration {
        positive("--duration", d)?;
    }
    if !args.mock && args.endpoints.is_empty() {
        return Err(Error::Usage(
            "give --endpoint URL (repeatable), or --mock to use the built-in mock server".into(),
        ));
    }
    if args.channel_capacity == 0 || args.num_sender == 0 || args.num_producer == Some(0) {
        return Err(Error::Usage(
            "--channel-capacity, --num-sender and --num-producer must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Request bodies of large prompts (100 KB and more) would each be an mmap/munmap pair in
/// glibc's default malloc, and every such call takes the process's memory-map lock, which a
/// producer faulting in fresh bodies holds: measured as 10-15 ms sender stalls at the start of a
/// run. Raising the mmap threshold keeps bodies in the heap arenas.
fn keep_bodies_off_mmap() {
    // SAFETY: mallopt only tunes glibc's allocator; it is called before the worker threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        // Nor give freed memory back after each large free (that takes the same lock).
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Connections each sender opens per endpoint before the start, beyond the spare ones: its
/// share of the `opening` requests (those due in the run's first second). At most half the
/// descriptors left after the spare pools, so that the run keeps room to grow, and at most
/// [`WARM_MAX_PER_POOL`].
fn warm_connections(opening: usize, pools: usize, spare: usize, fd_limit: u64) -> usize {
    let free = fd_limit.saturating_sub(limits::FD_RESERVE + (spare * pools) as u64);
    let room = usize::try_from(free / 2).unwrap_or(usize::MAX) / pools.max(1);
    opening
        .div_ceil(pools.max(1))
        .min(room)
        .min(WARM_MAX_PER_POOL)
}

/// Raises the descriptor limit to the hard limit (returned); refuses a limit too low for the
/// connection pools, and warns when it caps how many requests can be in flight.
fn check_fd_limit(pooled: usize, say: &impl Fn(String)) -> Result<u64> {
    let limit = limits::raise_fd_limit();
    let needed = pooled as u64 + limits::FD_RESERVE;
    if limit < needed {
        return Err(Error::Usage(format!(
            "ulimit -n is {limit}, but the connection pools alone need {needed} file descriptors: \
             raise it (ulimit -n 65536) or lower --connections / --num-sender"
        )));
    }
    if limit < 4096 {
        say(format!(
            "warning: ulimit -n is {limit} (hard limit): at most ~{} requests can be in flight at once; \
             raise it (ulimit -n 65536) for more",
            limit - limits::FD_RESERVE
        ));
    }
    Ok(limit)
}

/// Warns when the output's file system has less room than the records will probably take
/// (a rough estimate: a few hundred bytes a record, more with --record-itl).
fn warn_if_disk_short(requests_path: &std::path::Path, stats: &inspect::TraceStats, itl: bool) {
    let dir = requests_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let per_record = 700
        + if itl {
            24 * stats.output_tokens / stats.records.max(1)
        } else {
            0
        };
    let needed = stats.records * per_record;
    if let Some(free) = limits::free_bytes(dir) {
        if free < needed {
            eprintln!(
                "warning: {} has {} MB free; the records may need about {} MB",
                dir.display(),
                free >> 20,
                needed >> 20
            );
        }
    }
}

/// Validates `Name: value` and returns it as a header line.
fn parse_header(h: &str) -> Result<String> {
    let bad = || Error::Usage(format!("-H {h:?}: expected 'Name: value'"));
    let (name, value) = h.split_once(':').ok_or_else(bad)?;
    let name = name.trim();
    if name.is_empty()
        || name.bytes().any(|b| !b.is_ascii_graphic())
        || value.contains(['\r', '\n'])
    {
        return Err(bad());
    }
    Ok(format!("{name}: {}\r\n", value.trim()))
}

/// The request line and fixed headers of every request to `endpoint`.
fn request_head(endpoint: &Endpoint, api_path: &str, stream: bool, extra_headers: &str) -> Vec<u8> {
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: llmreplay/{}\r\nAccept: {accept}\r\nContent-Type: application/json\r\n{extra_headers}",
        endpoint.request_path(api_path),
        endpoint.host_header(),
        env!("CARGO_PKG_VERSION"),
    )
    .into_bytes()
}

/// TLS for each https endpoint (the client configuration is built once, and only when one
/// is https).
fn tls_targets(endpoints: &[Endpoint], options: &TlsOptions) -> Result<Vec<Option<TlsTarget>>> {
    let mut client = None;
    endpoints
        .iter()
        .map(|e| {
            if !e.tls {
                return Ok(None);
            }
            if client.is_none() {
                client = Some(ClientTls::new(options).map_err(Error::Usage)?);
            }
            let client = client.as_ref().expect("built above");
            client
                .target(&e.host)
                .map(Some)
                .map_err(|m| Error::Usage(format!("endpoint {}: {m}", e.url)))
        })
        .collect()
}

/// The model an endpoint serves: the first of `GET /v1/models` (under its base URL), or for
/// TGI the `model_id` of `GET /info` (TGI's body names no model: there it is only recorded).
fn discover_model(
    spec: &EndpointSpec,
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    headers: &str,
) -> Result<String> {
    let e = &spec.endpoint;
    let discovery = spec.api.discovery();
    let path = e.request_path(discovery.path);
    let why = match probe::get(addr, tls, &e.host_header(), &path, headers, PROBE_TIMEOUT) {
        Ok((200, body)) => match (discovery.model)(&body) {
            Some(m) => return Ok(m),
            None => format!("GET {path} names no model"),
        },
        Ok((status, _)) => format!("GET {path} answered {status}"),
        Err(err) => format!("GET {path} failed: {err}"),
    };
    if !spec.api.body_names_model() {
        eprintln!(
            "warning: endpoint {}: {why}; its model is recorded as unknown",
            e.url
        );
        return Ok("unknown".into());
    }
    Err(Error::Usage(format!(
        "endpoint {}: could not discover the model name ({why}); give --model NAME (or model= on the endpoint)",
        e.url
    )))
}

/// `run.json`: the resolved configuration (never a secret). `fleet` has one object per
/// endpoint (url, api, model, weight, prompt overhead); `api` and `model` at the top are
/// theirs when all endpoints agree, else the list of them.
#[allow(clippy::too_many_arguments)]
fn run_json(
    args: &ReplayArgs,
    format: crate::trace::Format,
    block_size: u32,
    stats: &inspect::TraceStats,
    fleet: Vec<Value>,
    num_producer: usize,
    num_sender: usize,
    has_api_key: bool,
    started_unix_ms: u64,
) -> Value {
    let common = |key: &str| {
        let values: Vec<&Value> = fleet.iter().map(|e| &e[key]).collect();
        if values.iter().all(|v| *v == values[0]) {
            values[0].clone()
        } else {
            json!(values)
        }
    };
    // Header values may be credentials: only their names are saved.
    let header_names: Vec<&str> = args
        .headers
        .iter()
        .filter_map(|h| h.split_once(':').map(|(n, _)| n.trim()))
        .collect();
    let mut m = Map::new();
    m.insert("tool".into(), json!("llmreplay"));
    m.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("started_unix_ms".into(), json!(started_unix_ms));
    m.insert("trace".into(), json!(args.trace));
    m.insert("format".into(), json!(format));
    m.insert("block_size".into(), json!(block_size));
    m.insert(
        "trace_stats".into(),
        serde_json::to_value(stats).unwrap_or(Value::Null),
    );
    m.insert(
        "endpoints".into(),
        json!(fleet.iter().map(|e| &e["url"]).collect::<Vec<_>>()),
    );
    m.insert("route".into(), json!(args.route));
    m.insert(
        "mock".into(),
        json!(args
            .mock
            .then(|| json!({"ttft_ms": args.mock_ttft_ms, "itl_ms": args.mock_itl_ms}))),
    );
    m.insert("api".into(), common("api"));
    m.insert("model".into(), common("model"));
    m.insert("stream".into(), json!(!args.no_stream));
    m.insert("exact_output".into(), json!(!args.no_exact_output));
    m.insert("tokenizer".into(), json!(args.prompt.tokenizer));
    m.insert(
        "tokenizer_config".into(),
        json!(args.prompt.tokenizer_config),
    );
    m.insert("input_length_of".into(), json!(args.prompt.input_length_of));
    m.insert("prompt_mode".into(), json!(args.prompt.prompt_mode));
    m.insert(
        "prompt_overhead_tokens".into(),
        common("prompt_overhead_tokens"),
    );
    m.insert("fleet".into(), json!(fleet));
    m.insert("block_cache_mb".into(), json!(args.prompt.block_cache_mb));
    m.insert("save_prompts".into(), json!(args.save_prompts));
    m.insert("seed".into(), json!(args.prompt.seed));
    m.insert("time_scale".into(), json!(args.time_scale));
    m.insert("duration_s".into(), json!(args.duration));
    m.insert("max_requests".into(), json!(args.max_requests));
    m.insert("num_producer".into(), json!(num_producer));
    m.insert("num_sender".into(), json!(num_sender));
    m.insert("channel_capacity".into(), json!(args.channel_capacity));
    m.insert("channel_mb".into(), json!(args.channel_mb));
    m.insert("pin_cores".into(), json!(args.pin_cores));
    m.insert("connections".into(), json!(args.connections));
    m.insert("request_timeout_s".into(), json!(args.request_timeout));
    m.insert("record_itl".into(), json!(args.record_itl));
    m.insert("spin_us".into(), json!(args.spin_us));
    m.insert("realtime".into(), json!(args.realtime));
    m.insert("read_coalesce_us".into(), json!(args.read_coalesce_us));
    m.insert("header_names".into(), json!(header_names));
    m.insert(
        "api_key".into(),
        json!(has_api_key.then(|| format!("from ${} (not saved)", args.api_key_env))),
    );
    m.insert("extra_body".into(), json!(args.extra_body));
    m.insert(
        "tls".into(),
        json!({"verify_certificates": !args.insecure, "ca_cert": args.ca_cert}),
    );
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_connections_share_the_opening_within_the_descriptors() {
        // 1000 opening requests over 2 senders x 2 endpoints, plenty of descriptors.
        assert_eq!(warm_connections(1000, 4, 8, 1 << 20), 250);
        // Half of what is left after the reserve and the spare pools: (1024-64-32)/2/4 = 116.
        assert_eq!(warm_connections(1000, 4, 8, 1024), 116);
        assert_eq!(warm_connections(1 << 20, 1, 8, u64::MAX), WARM_MAX_PER_POOL);
        assert_eq!(warm_connections(0, 1, 8, 1 << 20), 0);
    }
}
