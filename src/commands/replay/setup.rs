//! What a replay checks and prepares before any thread starts: the trace, prompt synthesis,
//! the endpoints (resolved, probed, their models found) and the output files. Each step fails
//! with a usage, input or run error before anything is sent.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::api::Api;
use crate::error::{Error, Result};
use crate::fleet::{EndpointSpec, Router};
use crate::http::endpoint::Endpoint;
use crate::http::probe;
use crate::mock::MockServer;
use crate::plan::{ReplayPlan, Targets};
use crate::prompt::dataset::DatasetPrompts;
use crate::prompt::{self, PromptSynth, Wrapping};
use crate::report;
use crate::schedule::{Preview, PreviewBuilder, Shaping};
use crate::server_metrics::{self, ScrapeConfig, ScrapeTarget};
use crate::session::SessionMode;
use crate::shard::{Shard, Shares};
use crate::sys::limits;
use crate::trace::inspect::TraceStats;
use crate::trace::{Format, OrderedReader, ReadOptions, TraceFile, TraceReader, ORDER_WINDOW};
use crate::transport::{ClientTls, TlsOptions, TlsTarget};

const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Progress notes on stderr, unless `--quiet`.
pub struct Say(pub bool);

impl Say {
    pub fn say(&self, msg: String) {
        if !self.0 {
            eprintln!("{msg}");
        }
    }
}

/// The trace, read once in full and checked, and the effective schedule made of it.
pub struct TraceInput {
    /// The trace, readable again by the producers (a pipe is read once, into a spool).
    pub file: TraceFile,
    pub format: Format,
    pub block_size: u32,
    pub stats: TraceStats,
    /// Every shaping option: the producers run this very shaping.
    pub shaping: Shaping,
    /// What the shaping sends: the plan line, `--dry-run` and run.json read it.
    pub preview: Preview,
    /// `--shard`: every shard's share of that schedule, and the trace's digest (merge checks
    /// that the shards replayed the same trace).
    pub shares: Option<(Shares, String)>,
}

impl TraceInput {
    /// The session bound, where it can keep planned turns from being sent: a turn released
    /// after it by its parent's answer (or a first turn still waiting for a session place)
    /// is cut, so the schedule's record count is then an upper bound.
    pub fn bound_cutting_turns(&self, plan: &ReplayPlan) -> Option<u64> {
        let sessions = self.stats.turns_with_parent > 0 || plan.sessions.max_active.is_some();
        match plan.session_mode == SessionMode::AfterParent && sessions {
            true => self.shaping.bound_ns(),
            false => None,
        }
    }
}

/// `--synthetic`: writes the generated records where the plan's trace is; returns that path
/// (a temporary file, moved into the run directory at the end).
pub fn write_synthetic(plan: &ReplayPlan) -> Result<Option<PathBuf>> {
    let Some((spec, n)) = plan.synthetic else {
        return Ok(None);
    };
    let block = plan.prompt.block_size(Format::Mooncake);
    spec.write_trace(n, plan.prompt.seed, block, &plan.trace)
        .map_err(|e| Error::io(&plan.trace, e))?;
    Ok(Some(plan.trace.clone()))
}

