//! The plan line: what a replay will do, said before it does it (and by `--dry-run`), with
//! the settings that are likely mistakes.

use super::setup::TraceInput;
use crate::load::{Arrival, Pace};
use crate::plan::{ReplayPlan, Targets};
use crate::session::SessionMode;
use crate::trace::Format;

/// What the plan line says of conversations: how many turns wait for their parent, the
/// session cap and bound, and what a turn carries of its parent.
fn conversations(plan: &ReplayPlan, trace: &TraceInput, waiting: u64) -> String {
    let p = &trace.preview;
    let mut out = String::new();
    match (trace.stats.turns_with_parent, plan.session_mode) {
        (0, _) => {}
        (_, SessionMode::AfterParent) => {
            out.push_str(&format!(
                "; {waiting} turns wait for their parent's end (--session-mode after-parent)"
            ));
            out.push_str(&carrying(plan, trace));
            if let Some(cap) = plan.sessions.max_active {
                out.push_str(&format!(
                    "; at most {cap} sessions at once, the others wait for a place (--max-active-sessions)"
                ));
            }
            if let Some(bound) = trace.bound_cutting_turns(plan) {
                out.push_str(&format!(
                    "; no turn leaves after {:.3} s: a session whose next turn would is cut, so \
                     the answers' times decide how many of the {} records are sent (run.json's \
                     schedule.turns_cut counts the others)",
                    bound as f64 / 1e9,
                    p.records
                ));
            }
        }
        (_, SessionMode::Timestamp) => out.push_str(&format!(
            "; {waiting} turns leave at their own time, answered or not (--session-mode timestamp)"
        )),
    }
    out
}

/// What a conversation's turn carries of its parent (`--carry-forward`), as this trace's
/// records make it: synthetic turns their parent's prompt and answer; recorded messages
/// threaded with the live answers, or sent verbatim at their own times.
fn carrying(plan: &ReplayPlan, trace: &TraceInput) -> String {
    use crate::session::CarryForward;
    let carry = plan.sessions.carry_forward;
    let synthetic = trace.stats.verbatim_records < trace.stats.records;
    let messages = trace.stats.verbatim_records > 0;
    let mut parts = Vec::new();
    if synthetic {
        parts.push(match carry.carries() {
            true => "synthetic turns carry their parent's prompt and actual answer",
            false => "synthetic turns are built from their own hash ids",
        });
    }
    if messages {
        parts.push(match (carry, trace.format.is_task_graph()) {
            (CarryForward::On, _) | (CarryForward::Auto, true) => {
                "recorded messages are threaded with the live answers"
            }
            (CarryForward::Off, _) => {
                "recorded messages are sent as recorded (a delta turn with its recorded history)"
            }
            (CarryForward::Auto, false) => {
                "recorded messages are sent verbatim, at their own times where they have one, \
                 as AIPerf's history mode (message_mode delta threads the live answers)"
            }
        });
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!("; {} (--carry-forward {carry})", parts.join(", ")),
    }
}

/// A rate with three significant digits (0.0370, 3.40, 1000).
fn three_digits(x: f64) -> String {
    match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 10.0 => format!("{x:.1}"),
        x if x >= 1.0 => format!("{x:.2}"),
        x => format!("{x:.3}"),
    }
}

/// A time scale at or above this on a millisecond trace is likely trace-replayer's habit.
const SUSPICIOUS_SCALE: f64 = 100.0;
/// Requests per second per sender thread past which a run should be checked with calibrate.
const CHECK_RATE_PER_SENDER: f64 = 2000.0;

