//! Command-line interface (CONTRACT §1, §2). Option names are part of the contract; the
//! aliases keep users of other trace replayers at home.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use crate::api::Api;
use crate::choice::Choice;
use crate::trace::Format;

/// The value parser of a flag that takes a [`Choice`]: its names, each with its doc
/// comment as help.
pub(crate) fn choice<T: Choice + Clone>() -> impl TypedValueParser<Value = T> {
    let values = T::ALL.iter().map(|&(_, name, doc)| {
        let value = PossibleValue::new(name);
        match doc.is_empty() {
            true => value,
            false => value.help(crate::choice::help(doc)),
        }
    });
    PossibleValuesParser::new(values).map(|name| T::from_name(&name).expect("a listed name"))
}

/// The value parser of `--api`: the registered dialects, with their aliases and help.
pub(crate) fn api() -> impl TypedValueParser<Value = Api> {
    let values = crate::api::REGISTRY.iter().map(|api| {
        PossibleValue::new(api.name())
            .help(api.about())
            .aliases(api.aliases().iter().copied())
    });
    PossibleValuesParser::new(values).map(|name| Api::from_name(&name).expect("a registered name"))
}

mod capture;
mod hosts;
pub mod identity;
mod mock;
pub mod peers;
mod replay;
pub mod scenario;
pub mod sessions;
mod shared;
pub use capture::CaptureArgs;
pub use hosts::{K8sJobArgs, MergeArgs, ShardArgs, WatchArgs};
pub use mock::MockArgs;
pub use replay::{ReplayArgs, ScrapeArgs};
pub use shared::{PromptArgs, ResultArgs, TraceInputArgs};

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

/// The hint for an unknown option or subcommand that is a peer's name for one of ours.
fn peer_hint(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) {
        let name = arg.split('=').next().unwrap_or(arg);
        return peers::hint(peers::OPTIONS, "option", name);
    }
    match err.get(ContextKind::InvalidSubcommand) {
        Some(ContextValue::String(name)) => peers::hint(peers::SUBCOMMANDS, "subcommand", name),
        _ => None,
    }
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
    let args = scenario::expand(args).map_err(|m| ParseExit {
        message: format!("error: {m}\n"),
        code: 1,
        to_stdout: false,
    })?;
    let err = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    let help = matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    let mut message = err.render().to_string();
    if let Some(hint) = peer_hint(&err) {
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
    /// Run the built-in mock inference server: OpenAI chat and completions, TGI and Anthropic
    /// Messages, streaming or not.
    Mock(Box<MockArgs>),
    /// Validate a trace and print its statistics (records, span, rate, tokens, prefix reuse).
    Inspect(InspectArgs),
    /// Record live traffic as a trace that holds no text: a reverse proxy that forwards every
    /// request and answer unchanged and writes one line per generation request (arrival,
    /// lengths, keyed hash ids of the prompt's token blocks, what the proxy measured).
    Capture(Box<CaptureArgs>),
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
    /// rate) at growing --time-scale steps, or (--over sessions) with growing sessions at once,
    /// then bisection between the last step that met --min-goodput and the first that did not;
    /// one run directory per step, sweep.html.
    Sweep(Box<SweepArgs>),
    /// Join the run directories of the shards of one run (`replay --shard I/N`) into one
    /// run directory: the records in index order, every statistic recomputed from them, a
    /// per-shard table of start skew and drift.
    Merge(Box<MergeArgs>),
    /// Print a Kubernetes Indexed Job (one pod per shard, one common start) and a merge Job
    /// for the replay options given after `--`.
    K8sJob(Box<K8sJobArgs>),
    /// Show the combined live progress of the shards that meet in each --rendezvous DIR
    /// (sent, in flight, late, failed, tok/s, shards lost) until every shard has ended.
    Watch(WatchArgs),
}

#[derive(Debug, Args, Clone)]
pub struct SweepArgs {
    /// What grows from step to step. `sessions` answers "how many concurrent users (or
    /// agents) meet the SLOs": each step caps the conversations run at once, from
    /// --start-sessions.
    #[arg(long, value_parser = choice::<crate::load::SweepAxis>(), default_value_t)]
    pub over: crate::load::SweepAxis,

    /// The time scale of the first step (the trace's own speed by default).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub start_scale: f64,

    /// With --over sessions: the sessions at once of the first step.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub start_sessions: u64,

    /// Each step replays this many times faster (or runs this many times more sessions at
    /// once) than the one before, until one fails.
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

#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// A run directory (holding requests.jsonl); give two to compare them (A, then B). A
    /// records file (an --output-path copy, in either --record-format) is read too: alone,
    /// its report goes to --output DIR (default: FILE's name without .jsonl, plus
    /// `-report`); compared, it is A or B. A trace `llmreplay capture` wrote is read as the
    /// records of what the proxy saw: `report CAPTURE.jsonl RUN` puts a replay of it beside it.
    #[arg(value_name = "DIR", num_args = 1..=2, required = true)]
    pub dirs: Vec<PathBuf>,

    /// With two runs: where compare.html goes (default: DIR2/compare.html). With a records
    /// file: the directory its report is written to.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Join a server's own timing of each request to the run's records, from a file its
    /// tracing wrote, before rendering: `vllm-otel:FILE` (vLLM's or SGLang's OpenTelemetry
    /// spans, an OTLP JSON export; matched by each record's `trace_id`), `dynamo:FILE`
    /// (Dynamo's request trace, JSONL or gzip; matched by X-Request-Id). Each matched record
    /// gains its `server_` phases in requests.jsonl, and the summary shows where TTFT went.
    /// Repeatable; one run directory only.
    #[arg(long, value_name = "SOURCE:FILE")]
    pub server_timings: Vec<String>,

    #[command(flatten)]
    pub results: ResultArgs,
}

#[derive(Debug, Args, Clone)]
pub struct PromptsArgs {
    /// JSONL trace whose prompts are built.
    #[arg(long, visible_alias = "dataset-path", value_name = "PATH")]
    pub trace: PathBuf,

    #[arg(long, visible_alias = "dataset", value_parser = crate::cli::choice::<Format>(), default_value_t)]
    pub format: Format,

    /// Request dialect the prompts are built for (decides the chat template accounting).
    #[arg(long, value_parser = crate::cli::api(), default_value = "openai-chat")]
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
pub struct InspectArgs {
    /// JSONL trace to inspect.
    pub trace: PathBuf,

    #[arg(long, visible_alias = "dataset", value_parser = crate::cli::choice::<Format>(), default_value_t)]
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
