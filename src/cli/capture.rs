//! `llmreplay capture`'s options (plan::CapturePlan checks them).

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args, Clone)]
pub struct CaptureArgs {
    /// Address clients connect to instead of the server; port 0 picks a free one. The first
    /// line on stdout is `capturing on ADDR`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,

    /// The server every request goes to, unchanged: `http://HOST:PORT` or `https://...`
    /// (its root; the request's own path is kept). Repeat for several: each client connection
    /// goes to the next in turn, and its requests stay on it.
    #[arg(long, value_name = "URL", required = true)]
    pub upstream: Vec<String>,

    /// The served model's tokenizer (tokenizer.json, its directory, or a Hugging Face name in
    /// the local cache): each prompt is rendered by its chat template, counted and cut into
    /// blocks with it. Its tokenizer_config.json beside it gives the template.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: PathBuf,

    /// The tokenizer_config.json with the chat template, when not beside the tokenizer.
    #[arg(long, value_name = "FILE")]
    pub tokenizer_config: Option<PathBuf>,

    /// The trace written: JSON lines `replay --trace` reads (Qwen-Bailian's fields: chat_id,
    /// parent_chat_id, timestamp in s, lengths, hash ids; and what the proxy measured), one per
    /// generation request, in arrival order.
    #[arg(long, value_name = "TRACE.jsonl")]
    pub output: PathBuf,

    /// Overwrite --output when it exists.
    #[arg(long)]
    pub force: bool,

    /// Write the trace as numbered parts (TRACE.0.jsonl, TRACE.1.jsonl, ...) of N lines at
    /// most, each whole once the next opens. Timestamps and ids run on across parts: joined
    /// in order they are the whole capture.
    #[arg(long, value_name = "N")]
    pub rotate_records: Option<u64>,

    /// Numbered parts as --rotate-records, each spanning less than S seconds of arrivals
    /// (with both, a part ends at whichever comes first).
    #[arg(long, value_name = "S")]
    pub rotate_seconds: Option<f64>,

    /// Tokens per hash id. 16 (vLLM's and SGLang's page, Qwen-Bailian's) keeps reuse as the
    /// server saw it; a larger block loses the reuse of a prompt's last partial block (at 512,
    /// most of a short prompt's). Each line names it, and `replay` uses it.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub block_size: usize,

    /// A request header whose value names the request's session (repeat for several): a
    /// request whose prompt extends no earlier one's is the next turn of its session's latest.
    /// Always read: x-session-id, x-session-affinity, x-dynamo-session-id, session-id. Only
    /// the links are kept, never the value.
    #[arg(long, value_name = "NAME")]
    pub session_header: Vec<String>,

    /// A file whose bytes key the hash ids: captures made with one key line up, and without
    /// it nobody can test a guessed prompt against an id. Keep it secret. Without it, a
    /// random key: ids line up within this capture only.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Write this share of the conversations (0 < F <= 1), each whole: a conversation's turns
    /// are kept or left out together, drawn at random by its first turn. The rest are
    /// forwarded as every request is, and counted at the end.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub sample: f64,

    /// Stop after this many requests (of any kind) were taken, once they are answered.
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,

    /// Serve clients https with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Trust this PEM CA certificate for an https upstream, beside the bundled roots.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Do not verify an https upstream's certificate.
    #[arg(long)]
    pub insecure: bool,
}
