//! `llmreplay replay`'s options.

use std::path::PathBuf;

use clap::Args;

use super::hosts::ShardArgs;
use super::sessions;
use super::shared::{PromptArgs, ResultArgs, TraceInputArgs};
use crate::api::Api;
use crate::trace::Format;

#[derive(Debug, Args, Clone)]
pub struct ReplayArgs {
    /// Trace to replay (gzip and zstd are decompressed on the fly): JSONL (Mooncake,
    /// Bailian, DAG), CSV (Azure, BurstGPT, TraceLab), or JSON documents (WEKA sessions, ATIF
    /// trajectories, OpenTelemetry exports); see --format.
    #[arg(
        long,
        visible_alias = "dataset-path",
        value_name = "PATH",
        required_unless_present = "synthetic",
        conflicts_with = "synthetic"
    )]
    pub trace: Option<PathBuf>,

    /// Generated load instead of a trace, e.g.
    /// `input=1024,output=256,input-stddev=100,prefix-share=0.25` (the last two optional:
    /// input lengths spread normally; the first F of every prompt shared by all).
    /// --max-requests records (default 1000) at --rate or --concurrency; written to the run
    /// directory as synthetic_trace.jsonl and replayed like a trace.
    #[arg(long, value_name = "SPEC")]
    pub synthetic: Option<String>,

    /// Trace format; `auto` decides from the first record (`chat_id` means bailian).
    #[arg(long, visible_alias = "dataset", value_parser = crate::cli::choice::<Format>(), default_value_t)]
    pub format: Format,

    #[command(flatten)]
    pub input: TraceInputArgs,

    /// An inference server: `URL[,api=...][,model=...][,weight=N]`, repeatable to drive
    /// several instances directly (`--route` spreads the records). The URL is a base
    /// (`http://host:port`, `https://...`, with a path prefix if any) or a full API URL
    /// (`http://h:8000/v1/chat/completions`, `.../v1/completions`, `.../generate_stream`), whose
    /// path then selects the dialect. `api=` and `model=` override --api and --model for this endpoint (a mixed
    /// fleet); `weight=` is its share of the records.
    #[arg(long = "endpoint", value_name = "URL[,KEY=VALUE]")]
    pub endpoints: Vec<String>,

    /// Which endpoint each record goes to: `round-robin` by record number (by weight);
    /// `session`: every turn of a conversation and every record sharing its first hash id
    /// on one endpoint, as a KV-aware router places them; `least-inflight`: the endpoint with
    /// the fewest requests in flight (per weight) when the request is due.
    #[arg(long, value_parser = crate::cli::choice::<crate::fleet::Route>(), default_value_t)]
    pub route: crate::fleet::Route,

    /// Start the built-in mock server in-process on a free loopback port and target it.
    #[arg(long, conflicts_with = "endpoints")]
    pub mock: bool,

    /// With --mock: time to first token of the mock, in ms.
    #[arg(long, value_name = "MS", default_value_t = 20.0, requires = "mock")]
    pub mock_ttft_ms: f64,

    /// With --mock: gap between the mock's chunks, in ms.
    #[arg(long, value_name = "MS", default_value_t = 5.0, requires = "mock")]
    pub mock_itl_ms: f64,

    /// Salt this run's synthetic prompts (recorded in run.json as prompt_salt): none of their
    /// blocks is one a server cached from an earlier run, so a warm cache cannot pass for
    /// the trace's own reuse (within the run, prompts share blocks as the trace says).
    #[arg(long)]
    pub fresh_prompts: bool,

    /// Follow a checked-in scenario (assets/scenarios/NAME.json): it fixes every option that
    /// affects the numbers (format, session mode, carry-forward, session cap, measure-from,
    /// fresh prompts, SLOs); an option it fixes is refused, and run.json states the scenario
    /// followed. Scenarios: tracelab-agentic.
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,

    /// With --mock: give the mock a prefix cache of N blocks of the trace's block size
    /// (--block-size), reporting cached prompt tokens as vLLM does: try
    /// --require-cache-report, carry-forward and per-round hits without a server.
    #[arg(long, value_name = "N", requires = "mock")]
    pub mock_cache_blocks: Option<usize>,

    /// With --mock: the mock's clock, as its `Date` header says it, this many ms ahead of
    /// this host's (negative: behind); tries the shards' clock check without a second host.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        requires = "mock",
        allow_hyphen_values = true
    )]
    pub mock_date_offset_ms: i64,

    /// Request dialect of every endpoint (default: openai-chat, or what an endpoint URL's
    /// path says; `openai` is openai-chat).
    #[arg(long, value_parser = crate::cli::api())]
    pub api: Option<Api>,

    /// Model name sent in each request; by default the first model of each endpoint's
    /// `GET /v1/models`.
    #[arg(long, visible_alias = "model-name")]
    pub model: Option<String>,

    /// Stream responses (SSE): the default; needed for TTFT and inter-token latency.
    #[arg(long, overrides_with = "no_stream")]
    pub stream: bool,

    /// Ask for whole responses instead of streams (TTFT is then the full latency).
    #[arg(long)]
    pub no_stream: bool,

    /// Replay F times faster (timestamps are divided by F).
    #[arg(
        long,
        visible_alias = "scale-factor",
        value_name = "F",
        default_value_t = 1.0
    )]
    pub time_scale: f64,

    /// Stop scheduling at this trace time, in seconds after the first record sent (after
    /// --start-offset and --max-idle-gap or --rate's gaps, before --time-scale: with
    /// --time-scale 10, --duration 60 is 6 s of replay).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Stop issuing requests this many seconds of wall time after the start, as
    /// trace-replayer's --time-in-secs does (after --time-scale, unlike --duration).
    #[arg(long, value_name = "SECS")]
    pub time_in_secs: Option<f64>,

    /// Print the plan (trace and replay spans, rates, endpoints, warnings) and exit without
    /// connecting or sending.
    #[arg(long)]
    pub dry_run: bool,

    /// Benchmarks only (scripts/bench-producers.sh): senders that send nothing and take every
    /// request as it is built, so the run measures the producer pipeline alone.
    #[arg(long, hide = true)]
    pub null_sink: bool,

    /// Replay only the first N records left after --start-offset (over every --loop pass;
    /// the plan line and --dry-run give the schedule that results).
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,

    /// Threads that build request bodies ahead of schedule (default: the cores not used by
    /// senders, at least 1).
    #[arg(long, value_name = "N")]
    pub num_producer: Option<usize>,

    /// Threads that send requests and read responses, each one event loop.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_sender: usize,

    /// Prepared requests buffered between producers and senders, at most.
    #[arg(long, value_name = "N", default_value_t = 40960)]
    pub channel_capacity: usize,

    /// Bytes of prepared requests buffered between producers and senders, at most, in MiB
    /// (each holds its whole prompt, often 100 KB): producers wait when it is reached. At
    /// 1000 req/s of the Mooncake conversation trace, 256 MiB is ~3 s of lead.
    #[arg(long, value_name = "MB", default_value_t = 256)]
    pub channel_mb: usize,

    /// CPU pinning: `auto` (senders on their own cores where there are enough), `none`, or a
    /// list such as `2,3,4-7` (senders take the first entries, producers the rest).
    #[arg(long, value_name = "LIST|auto|none", default_value = "auto")]
    pub pin_cores: String,

    /// Idle keep-alive connections kept ready per endpoint and sender, beyond those the
    /// schedule needs. Before the clock starts, these and one for each request due in the
    /// run's first second are opened (up to half the free file descriptors); later ones 100 ms
    /// ahead of the requests that need them. A request takes the connection used last, else
    /// the oldest unused one (servers with a fixed pool of HTTP workers, such as llama.cpp's,
    /// serve only the first connections they accept), and a connection idle for 4 s is closed
    /// before a server's keep-alive timeout would close it.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub connections: usize,

    /// Directory for the results (default: llmreplay-results/<UTC date-time>).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Also write the per-request JSONL to this file (trace-replayer's option); the run
    /// directory is written as well (--output, or a dated one) and the run says where. An
    /// existing file needs --force.
    #[arg(long, value_name = "FILE")]
    pub output_path: Option<PathBuf>,

    /// Field names of the --output-path file: `llmreplay` (requests.jsonl's), or
    /// `trace-replayer` (its s_time, s_time_drift, e_time, span_time, first_token_time, ...,
    /// all strings, for scripts written against its output; `report FILE` reads either).
    /// requests.jsonl in the run directory always keeps llmreplay's.
    #[arg(
        long,
        value_parser = crate::cli::choice::<crate::record::RecordFormat>(),
        default_value_t,
        requires = "output_path"
    )]
    pub record_format: crate::record::RecordFormat,

    /// Write into a non-empty output directory (the files of an earlier run there are
    /// removed first; other files stay), or over an existing --output-path file.
    #[arg(long)]
    pub force: bool,

    /// No live progress; only the final table.
    #[arg(long)]
    pub quiet: bool,

    /// A request without a complete response after this many seconds fails with `timeout`.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub request_timeout: f64,

    /// A streamed request with no first token this many seconds after it was sent fails with
    /// `timeout` (default: only --request-timeout applies). Until then a request waits on a
    /// live server however long it is silent: a queue or a long prefill is not a failure.
    #[arg(long, value_name = "SECS")]
    pub first_token_timeout: Option<f64>,

    /// A response whose answer has started (its first token) but then sent nothing for this
    /// many seconds fails with `timeout`, keeping what it received (a server that died
    /// without closing its streams would otherwise hold them for the whole
    /// --request-timeout). A request with no answer yet that is silent this long makes its
    /// endpoint checked: one that takes no new connection (a server shutting down), or
    /// answers no `GET /health` (any status) within this time (a hung engine behind a live
    /// listener), fails it as `endpoint-down`; a live one is waited for
    /// (--first-token-timeout).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub stall_timeout: f64,

    /// Conversations (Bailian `parent_chat_id`, Mooncake `session_id`): `after-parent` sends a
    /// turn at the later of its own time and its parent's end plus the think time (as a user
    /// would; a slow server delays the next turn, recorded as `session_delay_ms`);
    /// `timestamp` sends every record at its own time, answered or not.
    #[arg(long, value_parser = crate::cli::choice::<crate::session::SessionMode>(), default_value_t)]
    pub session_mode: crate::session::SessionMode,

    /// Open loop at R requests per second, in trace order, the trace's timestamps ignored
    /// (gaps from --arrival, reproducible from --seed). --time-scale still divides the gaps.
    #[arg(long, value_name = "R", conflicts_with = "concurrency")]
    pub rate: Option<f64>,

    /// With --rate: `poisson` (exponential gaps, the default), `constant` (every 1/R), or
    /// `gamma` (shape --burstiness, as vllm bench serve's: below 1 burstier than Poisson).
    #[arg(long, value_parser = crate::cli::choice::<crate::load::Arrival>(), requires = "rate")]
    pub arrival: Option<crate::load::Arrival>,

    /// With --arrival gamma: the shape of the gaps (1 is Poisson).
    #[arg(long, value_name = "K", requires = "rate")]
    pub burstiness: Option<f64>,

    /// Closed loop: keep exactly C requests in flight, in trace order, the trace's timestamps
    /// ignored; each record's wait for a free slot is its `queue_ms`. Split among the
    /// sender threads.
    #[arg(long, value_name = "C")]
    pub concurrency: Option<usize>,

    /// Cut every silence between consecutive trace records to at most this many trace
    /// seconds (replays a sparse trace without its idle stretches).
    #[arg(long, value_name = "SECS")]
    pub max_idle_gap: Option<f64>,

    /// Skip the records of the trace's first SECS trace seconds; the rest keep their times.
    #[arg(long, value_name = "SECS")]
    pub start_offset: Option<f64>,

    /// Where prompt text comes from for records that give lengths: `synthetic` (built from
    /// the hash ids, so prefix caches hit as in production) or `dataset` (text from
    /// --prompt-dataset, cut or extended to exactly input_length tokens; UCM TraceReplay's
    /// benchmark mode; needs --tokenizer).
    #[arg(long, value_parser = crate::cli::choice::<crate::prompt::PromptSource>(), default_value_t)]
    pub prompt_source: crate::prompt::PromptSource,

    /// With --prompt-source dataset: ShareGPT JSON (each conversation's first human turn) or
    /// JSONL of {"prompt": ...}; the entry of each record is chosen by --seed. (Not
    /// --dataset-path: that is trace-replayer's name for --trace.)
    #[arg(long, value_name = "FILE")]
    pub prompt_dataset: Option<PathBuf>,

    /// Replay the trace N times (soak runs): each pass starts one mean gap after the previous
    /// pass's last record; indices go on (pass k's record i is k x records + i);
    /// --max-requests counts per pass, --duration over the whole run. At most 1,000,000.
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    pub passes: u64,

    /// What each --loop pass after the first sends: fresh (its own prompts: its synthetic
    /// records' hash ids mixed with the pass, recorded messages marked at the start of each
    /// conversation, so no pass meets a block an earlier one cached) or repeat (the first
    /// pass's prompts again: a soak of a warm cache, not the trace's traffic, which the
    /// verdict calls warm-cache).
    #[arg(long, value_name = "HOW", value_parser = crate::cli::choice::<crate::pipeline::LoopPrompts>(), default_value_t)]
    pub loop_prompts: crate::pipeline::LoopPrompts,

    /// Before the measured run, replay the same schedule once, unmeasured, to fill the
    /// servers' prefix caches (its records go to OUTPUT/prime/). The measured run then sees
    /// every prompt cached, as a long-running production server would; expect its observed
    /// prefix hits far above the trace's own reuse. In a sweep every step is primed with its
    /// own prompts. A priming pass with no success stops the run: nothing is measured.
    #[arg(long)]
    pub prime: bool,

    /// The prefix-cache hits the prompts predict (each record's expected_cached_tokens,
    /// compared with the servers' cached_tokens) assume each endpoint keeps an LRU cache of N
    /// content blocks of the trace's block size (default 1048576: more than a GPU's KV cache,
    /// so in effect every block, in bounded memory).
    #[arg(long, value_name = "N")]
    pub expected_cache_blocks: Option<usize>,

    /// The server caches whole blocks of N tokens: the expected prefix-cache hits are rounded
    /// down to them. vLLM: its --block-size (16 by default); SGLang (page size 1) and
    /// llama.cpp: 1.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub server_block_size: u64,

    /// Send the first N records as warmup: recorded with `"warmup": true` in requests.jsonl
    /// and left out of every statistic (the benchmark's duration starts after them).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup_requests: u64,

    /// Think time between a parent's end and its next turn, in wall seconds (default: the
    /// trace's start-to-start gap between the two, scaled by --time-scale; the traces give no
    /// service time to subtract). 0 to 1e7 seconds; a trace's own waits may be up to 1e10 ms.
    #[arg(long, value_name = "SECS")]
    pub think_time: Option<f64>,

    /// Stop the run early once more than this share of the requests failed, as
    /// trace-replayer's early-stop threshold, judged in schedule order (a request counts once
    /// every request scheduled before it is recorded, after the first 20), so fast failures
    /// do not count before slower successes: nothing new is sent, requests in flight drain,
    /// summary.json and report.html say why, and the exit status is 3.
    #[arg(long, value_name = "R")]
    pub max_error_rate: Option<f64>,

    /// On Ctrl-C or SIGTERM: nothing new is sent, requests in flight get this many seconds to
    /// finish and are then recorded as `cancelled`, and every output is written (exit status
    /// 130). A second signal a second or more later exits at once, leaving requests.jsonl
    /// intact to its last line (two within a second are one stop).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub drain_timeout: f64,

    /// Also record each chunk's arrival time and tokens (`chunk_times_ms`, `chunk_tokens`).
    #[arg(long)]
    pub record_itl: bool,

    /// Also write `prompts.jsonl` in the output directory: each request's prompt as sent
    /// (`prompt`, `token_ids` or `messages`), one line per record in record order.
    #[arg(long)]
    pub save_prompts: bool,

    /// Extra request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// Environment variable holding the API key sent as `Authorization: Bearer` (never logged
    /// or saved).
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,

    /// PEM file of CA certificates trusted for https endpoints, beside the bundled web roots
    /// (for a cluster behind a private CA or a self-signed gateway).
    #[arg(long, value_name = "PATH")]
    pub ca_cert: Option<PathBuf>,

    /// Do not verify https endpoints' certificates (the traffic is still encrypted). Said in
    /// run.json and on stderr.
    #[arg(long)]
    pub insecure: bool,

    /// JSON object merged into every request body (a record's own `extra` wins over it).
    #[arg(long, value_name = "JSON")]
    pub extra_body: Option<String>,

    /// Do not send `min_tokens`/`ignore_eos` (for servers that reject them); output lengths
    /// are then only capped by `max_tokens`.
    #[arg(long)]
    pub no_exact_output: bool,

    /// Final stretch before each deadline that is spun instead of slept, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 150)]
    pub spin_us: u64,

    /// Run sender threads under the SCHED_FIFO real-time policy, so that producers, the
    /// collector or a server on the same machine never preempt a send (needs CAP_SYS_NICE).
    /// Without it senders ask for nice -10 where allowed.
    #[arg(long)]
    pub realtime: bool,

    /// After each round of socket events, wait up to this many microseconds (never past the
    /// next send) before reading again, so that one wake-up collects the tokens of many
    /// streams. Saves client CPU at hundreds of thousands of tokens/s; token timestamps
    /// (TTFT, inter-token gaps) may then be late by up to this much. 0 = read at once.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub read_coalesce_us: u64,

    #[command(flatten)]
    pub results: ResultArgs,

    #[command(flatten)]
    pub scrape: ScrapeArgs,

    #[command(flatten)]
    pub hosts: ShardArgs,

    /// Near the end, with the other groups that have a heading of their own (a group's
    /// heading goes on to the options after it).
    #[command(flatten)]
    pub sessions: sessions::SessionArgs,

    #[command(flatten)]
    pub identity: super::identity::IdentityArgs,

    /// Prompt synthesis (last, so its help heading covers only its own options).
    #[command(flatten)]
    pub prompt: PromptArgs,
}