/// What the run will do, said before it does it, and the settings that are likely mistakes.
/// Every count, span and rate is the effective schedule's ([`crate::schedule::Preview`]): what is sent.
pub fn describe(plan: &ReplayPlan, trace: &TraceInput) -> (String, Vec<String>) {
    let p = &trace.preview;
    let span_s = p.span_s();
    let busiest = p.busiest_second;
    let endpoints = match &plan.targets {
        Targets::Mock { .. } => "the in-process mock".to_string(),
        Targets::Servers(specs) => {
            let urls: Vec<&str> = specs.iter().map(|s| s.endpoint.url.as_str()).collect();
            format!("{} (--route {})", urls.join(", "), plan.route.name())
        }
    };
    let mean = three_digits(p.records as f64 / span_s.max(1e-3));
    // Turns that wait for a parent, over every pass of --loop (at most the records sent).
    let waiting = (trace.stats.turns_with_parent * plan.passes).min(p.records);
    let task_graph = trace.format.is_task_graph() && plan.load.pace == Pace::Trace;
    let mut line = match plan.load.pace {
        // A task graph has no arrival times: every turn leaves when what it waits for has
        // answered, so there is no rate to state (its span is the answers').
        Pace::Trace if task_graph => format!(
            "plan: {} tasks of {} turns, closed loop: each turn leaves when the turns it waits \
             for have answered, after its recorded wait (no arrival times, so no rate); to \
             {endpoints}",
            p.records - waiting,
            p.records,
        ),
        Pace::Trace => format!(
            "plan: {} records over {span_s:.1} s at the trace's timing (--time-scale {}), mean \
             {mean} req/s, busiest second {busiest} requests; to {endpoints}",
            p.records, plan.time_scale,
        ),
        Pace::Rate {
            per_s,
            arrival,
            burstiness,
        } => {
            let law = match arrival {
                Arrival::Gamma => format!("gamma gaps of shape {burstiness}"),
                Arrival::Poisson => "Poisson arrivals".into(),
                Arrival::Constant => "constant gaps".into(),
            };
            format!(
                "plan: {} records in trace order at {} req/s ({law}, --seed {}) over \
                 {span_s:.1} s, busiest second {busiest} requests; the trace's timestamps are \
                 not used; to {endpoints}",
                p.records,
                per_s * plan.time_scale,
                plan.load.seed,
            )
        }
        Pace::Closed { concurrency } => format!(
            "plan: {} records in trace order, closed loop with {concurrency} in flight (the \
             trace's timestamps are not used); to {endpoints}",
            p.records,
        ),
    };
    if p.skipped_by_offset > 0 || plan.load.start_offset_ms > 0.0 {
        line.push_str(&format!(
            "; --start-offset {} s skips {} records",
            plan.load.start_offset_ms / 1000.0,
            p.skipped_by_offset
        ));
    }
    if let Some(g) = plan.load.max_idle_gap_ms {
        line.push_str(&format!(
            "; silences cut to {} s (--max-idle-gap)",
            g / 1000.0
        ));
    }
    if let Some(cut) = p.cut_by {
        line.push_str(&format!(
            "; {} ends it ({} records of the trace not sent)",
            cut.option(),
            p.cut_records
        ));
    }
    if plan.passes > 1 {
        line.push_str(&format!(
            "; the trace {} times (--loop), {}",
            plan.passes,
            match plan.loop_prompts {
                crate::pipeline::LoopPrompts::Fresh => "each pass with prompts of its own",
                crate::pipeline::LoopPrompts::Repeat => {
                    "every pass the first pass's prompts (--loop-prompts repeat: the passes after \
                     the first meet a warm cache)"
                }
            }
        ));
    }
    line.push_str(&conversations(plan, trace, waiting));
    if let Some(d) = &plan.prompt_dataset {
        line.push_str(&format!(
            "; prompt text from {} cut or extended to each input_length (hash ids not used)",
            d.display()
        ));
    }
    if p.warmup > 0 {
        line.push_str(&format!(
            "; the first {} are warmup, in no statistic",
            p.warmup
        ));
    }
    if let (Some(shard), Some((shares, _))) = (plan.hosts.shard, &trace.shares) {
        line.push_str(&format!("; {}", shares.describe(shard)));
    }
    if plan.sessions.measure_from == crate::session::MeasureFrom::Mid {
        line.push_str(
            "; each conversation is measured from a turn drawn inside it (--measure-from mid)",
        );
    }
    if let Some(s) = &plan.scenario {
        line.push_str(&format!(
            "; following scenario {} (its options fixed: run.json `scenario`)",
            s["name"].as_str().unwrap_or("?")
        ));
    }
    if plan.hosts.scrape_left_to_shard0 {
        line.push_str("; server metrics are scraped by shard 0 (--scrape-every-shard for all)");
    }
    if let Some(at) = plan.hosts.start_at_unix_ns {
        line.push_str(&format!(
            "; time 0 at {} ({:.1} s from now, --start-at)",
            crate::sys::wall_start::rfc3339_utc(at),
            (at as f64 - crate::sys::wall_start::unix_ns_now() as f64) / 1e9
        ));
    }
    let mut warnings = Vec::new();
    if plan.load.pace == Pace::Trace
        && trace.format == Format::Mooncake
        && plan.time_scale >= SUSPICIOUS_SCALE
    {
        warnings.push(format!(
            "--time-scale (--scale-factor) {} on a trace whose timestamps are milliseconds: \
             {:.0} s of trace are replayed in {span_s:.2} s. trace-replayer reads Mooncake \
             milliseconds as seconds, so its users type --scale-factor 1000 for real time; here \
             1 is real time",
            plan.time_scale,
            trace.stats.span_ms / 1000.0,
        ));
    }
    if matches!(plan.load.pace, Pace::Trace | Pace::Rate { .. })
        && !task_graph
        && busiest as f64 > CHECK_RATE_PER_SENDER * plan.num_sender as f64
    {
        warnings.push(format!(
            "the busiest second asks for {busiest} requests from {} sender thread(s): check with \
             `llmreplay calibrate` that this machine keeps such a rate on schedule, or add \
             --num-sender",
            plan.num_sender
        ));
    }
    (line, warnings)
}
