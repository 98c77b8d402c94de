//! The checks of the verdict, one function per concern: each reads the summary (and run.json
//! where the records cannot tell) and says every reason it finds, with its figures, its
//! likely cause and its fix.

use serde_json::Value;

use super::bounds::{Bound, Bounds};
use super::causes;
use crate::stats::{percentile_key, Summary};

/// Where a check says a reason: its key and sentence.
pub type Say<'a> = dyn FnMut(&'static str, String) + 'a;

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// The run did not complete, or too many of its requests failed.
pub fn outcome(s: &Summary, bounds: &Bounds, say: &mut Say) {
    if let Some(how) = s.ended.as_ref().and_then(|e| e["how"].as_str()) {
        if how != "completed" {
            let detail = s.ended.as_ref().and_then(|e| e["detail"].as_str());
            say(
                "ended",
                format!("the run did not complete: {}", detail.unwrap_or(how)),
            );
        }
    }
    let failed = s.failed as f64 / s.total.max(1) as f64;
    let bound = bounds.get(Bound::FailedShare);
    if s.total > 0 && failed > bound {
        let worst = s.by_error_kind.iter().max_by_key(|(_, n)| **n);
        let first = worst.and_then(|(kind, _)| {
            let m = s.first_error_by_kind.get(kind)?;
            Some(format!("; most were {kind}, the first: {m}"))
        });
        say(
            "failed",
            format!(
                "{} of {} requests failed ({}, bound {}){}; the latencies of the rest describe \
                 another load (fix what the server refused, or lower the load)",
                s.failed,
                s.total,
                pct(failed),
                pct(bound),
                first.unwrap_or_default()
            ),
        );
    }
}

/// The client kept its schedule: drift, late sends, holes in the load.
pub fn schedule(s: &Summary, run: Option<&Value>, bounds: &Bounds, say: &mut Say) {
    let Some(d) = s.latency(&crate::stats::latency::DRIFT) else {
        return;
    };
    let queued = run.map_or(0, |r| r["senders"]["queued_late"].as_u64().unwrap_or(0));
    // A burst larger than what the senders hold ahead is late by the trace's own making.
    let burst = match queued {
        0 => String::new(),
        n => format!(
            "; {n} requests were built in time but waited behind a burst larger than the \
             senders hold ahead (--channel-capacity, --num-sender)"
        ),
    };
    let p99 = d.raw_percentile(99.0).unwrap_or(d.max);
    let bound = bounds.get(Bound::DriftP99Ms);
    let late = s.late_sends as f64 / d.count.max(1) as f64;
    let stall = bounds.get(Bound::StallMs);
    let (drifted, late_many, stalled) = (
        p99 > bound,
        late > bounds.get(Bound::LateShare),
        d.max > stall,
    );
    if !(drifted || late_many || stalled) {
        return;
    }
    let cause = causes::late_client(run);
    if drifted {
        say(
            "schedule",
            format!(
                "send drift p99 {p99:.1} ms > {bound} ms: the server met another arrival \
                 pattern than the trace's{burst}; {cause}"
            ),
        );
    }
    if late_many {
        say(
            "late-sends",
            format!(
                "{} of {} sends ({}) were more than 1 ms late (bound {}){burst}; {cause}",
                s.late_sends,
                d.count,
                pct(late),
                pct(bounds.get(Bound::LateShare))
            ),
        );
    }
    if stalled {
        say(
            "stall",
            format!(
                "a due request waited {:.2} s to be sent (bound {:.2} s): the load had a \
                 hole{burst}; {cause}",
                d.max / 1e3,
                stall / 1e3
            ),
        );
    }
}