/// The servers' own metrics, scraped during the run.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Server metrics")]
pub struct ScrapeArgs {
    /// Scrape this Prometheus URL during the run (e.g. http://gpu-3:8000/metrics; repeat for
    /// every instance). Queue depth, running requests, KV-cache use and prefix-cache counters
    /// of vLLM, SGLang, llama.cpp's server and TGI get common names (running, waiting,
    /// kv_cache_usage, prefix_cache_hits, ...); one line per scrape goes to
    /// server_metrics.jsonl, the first and last whole expositions to server_metrics_raw/, and
    /// summary.json and report.html show them per target. A target that fails is recorded in
    /// the summary, never fatal. The -H headers and API key go only to a target on an
    /// --endpoint's host and port.
    #[arg(long, value_name = "URL")]
    pub server_metrics: Vec<String>,

    /// Scrape every --endpoint's /metrics (at the server's root: a base URL ending in /v1 is
    /// scraped at .../metrics without the /v1).
    #[arg(long)]
    pub scrape_server: bool,

    /// Seconds between scrapes; each target is scraped once before the load's connections
    /// open (the baseline) and once after the last answer too, all over one connection opened
    /// first and kept, so scrapes never queue behind the load on a server whose HTTP workers
    /// each hold a connection (llama.cpp's). A failed baseline is said, and the counters'
    /// increases are marked as starting late.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub scrape_interval: f64,

    /// Also keep this series (a family name; NAME_sum / NAME_count of a histogram), summed
    /// over its label sets. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub metric: Vec<String>,
}
