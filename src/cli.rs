//! Command-line interface (CONTRACT §1, §2). Option names are part of the contract; the
//! aliases keep users of other trace replayers at home.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::api::Api;
use crate::prompt::LengthOf;
pub use crate::prompt::PromptMode;
pub use crate::report::OutputFormat;
use crate::trace::Format;

mod hosts;
pub mod sessions;
pub use hosts::{K8sJobArgs, MergeArgs, ShardArgs};

#[derive(Debug, Parser)]
#[command(
    name = "llmreplay",
    version,
    about = "Replay LLM request traces against inference servers at their own timestamps, and measure what the servers did.",
    long_about = "Replay LLM request traces (Mooncake FAST'25, Alibaba Qwen-Bailian, or traces with text) against \
OpenAI-compatible inference servers at the trace's own timestamps, and measure TTFT, inter-token latency, TPOT, \
end-to-end latency and the tool's own send drift.\n\nStart with:\n  llmreplay replay --mock --trace assets/traces/mooncake_conversation_500.jsonl --tokenizer assets/tokenizers/qwen3 --time-scale 20"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Peers' flags (vLLM's `bench serve`, AIPerf, inference-perf) and what does their job here.
const PEER_FLAGS: [(&str, &str); 8] = [
    ("--request-rate", "--rate R (with --arrival poisson|gamma)"),
    ("--metric-percentiles", "--percentiles 50,90,99"),
    ("--base-url", "--endpoint URL"),
    ("--num-prompts", "--max-requests N"),
    ("--result-dir", "--output DIR"),
    (
        "--save-result",
        "nothing: every run saves its results in --output DIR",
    ),
    (
        "--max-concurrency",
        "--concurrency C (a closed loop; see the README's peer table)",
    ),
    ("--request-count", "--max-requests N"),
];

/// The hint for an unknown option that is a peer's name for one of ours.
fn peer_flag_hint(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = arg.split('=').next().unwrap_or(arg);
    let (_, ours) = PEER_FLAGS.iter().find(|(peer, _)| *peer == name)?;
    Some(format!("{name} is another tool's option; here use {ours}"))
}

/// What a command line that does not parse ends in: the message (clap's, plus a hint) and
/// the exit status. A usage error is 1 (CONTRACT §2; clap's own default is 2); `--help` and
/// `--version` print to stdout and exit 0.
pub struct ParseExit {
    pub message: String,
    pub code: i32,
    pub to_stdout: bool,
}