pub fn scan_trace(plan: &ReplayPlan, say: &Say) -> Result<TraceInput> {
    // `--max-requests` keeps the first N records after `--start-offset`, over all `--loop`
    // passes: only without either can the scan stop at N.
    let read = ReadOptions {
        max_records: plan
            .read
            .max_records
            .filter(|_| plan.passes == 1 && plan.load.start_offset_ms == 0.0),
        ..plan.read
    };
    // A pipe is copied once; with --max-requests alone, only as far as the records kept (and
    // a reordering window beyond them) so that an endless producer ends.
    let max_lines = read
        .max_records
        .filter(|_| !read.skip_invalid)
        .map(|n| n + ORDER_WINDOW as u64 + 1);
    let file = TraceFile::resolve(&plan.trace, max_lines)?;
    let (format, stats) = crate::commands::inspect(
        &file,
        plan.format,
        plan.prompt.block_size,
        read,
        plan.strict,
    )?;
    let block_size = stats.block_size;
    let fixed = format.spec().fixed_block_size;
    if let Some(why) = fixed.filter(|_| block_size != format.default_block_size()) {
        return Err(Error::Usage(format!(
            "--block-size {block_size}: {why} {} tokens (leave --block-size out; --server-block-size sets the server's cache block)",
            format.default_block_size()
        )));
    }
    if format.is_task_graph() && plan.session_mode == crate::session::SessionMode::Timestamp {
        return Err(Error::Usage(format!(
            "--session-mode timestamp: a {} trace's turns have no arrival times of their own (each leaves after the turns it waits for, which timestamp mode ignores): use after-parent",
            format.name()
        )));
    }
    if stats.records == 0 {
        return Err(Error::Trace {
            file: plan.trace.clone(),
            line: 1,
            message: "the trace has no records".into(),
        });
    }
    let chosen = match plan.format == Format::Auto {
        true => format!(", by auto: {}", format.recognised_by()),
        false => String::new(),
    };
    say.say(format!(
        "trace {}: {} records ({:?}{chosen}), {}",
        file.shown().display(),
        stats.records,
        format,
        timing(format, &stats),
    ));
    for w in stats.warnings() {
        eprintln!("warning: {w}");
    }
    if stats.hash_length_mismatches > 0 {
        say.say(format!(
            "note: {} records have a hash_ids count that disagrees with ceil(input_length / {block_size}): \
             their prompts are padded or cut to input_length",
            stats.hash_length_mismatches
        ));
    }
    let shaping = shaping(plan, &stats);
    let preview = if stats.timestamps_ms.len() as u64 == stats.records {
        Preview::compute(&shaping, &stats.timestamps_ms)
    } else {
        preview_streamed(&file, plan, format, &shaping)?
    };
    if let Some(why) = preview.refusal(&shaping, stats.span_ms) {
        return Err(Error::Usage(why));
    }
    if let Some(w) = preview.warning() {
        eprintln!("warning: {w}");
    }
    let shares = match plan.hosts.shard {
        None => None,
        Some(shard) => Some(shard_shares(plan, &file, format, &shaping, shard)?),
    };
    Ok(TraceInput {
        file,
        format,
        block_size,
        stats,
        shaping,
        preview,
        shares,
    })
}

/// `--shard`: every shard's share (refused when this one has none, or when conversations
/// would be split across hosts), and the digest of the trace's content.
fn shard_shares(
    plan: &ReplayPlan,
    file: &TraceFile,
    format: Format,
    shaping: &Shaping,
    shard: Shard,
) -> Result<(Shares, String)> {
    let weights: Vec<u32> = match &plan.targets {
        Targets::Mock { .. } => vec![1],
        Targets::Servers(specs) => specs.iter().map(|s| s.weight).collect(),
    };
    let shares = Shares::count(
        || replay_reader(file, format, plan.read),
        shaping,
        Router::new(plan.route, &weights),
        shard,
    )?;
    let refuse = |why: String| Err(Error::Usage(format!("--shard {}: {why}", shard.name())));
    if shares.split_conversations > 0 && plan.session_mode == SessionMode::AfterParent {
        return refuse(format!(
            "--route {} puts the turns of {} conversations on endpoints of different shards, \
             where a turn could not wait for its parent's answer; use --route session (or \
             --shard-by session)",
            plan.route.name(),
            shares.split_conversations
        ));
    }
    if shares.records[shard.index as usize] == 0 {
        return refuse(format!(
            "this shard has none of the schedule's {} records (shares {:?}); use fewer shards",
            shares.records.iter().sum::<u64>(),
            shares.records
        ));
    }
    let mut content = file.open()?;
    let digest = crate::digest::digest(&mut content).map_err(|e| Error::io(file.shown(), e))?;
    Ok((shares, digest))
}

