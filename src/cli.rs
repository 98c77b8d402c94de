//! Command-line interface (CONTRACT §1, §2). Option names are part of the contract; the
//! aliases keep users of other trace replayers at home.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::api::Api;
use crate::trace::Format;

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace against one or more endpoints (or the built-in mock) and measure.
    Replay(Box<ReplayArgs>),
    /// Run the built-in mock inference server (OpenAI chat and completions, streaming or not).
    Mock(MockArgs),
    /// Validate a trace and print its statistics (records, span, rate, tokens, prefix reuse).
    Inspect(InspectArgs),
}

#[derive(Debug, Args, Clone)]
pub struct ReplayArgs {
    /// JSONL trace to replay (`.gz` is decompressed on the fly).
    #[arg(long, visible_alias = "dataset-path", value_name = "PATH")]
    pub trace: PathBuf,

    /// Trace format; `auto` decides from the first record (`chat_id` means bailian).
    #[arg(long, visible_alias = "dataset", value_enum, default_value = "auto")]
    pub format: Format,

    /// Base URL of an inference server (`http://host:port`); repeat to drive several
    /// instances directly, requests spread round-robin by record number.
    #[arg(long = "endpoint", value_name = "URL")]
    pub endpoints: Vec<String>,

    /// Start the built-in mock server in-process on a free loopback port and target it.
    #[arg(long, conflicts_with = "endpoints")]
    pub mock: bool,

    /// With --mock: time to first token of the mock, in ms.
    #[arg(long, value_name = "MS", default_value_t = 20.0, requires = "mock")]
    pub mock_ttft_ms: f64,

    /// With --mock: gap between the mock's chunks, in ms.
    #[arg(long, value_name = "MS", default_value_t = 5.0, requires = "mock")]
    pub mock_itl_ms: f64,

    /// Request dialect.
    #[arg(long, value_enum, default_value = "openai-chat")]
    pub api: Api,

    /// Model name sent in each request; by default the first model of the endpoint's
    /// `GET /v1/models`.
    #[arg(long, visible_alias = "model-name")]
    pub model: Option<String>,

    /// Stream responses (SSE): the default; needed for TTFT and inter-token latency.
    #[arg(long, overrides_with = "no_stream")]
    pub stream: bool,

    /// Ask for whole responses instead of streams (TTFT is then the full latency).
    #[arg(long)]
    pub no_stream: bool,

    /// Tokenizer for synthetic prompts: a `tokenizer.json`, or a directory holding one.
    /// Needed when the trace gives lengths instead of text.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,

    /// Tokens per hash id (default: 512 for mooncake, 16 for bailian).
    #[arg(long, value_name = "N")]
    pub block_size: Option<u32>,

    /// Seed of prompt synthesis: prompts are a pure function of (seed, tokenizer, hash ids,
    /// lengths), identical on every host.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Replay F times faster (timestamps are divided by F).
    #[arg(
        long,
        visible_alias = "scale-factor",
        value_name = "F",
        default_value_t = 1.0
    )]
    pub time_scale: f64,

    /// Stop scheduling at this trace time, in seconds after the first record.
    #[arg(long, visible_alias = "time-in-secs", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Replay only the first N records.
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,

    /// Threads that build request bodies ahead of schedule (default: the cores not used by
    /// senders, at least 1).
    #[arg(long, value_name = "N")]
    pub num_producer: Option<usize>,

    /// Threads that send requests and read responses, each one event loop.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_sender: usize,

    /// Prepared requests buffered between producers and senders (bounds memory: each holds
    /// its whole prompt).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub channel_capacity: usize,

    /// CPU pinning: `auto` (senders on their own cores where there are enough), `none`, or a
    /// list such as `2,3,4-7` (senders take the first entries, producers the rest).
    #[arg(long, value_name = "LIST|auto|none", default_value = "auto")]
    pub pin_cores: String,

    /// Idle keep-alive connections kept ready per endpoint and sender (opened before the first
    /// deadline; more are opened as concurrency grows).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub connections: usize,

    /// Directory for the results (default: llmreplay-results/<UTC date-time>).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Write the per-request JSONL to this file (instead of DIR/requests.jsonl).
    #[arg(long, value_name = "FILE")]
    pub output_path: Option<PathBuf>,

    /// Write into a non-empty output directory.
    #[arg(long)]
    pub force: bool,

    /// No live progress; only the final table.
    #[arg(long)]
    pub quiet: bool,

    /// A request without a complete response after this many seconds fails with `timeout`.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub request_timeout: f64,

    /// Also record each chunk's arrival time and tokens (`chunk_times_ms`, `chunk_tokens`).
    #[arg(long)]
    pub record_itl: bool,

    /// Extra request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// Environment variable holding the API key sent as `Authorization: Bearer` (never logged
    /// or saved).
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,

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

    /// Print the statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

impl MockArgs {
    pub fn config(&self) -> crate::mock::MockConfig {
        crate::mock::MockConfig {
            ttft_ns: ms_to_ns(self.ttft_ms),
            itl_ns: ms_to_ns(self.itl_ms),
            tokens_per_chunk: self.tokens_per_chunk.max(1),
            model: self.model.clone(),
        }
    }
}

pub fn ms_to_ns(ms: f64) -> u64 {
    (ms.max(0.0) * 1e6).round() as u64
}