/// Parses a command line (the program name first).
pub fn parse(args: Vec<std::ffi::OsString>) -> Result<Cli, ParseExit> {
    use clap::error::ErrorKind;
    let err = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    let help = matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    let mut message = err.render().to_string();
    if let Some(hint) = peer_flag_hint(&err) {
        // clap's guess by spelling ("--request-rate" -> "--request-timeout") would mislead.
        // Its usage line is built from that guess too.
        message = message
            .lines()
            .filter(|l| !l.trim_start().starts_with("tip:") && !l.starts_with("Usage:"))
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        message.push_str(&format!("hint: {hint}\n"));
    }
    // trace-replayer's habit: options straight after the program name. Suggest the
    // subcommand that takes them.
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    if !help && first.starts_with("--") {
        let rest: Vec<String> = args[1..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        message.push_str(&format!(
            "\nhint: options go after a subcommand; to replay a trace: llmreplay replay {}\n",
            rest.join(" ")
        ));
    }
    Err(ParseExit {
        message,
        code: if help { 0 } else { 1 },
        to_stdout: help,
    })
}

/// The timeouts of a request, each with one meaning (README "Timeouts" holds the same table).
const TIMEOUTS_HELP: &str = "\
Timeouts (each request ends in exactly one record):
  phase               limit                                         fails as
  connect             refused at once; else --request-timeout       connect, tls, timeout
  first byte / token  --first-token-timeout (default: none); on an  timeout
                      endpoint that takes no new connection, silent
                      for --stall-timeout                           endpoint-down
  stall               silent for --stall-timeout after the answer   timeout
                      started (its first token, or a whole body's
                      first byte)
  whole request       --request-timeout from its send               timeout";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace against one or more endpoints (or the built-in mock) and measure.
    #[command(after_long_help = TIMEOUTS_HELP)]
    Replay(Box<ReplayArgs>),
    /// Run the built-in mock inference server (OpenAI chat and completions, streaming or not).
    Mock(Box<MockArgs>),
    /// Validate a trace and print its statistics (records, span, rate, tokens, prefix reuse).
    Inspect(InspectArgs),
    /// Re-render the summary, report.html and results.xlsx of a finished run from its
    /// requests.jsonl (with other --goodput / --percentiles); with two runs, compare them.
    Report(ReportArgs),
    /// Build every prompt of a trace without sending anything: build throughput, and with
    /// --verify a re-encoding of each prompt with the real tokenizer to prove exact lengths.
    Prompts(Box<PromptsArgs>),
    /// Measure how fast this machine replays on schedule: increasing request rates against the
    /// in-process mock (or --endpoint), with drift, late sends and sender CPU per rate, and the
    /// highest rate that keeps p99 send drift under 1 ms.
    Calibrate(CalibrateArgs),
    /// Find the fastest replay the servers still serve within their SLOs: the same trace (or
    /// rate) at growing --time-scale steps, then bisection between the last step that met
    /// --min-goodput and the first that did not; one run directory per step, sweep.html.
    Sweep(Box<SweepArgs>),
    /// Join the run directories of the shards of one run (`replay --shard I/N`) into one
    /// run directory: the records in index order, every statistic recomputed from them, a
    /// per-shard table of start skew and drift.
    Merge(Box<MergeArgs>),
    /// Print a Kubernetes Indexed Job (one pod per shard, one common start) and a merge Job
    /// for the replay options given after `--`.
    K8sJob(Box<K8sJobArgs>),
}

#[derive(Debug, Args, Clone)]
pub struct SweepArgs {
    /// The time scale of the first step (the trace's own speed by default).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub start_scale: f64,

    /// Each step replays this many times faster than the one before, until one fails.
    #[arg(long, value_name = "F", default_value_t = 2.0)]
    pub step_factor: f64,

    /// At most this many growing steps (the sweep says so when none failed).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_steps: u32,

    /// Bisection steps between the last scale that passed and the first that failed (each
    /// halves the gap, on a log scale).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub bisect: u32,

    /// A step passes when at least this share of its requests succeeded within every
    /// --goodput SLO (and, when servers are scraped, their queue did not keep growing).
    #[arg(long, value_name = "SHARE", default_value_t = 0.9)]
    pub min_goodput: f64,

    /// Replay the very same prompts at every step. By default each step's prompts are new to
    /// the servers (the prompt seed differs per step; reuse within a step is the trace's), so
    /// a step measures capacity, not the cache the steps before it filled; with this flag,
    /// from the second step on the prefix caches hold every prompt (sweep.txt says so).
    #[arg(long)]
    pub warm_cache: bool,

    /// Every replay option; --output is the sweep's directory, --goodput is required.
    #[command(flatten)]
    pub replay: ReplayArgs,
}

#[derive(Debug, Args, Clone)]
pub struct CalibrateArgs {
    /// Request rates to try, in req/s, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "250,500,1000,2000,4000,8000"
    )]
    pub rates: Vec<f64>,

    /// Seconds of schedule replayed at each rate.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub seconds: f64,

    /// Streamed output tokens per request (one per SSE event from the mock).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub tokens: u64,

    /// Drive this server instead of the in-process mock (it must accept any model name).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,

    /// In-process mock: time to first token, ms.
    #[arg(long, value_name = "MS", default_value_t = 20.0)]
    pub mock_ttft_ms: f64,

    /// In-process mock: gap between tokens, ms.
    #[arg(long, value_name = "MS", default_value_t = 1.0)]
    pub mock_itl_ms: f64,

    /// Sender threads.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_sender: usize,

    /// Print the table as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How results are summarised and shown (`replay` and `report`).
