//! Option groups that several commands flatten into theirs: how results are shown, how
//! prompts are built, how strictly a trace is read.

use std::path::PathBuf;

use clap::Args;

use crate::prompt::{LengthOf, PromptMode};
use crate::report::OutputFormat;

/// How results are summarised and shown (`replay` and `report`).
#[derive(Debug, Args, Clone, Default)]
pub struct ResultArgs {
    /// SLOs for goodput, vLLM's syntax: `--goodput ttft:500 tpot:50 e2el:3000` (ms). A
    /// request is good when it succeeded and meets every SLO given (inclusive).
    /// `ttft-sched:MS` and `e2el-sched:MS` time from the planned send instead of the actual
    /// one, so that what the client sent late is not counted good.
    #[arg(long, value_name = "METRIC:MS", num_args = 1..)]
    pub goodput: Vec<String>,

    /// Percentiles reported for every metric besides p25, p50, p75, p90 and p99, e.g.
    /// `--percentiles 99.9,99.99`.
    #[arg(long, value_name = "P,P,...", value_delimiter = ',')]
    pub percentiles: Vec<f64>,

    /// A bound of the run's verdict, `NAME=VALUE` (repeatable): drift-p99-ms (50),
    /// late-share (0.05), stall-ms (1000), shard-skew-ms (50), sender-cpu (0.9),
    /// failed-share (0.01), warm-cache-points (10), cold-cache-points (10), inexact-share
    /// (0.05), tail-samples (5).
    /// A run outside any is INVALID, except tail-samples: a percentile with fewer samples
    /// beyond it prints n/a. README "Can I trust this run?" says why each default is what it
    /// is.
    #[arg(long, value_name = "NAME=VALUE")]
    pub bound: Vec<String>,

    /// `text` prints the vLLM-style table; `json` prints summary.json to stdout for scripts.
    #[arg(long, value_parser = crate::cli::choice::<OutputFormat>(), default_value_t)]
    pub output_format: OutputFormat,
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
    /// tokenizer.json, if any); without a `chat_template` in it, the `chat_template.jinja`
    /// beside it is the template.
    #[arg(long, value_name = "PATH")]
    pub tokenizer_config: Option<PathBuf>,

    /// What `input_length` counts: `prompt` = the server's `usage.prompt_tokens` (the chat
    /// template's or the special tokens' overhead is taken off the content), `content` = the
    /// synthetic content alone.
    #[arg(long, value_parser = crate::cli::choice::<LengthOf>(), default_value_t)]
    pub input_length_of: LengthOf,

    /// The chat template's reasoning switch (`enable_thinking`, as Qwen3, DeepSeek-R1 and
    /// others read it): `on`/`off` render the count with it and send it in
    /// `chat_template_kwargs` (vLLM, SGLang, llama.cpp; --api openai-chat); `auto` leaves the
    /// template's default.
    #[arg(long, value_parser = crate::cli::choice::<crate::prompt::Thinking>(), default_value_t)]
    pub thinking: crate::prompt::Thinking,

    /// `text` sends prompt text; `token-ids` sends the token id array itself (exact by
    /// construction; --api openai-completions only).
    #[arg(long, value_parser = crate::cli::choice::<PromptMode>(), default_value_t)]
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

/// How strictly a trace is read (replay and inspect).
#[derive(Debug, Args, Clone, Default)]
pub struct TraceInputArgs {
    /// Skip lines that fail to parse (wrong types, missing fields, invalid JSON or UTF-8,
    /// over-long lines) instead of stopping at the first; they are counted and the first is
    /// shown. Records are numbered without them.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Let nothing slip: refuse a trace whose timestamps go backwards (without it such
    /// records are sorted within a window of 1024 and a warning says how many), and end a
    /// replay whose verdict is INVALID with exit status 4.
    #[arg(long)]
    pub strict: bool,
}