/// The client's own resources: its producers, senders, descriptors, and shards' clocks.
pub fn client(s: &Summary, run: Option<&Value>, bounds: &Bounds, say: &mut Say) {
    if let Some(rows) = run.and_then(|r| r["merged"]["shards"].as_array()) {
        shard_clocks(rows, bounds.get(Bound::ShardSkewMs), say);
    }
    let senders = run.map(|r| &r["senders"]);
    let cpu = senders.and_then(sender_cpu_share);
    if let Some(cpu) = cpu.filter(|&c| c > bounds.get(Bound::SenderCpu)) {
        say(
            "sender-saturated",
            format!(
                "the sender threads were on a CPU {} of the run (bound {}): their timestamps \
                 waited for the CPU; give --num-sender more threads, or the client more cores",
                pct(cpu),
                pct(bounds.get(Bound::SenderCpu))
            ),
        );
    }
    if senders.is_some_and(|s| s["out_of_descriptors"] == true) {
        say(
            "descriptors",
            "this client ran out of file descriptors (ulimit -n): requests \
             waited for a connection another request freed, so the load was capped by the \
             client, not the server (raise ulimit -n)"
                .into(),
        );
    }
    let arrived_late = senders.map_or(0, |s| s["arrived_late"].as_u64().unwrap_or(0));
    let share = arrived_late as f64 / s.total.max(1) as f64;
    if share > bounds.get(Bound::LateShare) {
        let producers = match run.and_then(|r| r["num_producer"].as_u64()) {
            Some(n) => format!("its {n} producer thread(s)"),
            None => "the producer threads".into(),
        };
        say(
            "producers-behind",
            format!(
                "{arrived_late} requests ({}) reached their sender after their send time with \
                 nothing built behind them: {producers} could not build prompts as fast as the \
                 schedule needs them (give --num-producer more threads, or a larger \
                 --block-cache-mb)",
                pct(share),
            ),
        );
    }
}