#[derive(Debug, Args, Clone, Default)]
pub struct ResultArgs {
    /// SLOs for goodput, vLLM's syntax: `--goodput ttft:500 tpot:50 e2el:3000` (ms). A
    /// request is good when it succeeded and meets every SLO given (inclusive).
    #[arg(long, value_name = "METRIC:MS", num_args = 1..)]
    pub goodput: Vec<String>,

    /// Percentiles reported for every metric besides p25, p50, p75, p90 and p99, e.g.
    /// `--percentiles 99.9,99.99`.
    #[arg(long, value_name = "P,P,...", value_delimiter = ',')]
    pub percentiles: Vec<f64>,

    /// `text` prints the vLLM-style table; `json` prints summary.json to stdout for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// A run directory (holding requests.jsonl); give two to compare them (A, then B). One
    /// records file (an --output-path copy, in either --record-format) is read too: its
    /// report goes to --output DIR (default: FILE's name without .jsonl, plus `-report`).
    #[arg(value_name = "DIR", num_args = 1..=2, required = true)]
    pub dirs: Vec<PathBuf>,

    /// With two runs: where compare.html goes (default: DIR2/compare.html). With a records
    /// file: the directory its report is written to.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub results: ResultArgs,
}

/// How synthetic prompts are built (for traces that give lengths and hash ids, not text).
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Prompt synthesis")]
pub struct PromptArgs {
    /// Tokenizer for synthetic prompts: a `tokenizer.json`, a directory holding one (and
    /// `tokenizer_config.json`, whose chat template is then accounted for), or a model name
    /// `ORG/NAME[@REV]` found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME, or
    /// ~/.cache/huggingface/hub; never downloaded). Needed when the trace gives lengths
    /// instead of text.
    #[arg(long, value_name = "PATH|ORG/NAME[@REV]")]
    pub tokenizer: Option<PathBuf>,

    /// `tokenizer_config.json` whose chat template the server applies (default: the one beside
    /// tokenizer.json, if any).
    #[arg(long, value_name = "PATH")]
    pub tokenizer_config: Option<PathBuf>,

    /// What `input_length` counts: `prompt` = the server's `usage.prompt_tokens` (the chat
    /// template's or the special tokens' overhead is taken off the content), `content` = the
    /// synthetic content alone.
    #[arg(long, value_enum, default_value = "prompt")]
    pub input_length_of: LengthOf,

    /// `text` sends prompt text; `token-ids` sends the token id array itself (exact by
    /// construction; --api openai-completions only).
    #[arg(long, value_enum, default_value = "text")]
    pub prompt_mode: PromptMode,

    /// Tokens per hash id (default: 512 for mooncake, 16 for bailian).
    #[arg(long, value_name = "N")]
    pub block_size: Option<u32>,

    /// Seed of prompt synthesis (prompts are a pure function of seed, tokenizer, hash ids and
    /// lengths, identical on every host) and of --rate's arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Memory for rendered blocks kept for reuse, shared among the producers, in MiB. Only
    /// speed depends on it: traces with millions of distinct hash ids run in this bound.
    #[arg(long, value_name = "MB", default_value_t = 256)]
    pub block_cache_mb: usize,
}

#[derive(Debug, Args, Clone)]
pub struct PromptsArgs {
    /// JSONL trace whose prompts are built.
    #[arg(long, visible_alias = "dataset-path", value_name = "PATH")]
    pub trace: PathBuf,

    #[arg(long, visible_alias = "dataset", value_enum, default_value = "auto")]
    pub format: Format,

    /// Request dialect the prompts are built for (decides the chat template accounting).
    #[arg(long, value_enum, default_value = "openai-chat")]
    pub api: Api,

    /// Build only the first N records.
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,

    /// Threads building prompts (each with its own share of the block cache).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,

    /// Re-encode every prompt with the tokenizer (and chat template) as the server would, and
    /// check its length and that its synthetic token ids come back intact. Slow: the
    /// tokenizer runs at ~0.2M tokens/s per thread.
    #[arg(long)]
    pub verify: bool,