/// The preview of a trace too long to keep its timestamps: each pass read again, as the
/// producers will read it.
fn preview_streamed(
    file: &TraceFile,
    plan: &ReplayPlan,
    format: Format,
    shaping: &Shaping,
) -> Result<Preview> {
    let mut b = PreviewBuilder::new(shaping);
    for pass in 0..shaping.passes {
        let mut reader = replay_reader(file, format, plan.read)?;
        while let Some((_, ts)) = reader.next_record()? {
            if !b.add(pass, ts) {
                return Ok(b.finish());
            }
        }
    }
    Ok(b.finish())
}

/// The trace read as a replay reads it, for the producers and the preview alike: the shaper
/// ends the records (`--max-requests` among its cuts), never the reader.
pub fn replay_reader(
    trace: &TraceFile,
    format: Format,
    read: ReadOptions,
) -> Result<OrderedReader> {
    let read = ReadOptions {
        max_records: None,
        ..read
    };
    Ok(OrderedReader::new(
        TraceReader::open(trace, format)?.with_options(read),
    ))
}

/// The plan's shaping options with the trace facts they need.
fn shaping(plan: &ReplayPlan, stats: &TraceStats) -> Shaping {
    Shaping {
        origin_ms: stats.first_timestamp_ms,
        load: plan.load,
        passes: plan.passes,
        pass_shift_ms: pass_shift_ms(stats),
        per_pass: stats.records,
        max_requests: plan.read.max_records,
        duration_ms: plan.duration_s.map(|d| d * 1000.0),
        time_scale: plan.time_scale,
        wall_limit_ns: plan.wall_limit_s.map(|s| (s * 1e9) as u64),
        warmup: plan.warmup_requests,
    }
}

/// A trace's span and rate; a task graph's tasks (its turns have no arrival times).
fn timing(format: Format, stats: &TraceStats) -> String {
    match format.is_task_graph() {
        true => format!("{} tasks", stats.records - stats.turns_with_parent),
        false => format!(
            "{:.1} s of trace time, {:.2} req/s",
            stats.span_ms / 1000.0,
            stats.mean_rate()
        ),
    }
}

/// `--loop`: how much later each pass starts than the one before: the trace's span and one
/// mean gap.
pub fn pass_shift_ms(stats: &TraceStats) -> f64 {
    stats.span_ms + stats.span_ms / stats.records.max(1) as f64
}

/// `--prompt-source dataset`: the dataset, and the tokenizer that checks each cut.
pub fn prepare_dataset(
    plan: &ReplayPlan,
    prompts: &Prompts,
) -> Result<Option<Arc<DatasetPrompts>>> {
    let Some(path) = &plan.prompt_dataset else {
        return Ok(None);
    };
    let ([synth], [counter]) = (prompts.synths.as_slice(), prompts.counters.as_slice()) else {
        return Err(Error::Usage(
            "--prompt-source dataset needs --tokenizer and endpoints that all wrap prompts the \
             same way (one API)"
                .into(),
        ));
    };
    let wrapping = prompts.wrappings[0];
    let texts = prompt::dataset::load_texts(path)?;
    Ok(Some(Arc::new(DatasetPrompts::new(
        texts,
        Arc::clone(counter),
        wrapping,
        Arc::clone(synth),
        plan.prompt.seed,
    ))))
}

/// The dialect of each endpoint, before the mock (if any) has an address.
pub fn endpoint_apis(plan: &ReplayPlan) -> Vec<Api> {
    match &plan.targets {
        Targets::Mock { .. } => vec![plan.api],
        Targets::Servers(specs) => specs.iter().map(|s| s.api).collect(),
    }
}

/// Prompt synthesis: one synthesiser per way the endpoints' servers wrap the content (a chat
/// template, special tokens, nothing), only when some record gives lengths instead of text.
#[derive(Clone)]
pub struct Prompts {
    pub synths: Vec<Arc<PromptSynth>>,
    /// Per endpoint: its synthesiser (an index into `synths`, when there are any).
    pub synth_of_endpoint: Vec<usize>,
    /// What a chat template adds (for the in-process mock's count).
    pub chat_overhead: u64,
    /// The wrapping of each synthesiser.
    pub wrappings: Vec<Wrapping>,
    /// The counter (tokenizer and template) of each synthesiser, loaded once for all that
    /// count: dataset prompts and the in-process mock.
    pub counters: Vec<Arc<prompt::PromptCounter>>,
    /// Per synthesiser, for run.json: its tokenizer analysis (digests, from the cache).
    pub analyses: Vec<serde_json::Value>,
}

