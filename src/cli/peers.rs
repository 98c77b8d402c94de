//! Peers' names for what llmreplay does (vLLM's `bench serve`, AIPerf, UCM's trace replay,
//! GuideLLM, trace-replayer): one table, so that an option or subcommand of theirs typed here
//! gets a hint to ours instead of clap's guess by spelling (`--input-file` is not
//! `--input-length-of`). The README's "Coming from another tool" table says the same in prose;
//! `tests/suite/papercuts.rs` runs every row and checks each option it names is ours.

/// One peer's name and ours.
pub struct Peer {
    /// Their option (`--request-rate`) or subcommand (`profile`).
    pub theirs: &'static str,
    /// Whose it is.
    pub tool: &'static str,
    /// What does its job here.
    pub ours: &'static str,
}

const fn peer(theirs: &'static str, tool: &'static str, ours: &'static str) -> Peer {
    Peer { theirs, tool, ours }
}

/// Peers' options.
pub const OPTIONS: &[Peer] = &[
    peer(
        "--request-rate",
        "vLLM's and AIPerf's",
        "--rate R (with --arrival poisson|gamma)",
    ),
    peer("--metric-percentiles", "vLLM's", "--percentiles 50,90,99"),
    peer("--base-url", "vLLM's and UCM's", "--endpoint URL"),
    peer("--url", "AIPerf's", "--endpoint URL"),
    peer("--target", "GuideLLM's", "--endpoint URL"),
    peer("--num-prompts", "vLLM's", "--max-requests N"),
    peer("--request-count", "AIPerf's", "--max-requests N"),
    peer("--result-dir", "vLLM's and UCM's", "--output DIR"),
    peer(
        "--save-result",
        "vLLM's",
        "nothing: every run saves its results in --output DIR",
    ),
    peer(
        "--max-concurrency",
        "vLLM's",
        "--concurrency C (a closed loop; see the README's peer table)",
    ),
    peer("--input-file", "AIPerf's", "--trace FILE"),
    peer("--trace-path", "UCM's", "--trace FILE"),
    peer(
        "--data",
        "GuideLLM's",
        "--trace FILE, or --synthetic input=N,output=M",
    ),
    peer(
        "--custom-dataset-type",
        "AIPerf's",
        "--format FORMAT (its mooncake_trace is --format mooncake)",
    ),
    peer(
        "--fixed-schedule",
        "AIPerf's",
        "nothing: a trace is sent at its own timestamps unless --rate or --concurrency is given",
    ),
    peer(
        "--dataset-name",
        "vLLM's",
        "--prompt-source dataset --prompt-dataset FILE for ShareGPT prompts, or --synthetic \
         input=N,output=M for random ones",
    ),
    peer(
        "--endpoint-type",
        "AIPerf's",
        "--api API (its chat is openai-chat, completions openai-completions)",
    ),
    peer("--backend", "vLLM's and UCM's", "--api API"),
    peer("--warmup-request-count", "AIPerf's", "--warmup-requests N"),
    peer(
        "--streaming",
        "AIPerf's",
        "--stream (the default; --no-stream for whole answers)",
    ),
];

/// Peers' subcommands.
pub const SUBCOMMANDS: &[Peer] = &[
    peer("profile", "AIPerf's", "llmreplay replay"),
    peer(
        "benchmark",
        "GuideLLM's",
        "llmreplay replay, or llmreplay sweep for a rate sweep",
    ),
    peer("bench", "vLLM's (`vllm bench serve`)", "llmreplay replay"),
];

/// The hint for `name`, one of a peer's options (`kind` "option") or subcommands.
pub fn hint(table: &[Peer], kind: &str, name: &str) -> Option<String> {
    let p = table.iter().find(|p| p.theirs == name)?;
    Some(format!("{name} is {} {kind}; here use {}", p.tool, p.ours))
}