    /// With --verify: re-encode only every Nth record (all are still built).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub verify_every: u64,

    /// Write the prompts to this file (the `prompts.jsonl` format of `replay --save-prompts`).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub prompt: PromptArgs,
}

#[derive(Debug, Args, Clone)]
pub struct ReplayArgs {
    /// JSONL trace to replay (`.gz` is decompressed on the fly), or a CSV trace (Azure,
    /// BurstGPT).
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
    #[arg(long, visible_alias = "dataset", value_enum, default_value = "auto")]
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
    #[arg(long, value_enum, default_value = "round-robin")]
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

    /// Request dialect of every endpoint (default: openai-chat, or what an endpoint URL's
    /// path says; `openai` is openai-chat).
    #[arg(long, value_enum)]
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
        value_enum,
        default_value = "llmreplay",
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
    /// endpoint checked: one that takes no new connection (a server shutting down) fails it
    /// as `endpoint-down`; a live one is waited for (--first-token-timeout).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub stall_timeout: f64,

    /// Conversations (Bailian `parent_chat_id`, Mooncake `session_id`): `after-parent` sends a
    /// turn at the later of its own time and its parent's end plus the think time (as a user
    /// would; a slow server delays the next turn, recorded as `session_delay_ms`);
    /// `timestamp` sends every record at its own time, answered or not.
    #[arg(long, value_enum, default_value = "after-parent")]
    pub session_mode: crate::session::SessionMode,

    #[command(flatten)]
    pub sessions: sessions::SessionArgs,

    /// Open loop at R requests per second, in trace order, the trace's timestamps ignored
    /// (gaps from --arrival, reproducible from --seed). --time-scale still divides the gaps.
    #[arg(long, value_name = "R", conflicts_with = "concurrency")]
    pub rate: Option<f64>,

    /// With --rate: `poisson` (exponential gaps, the default), `constant` (every 1/R), or
    /// `gamma` (shape --burstiness, as vllm bench serve's: below 1 burstier than Poisson).
    #[arg(long, value_enum, requires = "rate")]
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
    #[arg(long, value_enum, default_value = "synthetic")]
    pub prompt_source: crate::prompt::PromptSource,

    /// With --prompt-source dataset: ShareGPT JSON (each conversation's first human turn) or
    /// JSONL of {"prompt": ...}; the entry of each record is chosen by --seed. (Not
    /// --dataset-path: that is trace-replayer's name for --trace.)
    #[arg(long, value_name = "FILE")]
    pub prompt_dataset: Option<PathBuf>,

    /// Replay the trace N times (soak runs): each pass starts one mean gap after the previous
    /// pass's last record; indices go on (pass k's record i is k x records + i);
    /// --max-requests counts per pass, --duration over the whole run.
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    pub passes: u64,

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
    /// service time to subtract).
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

#[derive(Debug, Args, Clone)]
pub struct MockArgs {
    /// Address to listen on; port 0 picks a free one. The first line on stdout is
    /// `listening on ADDR`.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: std::net::SocketAddr,

    /// Time from a request's arrival to its first token, in ms.
    #[arg(long, value_name = "MS", default_value_t = 20.0)]
    pub ttft_ms: f64,

    /// Gap between consecutive chunks, in ms.
    #[arg(long, value_name = "MS", default_value_t = 5.0)]
    pub itl_ms: f64,

    /// Tokens carried by each streamed chunk.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tokens_per_chunk: u32,

    /// Model name listed by `GET /v1/models`.
    #[arg(long, default_value = "mock-model")]
    pub model: String,

    /// Count prompt tokens with this tokenizer (a tokenizer.json, a directory, or ORG/NAME[@REV]
    /// from the local Hugging Face cache) and its chat
    /// template, as a vLLM server does, to report true `usage.prompt_tokens`. Counting runs
    /// on --count-threads threads while the answer streams (only the closing usage event
    /// waits for it), so the TTFT holds. Without it the mock counts whitespace-separated
    /// words, an estimate it announces in every response; llmreplay then reports input
    /// lengths as "not checked".
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,