pub fn prepare_prompts(
    plan: &ReplayPlan,
    apis: &[Api],
    trace: &TraceInput,
    say: &Say,
) -> Result<Prompts> {
    let needs_tokenizer = trace.stats.verbatim_records < trace.stats.records;
    // Distinct wrappings, each with an API that needs it.
    let mut wrappings: Vec<(Wrapping, Api)> = Vec::new();
    let mut synth_of_endpoint = Vec::with_capacity(apis.len());
    for &api in apis {
        let wrapping = plan.prompt.wrapping(api)?;
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
    let mut counters = Vec::new();
    let mut analyses = Vec::new();
    for &(_, api) in wrappings.iter().filter(|_| needs_tokenizer) {
        let Some(opts) = plan.prompt.synth_options(api, trace.stats.block_size)? else {
            return Err(Error::Usage(
                "the trace gives lengths, not text: give --tokenizer PATH (a tokenizer.json or a model directory) to synthesise prompts"
                    .into(),
            ));
        };
        let prepared = prompt::prepare(&opts)?;
        say.say(prepared.description);
        if let Some(w) = prepared.warning {
            eprintln!("warning: {w}");
        }
        synths.push(prepared.synth);
        counters.push(Arc::new(prepared.counter));
        analyses.push(prepared.analysis);
    }
    let chat_overhead = wrappings
        .iter()
        .position(|(w, _)| *w == Wrapping::Chat)
        .and_then(|i| synths.get(i))
        .map_or(0, |s| s.overhead());
    Ok(Prompts {
        synths,
        synth_of_endpoint,
        chat_overhead,
        wrappings: wrappings.iter().map(|(w, _)| *w).collect(),
        counters,
        analyses,
    })
}

/// The endpoints, resolved and probed, with their models and the headers every request
/// carries.
pub struct Fleet {
    pub specs: Vec<EndpointSpec>,
    pub addrs: Vec<SocketAddr>,
    pub tls: Vec<Option<TlsTarget>>,
    pub models: Vec<String>,
    /// The header lines requests carry (never saved).
    pub headers: RequestHeaders,
    pub has_api_key: bool,
}

/// The -H lines, and the one `Authorization` each endpoint gets.
pub struct RequestHeaders {
    lines: String,
    /// The `Authorization` line of the API key, when one is set.
    bearer: Option<String>,
    /// -H sets `Authorization`: it is the only one sent.
    explicit_auth: bool,
}

impl RequestHeaders {
    fn new(headers: &[crate::plan::Header], key: Option<&str>) -> RequestHeaders {
        RequestHeaders {
            lines: headers.iter().map(|h| h.line.as_str()).collect(),
            bearer: key.map(|k| format!("Authorization: Bearer {k}\r\n")),
            explicit_auth: headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("authorization")),
        }
    }

    /// Every header line a request to `endpoint` carries: -H, then one `Authorization`
    /// (-H's, else the URL's credentials, else the API key).
    pub fn for_endpoint(&self, endpoint: &Endpoint) -> String {
        let auth = match self.explicit_auth {
            true => None,
            false => endpoint.basic_auth().or_else(|| self.bearer.clone()),
        };
        format!("{}{}", self.lines, auth.unwrap_or_default())
    }
}

