//! `llmreplay mock`'s options (plan::mock_config makes its configuration).

use std::path::PathBuf;

use clap::Args;

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

    /// Each answer starts with N reasoning tokens (all of it when shorter), streamed as a
    /// reasoning model's server does: openai-chat's `delta.reasoning_content`, a thinking block
    /// of anthropic-messages. Completions and TGI answer without reasoning.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub reasoning_tokens: u64,

    /// Answer every generation request, in any dialect, with this recorded stream, byte for
    /// byte: server-sent events, one a block ending in a blank line, each sent at the time its
    /// comment line `: at_ms=T` gives (ms after the request arrived; an event without one goes
    /// --itl-ms after the one before it, the first at --ttft-ms). The golden streams in
    /// tests/fixtures/streams/ are such files.
    #[arg(long, value_name = "FILE")]
    pub replay_stream: Option<PathBuf>,

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

    /// `tokenizer_config.json` with the chat template, or beside a `chat_template.jinja` (default:
    /// the one beside the tokenizer).
    #[arg(long, value_name = "PATH", requires = "tokenizer")]
    pub tokenizer_config: Option<PathBuf>,

    /// Inject a fault into this share of requests (repeatable): `refuse` (close on accept),
    /// `reset-mid-stream`, `status:CODE` (e.g. status:503:0.05, vLLM-shaped error body),
    /// `stall` (stop mid-stream), `slow-head` (head 300 ms late), `malformed-sse`,
    /// `truncated-chunk`, `close-after-response` (no keep-alive), `huge-head`, `drop-reused`
    /// (close a keep-alive connection unanswered when its next request arrives, as
    /// llama-server may do to a request sent right after an answer).
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

    /// The mock's clock, as `GET /health`'s `Date` header says it, this many ms ahead of the
    /// host's (negative: behind): tries the shards' clock check.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub date_offset_ms: i64,

    /// Log every request's arrival, one JSON line each (`index` from X-Llmreplay-Index,
    /// `arrival_ns`: when its first byte reached this host, from the kernel's receive
    /// timestamp, on the mock's monotonic clock): send drift as the server sees it, from the
    /// gaps between arrivals (scripts/bench.sh compares them with the schedule). `headers`:
    /// the request's `traceparent` and `x-` headers (its id, its session), never one whose
    /// name says key, auth, token, secret or cookie.
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