    /// Threads counting prompts ahead with --tokenizer, at the lowest CPU priority
    /// (SCHED_IDLE). One counts about 0.3M tokens/s (Qwen3): it kept up with the bundled
    /// Mooncake trace's 12k-token prompts at 30 req/s. When they fall behind (or a busy
    /// machine leaves them no core), tokens still stream on time; a request whose closing
    /// usage event (or whole non-streamed answer) waits for its count has it counted by one
    /// more thread at normal priority.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "tokenizer")]
    pub count_threads: usize,

    /// Keep an LRU prefix cache of N blocks (as vLLM's automatic prefix caching: a block
    /// hits only when every block before it does) and report each request's hits as
    /// usage.prompt_tokens_details.cached_tokens. Blocks are --cache-block-size words of the
    /// prompt's content (llmreplay's synthetic prompts are one word a token); with
    /// --tokenizer, of the prompt's token ids as a server sees them (chat template included,
    /// the last token never a hit), looked up in arrival order as the counts come in: a
    /// closing usage event then waits for every earlier prompt's count, and at block size 1
    /// the lookups cost as much as the counting (the README demo's TPOT p99 rose from 19 ms
    /// to 2 s on 2 cores).
    #[arg(long, value_name = "N")]
    pub cache_blocks: Option<usize>,