/// A merged run's shards (merged run.json's `merged.shards`): each must have started within
/// `bound` ms of the agreed instant, by clocks known to agree: checked with `--ntp`, or one
/// host's.
fn shard_clocks(rows: &[Value], bound: f64, say: &mut Say) {
    let name = |r: &Value| r["shard"].as_str().unwrap_or("?").to_string();
    let skewed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let skew = r["start_skew_ms"].as_f64()?;
            (skew.abs() > bound).then(|| format!("{} by {skew:+.1} ms", name(r)))
        })
        .collect();
    if !skewed.is_empty() {
        say(
            "shard-clocks",
            format!(
                "shards started apart from the agreed instant: {} (bound {bound} ms); their \
                 loads did not overlap as one schedule (start every shard with one --start-at)",
                skewed.join(", ")
            ),
        );
    }
    let unchecked: Vec<&Value> = rows
        .iter()
        .filter(|r| r["clock_offset_ms"].is_null())
        .collect();
    let host = rows.first().and_then(|r| r["host"].as_str());
    let one_host = host.is_some() && rows.iter().all(|r| r["host"].as_str() == host);
    // Fine: every clock checked, or none and all on one host (one clock).
    let known = unchecked.is_empty() || (unchecked.len() == rows.len() && one_host);
    if !known {
        say(
            "shard-clocks",
            format!(
                "the clocks of shards {} were not checked, and not every shard ran on one \
                 host: their start skew is unknown (give every shard --ntp HOST)",
                unchecked
                    .iter()
                    .map(|r| name(r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
}

/// The share of the run the sender threads were on a CPU, from run.json's `senders`.
pub fn sender_cpu_share(senders: &Value) -> Option<f64> {
    let (cpu, threads) = (senders["cpu_s"].as_f64()?, senders["threads"].as_f64()?);
    let wall = senders["wall_s"].as_f64()?;
    (threads * wall > 0.0).then(|| cpu / (threads * wall))
}

/// The servers' prefix caches against what the trace's reuse predicts: far above, a cache
/// warmed before the run; far below, caching off or evicting.
pub fn caches(s: &Summary, run: Option<&Value>, bounds: &Bounds, say: &mut Say) {
    let (Some(observed), Some(expected)) = (s.prefix.observed_share(), s.prefix.expected_share())
    else {
        return;
    };
    let points = (observed - expected) * 100.0;
    let unexplained = s.prefix.unexplained_share().unwrap_or(0.0) * 100.0;
    let warm_bound = bounds.get(Bound::WarmCachePoints);
    // A primed run's cache was filled on purpose (summary's "Primed" line).
    if (points > warm_bound || unexplained > warm_bound) && !s.primed {
        let repeated =
            run.is_some_and(|r| r["loop_prompts"] == "repeat" && r["loop"].as_u64() > Some(1));
        let cause = match repeated {
            true => {
                "every --loop pass after the first replayed the first's prompts \
                     (--loop-prompts repeat): give --loop-prompts fresh"
            }
            false => {
                "the server's cache held these prompts before the run (an earlier \
                      replay of the same trace); give --fresh-prompts, or restart the server"
            }
        };
        say(
            "warm-cache",
            format!(
                "observed prefix-cache hits {} against {} expected ({points:+.1} points; \
                 {unexplained:.1} % of the prompt tokens were served beyond what each \
                 request's expected hits explain, bound {warm_bound}): {cause}",
                pct(observed),
                pct(expected)
            ),
        );
    }
    if -points > bounds.get(Bound::ColdCachePoints) && observed < expected / 2.0 {
        let own = run.is_some_and(|r| r["extra_body"]["cache_prompt"] == false);
        let cause = match own {
            true => {
                "this run's own --extra-body turns llama.cpp's caching off (cache_prompt: \
                     false)"
            }
            false => {
                "prefix caching off (vLLM --no-enable-prefix-caching, SGLang \
                      --disable-radix-cache, llama.cpp cache_prompt false), a cache too small \
                      for the working set, or a conversation spread over instances (give \
                      --route session)"
            }
        };
        say(
            "cold-cache",
            format!(
                "observed prefix-cache hits {} against {} expected ({points:.1} points): the \
                 server kept far less than the trace reuses: {cause}",
                pct(observed),
                pct(expected)
            ),
        );
    }
}

/// The lengths the server counted against the trace's (more than the bound's share of them,
/// or of their tokens, off), and answers that bought nothing.
pub fn lengths(s: &Summary, bounds: &Bounds, say: &mut Say) {
    let bound = bounds.get(Bound::InexactShare);
    let off = |m: &crate::stats::LengthMatch| {
        let (requests, tokens) = m.inexact_shares();
        (requests > bound || tokens > bound / 5.0).then_some((requests, tokens))
    };
    let causes = [
        (
            "inexact-input",
            "input",
            &s.input_length_match,
            "the tokenizer or chat template is not the served model's (give its \
             tokenizer_config.json too), or --input-length-of is not what the trace counts",
        ),
        (
            "inexact-output",
            "output",
            &s.output_length_match,
            "the server stopped early or late, ignoring min_tokens or ignore_eos (give \
             --extra-body with the options it honours)",
        ),
    ];
    for (key, what, m, cause) in causes {
        if let Some((share, tokens)) = off(m) {
            say(
                key,
                format!(
                    "{} of {} {what} lengths ({}) differ from the trace's, by {} of its \
                     tokens, up to {} in one (bound {}): {cause}",
                    m.checked - m.exact,
                    m.checked,
                    pct(share),
                    pct(tokens),
                    m.max_abs_diff,
                    pct(bound)
                ),
            );
        }
    }
    if s.reasoning.ended_in_thinking > 0 {
        say(
            "ended-in-thinking",
            format!(
                "{} of {} reasoning answers ended inside their thinking: their output length \
                 bought no answer (raise output_length or cap the reasoning)",
                s.reasoning.ended_in_thinking, s.reasoning.answers
            ),
        );
    }
}

/// What a run too small for some percentiles cannot give: not a reason (every figure it
/// prints holds; the others print "n/a"), but said beside the verdict.
pub fn thin_tails(s: &Summary, say: &mut Say) {
    let p = &s.percentiles;
    let thin: Vec<String> = p
        .list
        .iter()
        .filter(|&&q| !p.holds(q, s.ok))
        .map(|&q| format!("{} needs {}", percentile_key(q), p.samples_needed(q)))
        .collect();
    if !thin.is_empty() && s.ok > 0 {
        say(
            "few-samples",
            format!(
                "{} successful requests leave fewer than {} samples beyond some percentiles, \
                 which print n/a ({}); more requests give them (or --bound tail-samples=N)",
                s.ok,
                p.tail_samples,
                thin.join(", ")
            ),
        );
    }
}