pub fn connect(plan: &ReplayPlan, mock: Option<&MockServer>) -> Result<Fleet> {
    let specs = match (&plan.targets, mock) {
        (Targets::Servers(specs), _) => specs.clone(),
        (Targets::Mock { .. }, Some(m)) => {
            let url = format!("http://{}", m.addr());
            vec![EndpointSpec::parse(&url, Some(plan.api), plan.api)?]
        }
        (Targets::Mock { .. }, None) => unreachable!("the mock is started first"),
    };
    let endpoints: Vec<&Endpoint> = specs.iter().map(|s| &s.endpoint).collect();
    let addrs: Vec<SocketAddr> = endpoints
        .iter()
        .map(|e| e.resolve().map_err(Error::from))
        .collect::<Result<_>>()?;
    let tls = tls_targets(&endpoints, &plan.tls)?;
    if plan.tls.insecure && tls.iter().any(Option::is_some) {
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
    let key = std::env::var(&plan.api_key_env)
        .ok()
        .filter(|k| !k.is_empty());
    if let Some(key) = &key {
        crate::secrets::register(key);
    }
    let headers = RequestHeaders::new(&plan.headers, key.as_deref());
    if headers.explicit_auth && key.is_some() {
        eprintln!(
            "note: -H Authorization is the one sent; the key in ${} is not",
            plan.api_key_env
        );
    }
    // Each endpoint's model: its own `model=`, else --model, else what it serves.
    let models: Vec<String> = specs
        .iter()
        .zip(&addrs)
        .zip(&tls)
        .map(
            |((spec, addr), tls)| match spec.model.as_ref().or(plan.model.as_ref()) {
                Some(m) => Ok(m.clone()),
                None => discover_model(
                    spec,
                    *addr,
                    tls.as_ref(),
                    &headers.for_endpoint(&spec.endpoint),
                ),
            },
        )
        .collect::<Result<_>>()?;
    if plan.exact_output {
        for spec in specs.iter().filter(|s| !s.api.enforces_output_length()) {
            eprintln!(
                "warning: endpoint {}: the {} API cannot ask for exactly output_length tokens \
                 (no min_tokens or ignore_eos): outputs are only capped at it",
                spec.endpoint.url,
                spec.api.name()
            );
        }
    }
    Ok(Fleet {
        specs,
        addrs,
        tls,
        models,
        headers,
        has_api_key: key.is_some(),
    })
}

/// TLS for each https endpoint (the client configuration is built once, and only when one
/// is https).
fn tls_targets(endpoints: &[&Endpoint], options: &TlsOptions) -> Result<Vec<Option<TlsTarget>>> {
    let mut client = None;
    endpoints
        .iter()
        .map(|e| {
            if !e.tls {
                return Ok(None);
            }
            if client.is_none() {
                client = Some(ClientTls::new(options)?);
            }
            let client = client.as_ref().expect("built above");
            client
                .target(&e.host)
                .map(Some)
                .map_err(|m| Error::Usage(format!("endpoint {}: {m}", e.url)))
        })
        .collect()
}

/// The model an endpoint serves, as its dialect names it (under the endpoint's base URL).
/// TGI's bodies name no model: a TGI endpoint that does not say is recorded as unknown.
fn discover_model(
    spec: &EndpointSpec,
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    headers: &str,
) -> Result<String> {
    let e = &spec.endpoint;
    let discovery = spec.api.discovery();
    let path = e.request_path(discovery.path);
    let why = match probe::get(
        addr,
        tls,
        &e.host_header(),
        &path,
        probe::Accept::Json,
        headers,
        PROBE_TIMEOUT,
    ) {
        Ok((200, body)) => match (discovery.model)(&body) {
            // A name with control characters would reach the terminal and every report.
            Some(m) => match crate::printable::printable(&m) {
                std::borrow::Cow::Borrowed(_) => return Ok(m),
                shown => format!("GET {path} names a model with control characters: {shown}"),
            },
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

/// The `/metrics` URLs to scrape: `--server-metrics` as given, then with `--scrape-server`
/// each endpoint's (at its server's root). None when nothing is scraped.
pub fn scrape_config(plan: &ReplayPlan, fleet: &Fleet, say: &Say) -> Result<Option<ScrapeConfig>> {
    let Some(scrape) = &plan.scrape else {
        return Ok(None);
    };
    let mut urls: Vec<Endpoint> = scrape.urls.clone();
    if scrape.endpoints {
        for spec in &fleet.specs {
            let e = &spec.endpoint;
            let root = e.base_path.strip_suffix("/v1").unwrap_or(&e.base_path);
            let url = format!(
                "{}://{}{root}/metrics",
                if e.tls { "https" } else { "http" },
                e.host_header()
            );
            urls.push(Endpoint::parse(&url)?);
        }
    }
    let refs: Vec<&Endpoint> = urls.iter().collect();
    let tls = tls_targets(&refs, &plan.tls)?;
    // The API key goes where requests go already, to no other host.
    let serves = |u: &Endpoint| {
        fleet
            .specs
            .iter()
            .any(|s| (&s.endpoint.host, s.endpoint.port) == (&u.host, u.port))
    };
    let targets = urls
        .iter()
        .zip(tls)
        .map(|(u, tls)| {
            Ok(ScrapeTarget {
                url: u.url.clone(),
                addr: u.resolve()?,
                tls,
                host: u.host_header(),
                path: match u.base_path.as_str() {
                    "" => "/metrics".to_string(),
                    p => p.to_string(),
                },
                headers: match serves(u) {
                    true => fleet.headers.for_endpoint(u),
                    false => String::new(),
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    say.say(format!(
        "scraping {} every {} s into {}",
        targets
            .iter()
            .map(|t| t.url.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        scrape.interval_s,
        server_metrics::METRICS_FILE
    ));
    Ok(Some(ScrapeConfig {
        targets,
        interval: Duration::from_secs_f64(scrape.interval_s),
        extra: scrape.extra.clone(),
    }))
}

/// Where the results go: the run directory, always (`--output`, or a dated one), and with
/// `--output-path FILE` a second copy of the per-request JSONL there, for trace-replayer's
/// users. Both are created before anything is sent.
pub struct Output {
    pub dir: PathBuf,
    pub requests_path: PathBuf,
    pub requests_file: File,
    /// `--output-path`: the copy and where it goes.
    pub copy: Option<(PathBuf, File)>,
}

pub fn prepare_output(plan: &ReplayPlan, trace: &TraceInput) -> Result<Output> {
    let dir = plan.output.clone().unwrap_or_else(report::default_dir);
    report::prepare_dir(&dir, plan.force)?;
    let requests_path = dir.join("requests.jsonl");
    let requests_file = File::create(&requests_path).map_err(|e| Error::io(&requests_path, e))?;
    let copy = match &plan.output_path {
        None => None,
        Some(path) => {
            if path.exists() && !plan.force {
                return Err(Error::Usage(format!(
                    "--output-path {}: the file exists (add --force to overwrite it)",
                    path.display()
                )));
            }
            let file = File::create(path).map_err(|e| Error::io(path, e))?;
            Some((path.clone(), file))
        }
    };
    warn_if_disk_short(&requests_path, &trace.stats, plan.record_itl);
    Ok(Output {
        dir,
        requests_path,
        requests_file,
        copy,
    })
}

/// Warns when the output's file system has less room than the records will probably take
/// (a rough estimate: a few hundred bytes a record, more with --record-itl).
fn warn_if_disk_short(requests_path: &Path, stats: &TraceStats, itl: bool) {
    let dir = requests_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
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

/// Raises the descriptor limit to the hard limit (returned); refuses a limit too low for the
/// connection pools, and warns when it caps how many requests can be in flight.
pub fn check_fd_limit(pooled: usize, say: &Say) -> Result<u64> {
    let limit = limits::raise_fd_limit();
    let needed = pooled as u64 + limits::FD_RESERVE;
    if limit < needed {
        return Err(Error::Usage(format!(
            "ulimit -n is {limit}, but the connection pools alone need {needed} file descriptors: \
             raise it (ulimit -n 65536) or lower --connections / --num-sender"
        )));
    }
    if limit < 4096 {
        say.say(format!(
            "warning: ulimit -n is {limit} (hard limit): at most ~{} requests can be in flight at once; \
             raise it (ulimit -n 65536) for more",
            limit - limits::FD_RESERVE
        ));
    }
    Ok(limit)
}