    /// With --cache-blocks: words (tokens) per block; give the trace's block size (512 for
    /// Mooncake, 16 for Bailian) for hits that line up with its hash ids.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        requires = "cache_blocks"
    )]
    pub cache_block_size: usize,

    /// Generate at most N requests at once (a server's batch limit); later ones wait in
    /// arrival order, their time to first token counted from when they are admitted, as a
    /// saturated server queues. /metrics reports running and waiting.
    #[arg(long, value_name = "N")]
    pub max_running: Option<usize>,

    /// Shut down gracefully when the Nth request arrives, as llama-server does on SIGTERM:
    /// the listener closes (new connections are refused), requests generating finish, and
    /// every other request, queued or arriving on an open connection, is held open and
    /// silent forever.
    #[arg(long, value_name = "N")]
    pub graceful_shutdown_after: Option<u64>,

    /// Prefill time per prompt token the prefix cache did not serve (with --cache-blocks, its
    /// words; every prompt word without), added to the time to first token: the work a real
    /// server's cache saves, so a warm cache raises its capacity as a real one does.
    #[arg(long, value_name = "US", default_value_t = 0.0)]
    pub prefill_us_per_token: f64,

    /// `tokenizer_config.json` with the chat template (default: the one beside the tokenizer).
    #[arg(long, value_name = "PATH", requires = "tokenizer")]
    pub tokenizer_config: Option<PathBuf>,

    /// Inject a fault into this share of requests (repeatable): `refuse` (close on accept),
    /// `reset-mid-stream`, `status:CODE` (e.g. status:503:0.05, vLLM-shaped error body),
    /// `stall` (stop mid-stream), `slow-head` (head 300 ms late), `malformed-sse`,
    /// `truncated-chunk`, `close-after-response` (no keep-alive), `huge-head`.
    #[arg(long = "fault", value_name = "KIND:RATE")]
    pub faults: Vec<String>,

    /// Seed of fault injection: which requests get a fault is a function of (seed, request
    /// index), the same on every run.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Log every injected fault to this file, one JSON line each (`index`, `fault`).
    #[arg(long, value_name = "FILE")]
    pub fault_log: Option<PathBuf>,

    /// Serve https with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Serve at most N connections at once, thread-per-connection style (as llama.cpp's
    /// llama-server with its fixed pool of HTTP threads): a connection holds a worker until it
    /// closes or has been idle --keep-alive-s; later connections wait, unread, until a worker
    /// frees up. Shows what idle connections held by a client do to its own requests.
    #[arg(long, value_name = "N")]
    pub http_workers: Option<usize>,

    /// With --http-workers: seconds after which a worker closes its idle connection.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 5.0,
        requires = "http_workers"
    )]
    pub keep_alive_s: f64,

    /// Log every request's arrival, one JSON line each (`index` from X-Llmreplay-Index,
    /// `arrival_ns`: when its first byte reached this host, from the kernel's receive
    /// timestamp, on the mock's monotonic clock): send drift as the server sees it, from the
    /// gaps between arrivals (scripts/bench.sh compares them with the schedule).
    #[arg(long, value_name = "FILE")]
    pub arrival_log: Option<PathBuf>,

    /// Log each answered request's own timing, one JSON line each, on CLOCK_MONOTONIC (the
    /// clock of run.json's `clock.t0_monotonic_ns`): `index`, `received_ns` (the kernel's
    /// receive time of its first byte), `chunks_ns` (when each write of events began; the
    /// first holds the first token), `chunks_tokens` (tokens sent by each) and `last_byte_ns`. scripts/bench-timing-truth.sh compares
    /// the client's TTFT, ITL and E2EL with them.
    #[arg(long, value_name = "FILE")]
    pub timing_log: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct InspectArgs {
    /// JSONL trace to inspect.
    pub trace: PathBuf,

    #[arg(long, visible_alias = "dataset", value_enum, default_value = "auto")]
    pub format: Format,

    /// Tokens per hash id (default: 512 for mooncake, 16 for bailian).
    #[arg(long, value_name = "N")]
    pub block_size: Option<u32>,

    #[command(flatten)]
    pub input: TraceInputArgs,

    /// Print the statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How strictly a trace is read (replay and inspect).
#[derive(Debug, Args, Clone, Default)]
pub struct TraceInputArgs {
    /// Skip lines that fail to parse (wrong types, missing fields, invalid JSON or UTF-8,
    /// over-long lines) instead of stopping at the first; they are counted and the first is
    /// shown. Records are numbered without them.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Refuse a trace whose timestamps go backwards. Without it such records are sorted
    /// (within a window of 1024 records) and a warning says how many there were.
    #[arg(long)]
    pub strict: bool,
}

impl MockArgs {
    /// The mock's configuration; loads the tokenizer when one is given.
    pub fn config(&self) -> crate::Result<crate::mock::MockConfig> {
        use crate::mock::PromptCounting;
        let counting = match &self.tokenizer {
            None => PromptCounting::Approximate,
            Some(path) => {
                let (tokenizer, file) = crate::prompt::load_tokenizer(path)?;
                let counter = crate::prompt::PromptCounter::new(
                    tokenizer,
                    &file,
                    self.tokenizer_config.as_deref(),
                )?;
                PromptCounting::Tokenizer(std::sync::Arc::new(counter))
            }
        };
        Ok(crate::mock::MockConfig {
            ttft_ns: crate::clock::ms_to_ns(self.ttft_ms),
            itl_ns: crate::clock::ms_to_ns(self.itl_ms),
            tokens_per_chunk: self.tokens_per_chunk.max(1),
            model: self.model.clone(),
            counting,
            faults: crate::mock::FaultPlan::parse(&self.faults, self.seed)
                .map_err(crate::Error::Usage)?,
            fault_log: self.fault_log.clone(),
            arrival_log: self.arrival_log.clone(),
            timing_log: self.timing_log.clone(),
            http_workers: self.http_workers,
            keep_bodies: 0,
            count_threads: self.count_threads.clamp(1, 256),
            prefix_cache: self.cache_blocks.map(|n| (n, self.cache_block_size.max(1))),
            max_running: self.max_running.map(|n| n.max(1)),
            graceful_shutdown_after: self.graceful_shutdown_after,
            prefill_ns_per_token: crate::clock::ms_to_ns(self.prefill_us_per_token / 1000.0),
            keep_alive_ns: crate::clock::ms_to_ns(self.keep_alive_s * 1000.0),
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(
                    crate::transport::tls::server_config(cert, key).map_err(crate::Error::Usage)?,
                ),
                _ => None,
            },
        })
    }
}
