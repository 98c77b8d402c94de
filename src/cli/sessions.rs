//! Options of conversation replay: carry-forward, and the check that the server reports
//! cached tokens (README "Load modes and conversations").

use clap::Args;

pub use crate::session::CarryForward;

#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Conversations and agents")]
pub struct SessionArgs {
    /// With --session-mode after-parent, a turn's prompt holds its parent's prompt as sent
    /// and the parent's actual answer, then the turn's own tokens past them, so a server that
    /// caches generated tokens (vLLM, SGLang, llama.cpp) hits where production's did; the
    /// length stays exactly the trace's. `auto` (the default) follows each format's origin:
    /// synthetic turns are carried; recorded `messages` are threaded with the live answers in
    /// agentic traces (dag, atif, otel) and AIPerf's `message_mode: delta`, and sent verbatim,
    /// at their own times, in AIPerf's default history mode. `on` threads every turn live,
    /// `off` none (a delta turn then gets its recorded history). Text prompts only (token-id
    /// prompts are sent as built, and their records say so).
    #[arg(long, value_parser = crate::cli::choice::<CarryForward>(), default_value_t)]
    pub carry_forward: CarryForward,

    /// `mid` measures each conversation from a turn drawn between a quarter and three
    /// quarters of its turns, as AgentX draws its trajectory start (from --seed and its id:
    /// the same on every host); the turns before it run as an unmeasured warmup that
    /// fills the caches, in no statistic (AgentX's rule for agentic traces). run.json's
    /// `measure_from.from_turn` gives each conversation's first measured turn, and each
    /// record's `warmup` says whether it was measured. Needs --session-mode after-parent.
    #[arg(long, value_parser = crate::cli::choice::<crate::session::MeasureFrom>(), default_value_t)]
    pub measure_from: crate::session::MeasureFrom,

    /// Before the run, send each endpoint the same prompt twice and stop (exit 2) unless the
    /// second answer reports cached prompt tokens (`usage.prompt_tokens_details
    /// .cached_tokens`): an hour-long cache experiment against a server started without
    /// prefix caching or without prompt-token details would measure nothing.
    #[arg(long)]
    pub require_cache_report: bool,

    /// With --session-mode after-parent: at most N conversations (sessions) run at once. A
    /// session takes a place when its first turn is due and frees it when its last turn
    /// ends; a session due while all N places are taken waits, in arrival order, and its
    /// first turn's record says how long (`session_wait_ms`: its send lag stays the
    /// sender's own). The turns of a running session are never held back. With `--shard`,
    /// each shard has its own N.
    #[arg(long, value_name = "N")]
    pub max_active_sessions: Option<usize>,
}
