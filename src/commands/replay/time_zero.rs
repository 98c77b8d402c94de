//! The run's time 0: a lead after the connections are open, or an instant the shards of one
//! run share: `--start-at`, or the one the `--rendezvous` barrier finds. Before it, each shard
//! checks its clock (`--ntp`, else the target's `Date` header).

use std::time::Duration;

use super::setup::{Fleet, Say, TraceInput};
use super::RunOutcome;
use crate::ending::Ending;
use crate::error::{Error, Result};
use crate::ntp::ClockCheck;
use crate::plan::ReplayPlan;
use crate::rendezvous::{Rendezvous, State};
use crate::sys::clock::RunClock;
use crate::sys::wall_start::{self, StartReport};

/// Longest wait, once the senders' connections are open, for the producers' first request:
/// the clock starts as soon as one is built (producers have been filling the channel since
/// before the connections), at the latest after this.
pub(super) const START_LEAD_NS: u64 = 500_000_000;
/// `--start-at`: the senders open their connections this long before the instant (servers
/// close idle keep-alive connections after a few seconds: vLLM's uvicorn after 5).
const START_AT_LEAD: Duration = Duration::from_secs(2);
/// A shard ready after its `--start-at` instant starts this soon.
pub(super) const LATE_START_NS: u64 = 1_000_000;

/// What the measured run starts from: the clock check, and the shared instant (Unix ns).
#[derive(Default)]
pub(super) struct Starting {
    pub(super) clock_check: Option<ClockCheck>,
    pub(super) at: Option<u64>,
    pub(super) run_id: Option<String>,
}

/// The run's id: `--run-id`; else minted from the agreed instant (every shard mints the same),
/// or, for a run of one host, from its own start. A shard with no agreed start has none: its
/// fellows could not mint the same.
pub(super) fn run_id(plan: &ReplayPlan, trace: &TraceInput, at: Option<u64>) -> Option<String> {
    if let Some(id) = &plan.hosts.run_id {
        return Some(id.clone());
    }
    let digest = trace.shares.as_ref().map_or("", |(_, d)| d.as_str());
    let at = match (at, plan.hosts.shard) {
        (Some(at), _) => at,
        (None, None) => wall_start::unix_ns_now(),
        (None, Some(_)) => return None,
    };
    Some(crate::plan::hosts::minted_run_id(at, digest))
}

/// What names a run's requests: its id, or for a run that has none (a shard with neither
/// `--run-id` nor an agreed start) the trace's digest, which every shard reads alike.
pub(super) fn requests_run(run_id: Option<&str>, trace: &TraceInput) -> String {
    if let Some(id) = run_id {
        return id.to_string();
    }
    let digest = trace.shares.as_ref().map_or("", |(_, d)| d.as_str());
    let hex: String = digest
        .rsplit(':')
        .next()
        .unwrap_or("")
        .chars()
        .take(8)
        .collect();
    format!("trace-{hex}")
}

/// `--rendezvous`: this shard joins the meeting (before anything else, so that a failure
/// while preparing is seen by the others).
pub(super) fn join(plan: &ReplayPlan) -> Result<Option<Rendezvous>> {
    match (&plan.hosts.rendezvous, plan.hosts.shard) {
        (Some(r), Some(s)) => Rendezvous::join(
            &r.dir,
            s.index,
            s.count,
            plan.hosts.run_id.as_deref(),
            r.heartbeat_timeout,
        )
        .map(Some)
        .map_err(Error::Run),
        _ => Ok(None),
    }
}

/// The closing heartbeat: how this shard's run ended, for the others and for `merge`.
pub(super) fn say_how_it_ended(rv: &mut Rendezvous, outcome: &Result<RunOutcome>) {
    match outcome {
        Err(e) => rv.end(State::Failed, &crate::secrets::redact(&e.to_string())),
        Ok(o) => {
            let state = match &o.ending {
                Ending::Completed | Ending::NoSuccess { .. } | Ending::MaxErrorRate { .. } => {
                    State::Done
                }
                Ending::WriteFailed { .. } => State::Failed,
                Ending::Signal | Ending::ShardLost { .. } => State::Stopped,
            };
            rv.end(state, &o.ending.describe());
        }
    }
}

/// `--rendezvous` without `--start-at`: the barrier, and the instant it gives; else the
/// `--start-at` instant. Either is refused when it passed too long ago to start together.
pub(super) fn meet(
    plan: &ReplayPlan,
    trace: &TraceInput,
    meeting: Option<&mut Rendezvous>,
    offset: Option<i64>,
    say: &Say,
) -> Result<Option<u64>> {
    let at = match (plan.hosts.start_at_unix_ns, meeting, &plan.hosts.rendezvous) {
        (Some(at), _, _) => Some(at),
        (None, Some(rv), Some(r)) => {
            let count = plan.hosts.shard.map_or(1, |s| s.count);
            say.say(format!(
                "ready; waiting for the other shards in {} (up to {} s)",
                rv.dir().display(),
                r.ready_timeout.as_secs()
            ));
            let run = trace
                .shares
                .as_ref()
                .map_or(String::new(), |(_, digest)| digest.clone());
            rv.set_clock_offset(offset);
            let at = rv
                .wait_ready(&run, r.ready_timeout, || {
                    crate::sys::stop::signals_received() > 0
                })
                .map_err(Error::Run)?;
            say.say(format!("all {count} shards ready"));
            let reference = plan
                .hosts
                .ntp
                .as_deref()
                .unwrap_or("the endpoint's Date header");
            let bound = plan.hosts.max_clock_offset_ms;
            if let Some(note) =
                compare_hosts(&rv.offsets(), bound, reference).map_err(Error::Run)?
            {
                eprintln!("warning: {note}");
            }
            Some(at)
        }
        _ => None,
    };
    if let Some(at) = at {
        let now = wall_start::reference_now(offset.unwrap_or(0));
        let late_s = now.saturating_sub(at) / 1_000_000_000;
        if late_s > crate::plan::hosts::MAX_LATE_START_S {
            return Err(Error::Run(format!(
                "the common start {} passed {late_s} s ago: this shard would run apart from \
                 the others; start it again with a new instant",
                wall_start::rfc3339_utc(at)
            )));
        }
    }
    Ok(at)
}

/// This host's clock against `--ntp`'s server, or, for a shard, against the first endpoint's
/// `Date` header. None when not checked (one host, or a server that sends no `Date`: said).
/// The offset is applied to the shared start (every shard starts on the reference clock);
/// a check too unsure to start within the verdict's `shard-skew-ms` is refused.
pub(super) fn check_clock(
    plan: &ReplayPlan,
    fleet: &Fleet,
    say: &Say,
) -> Result<Option<ClockCheck>> {
    let check = match (&plan.hosts.ntp, plan.hosts.shard) {
        (Some(server), _) => crate::ntp::check(server).map_err(Error::Run)?,
        (None, Some(_)) => {
            let spec = &fleet.specs[0];
            match crate::http::date_check::check(
                fleet.addrs[0],
                fleet.tls[0].clone(),
                &spec.endpoint.host_header(),
                &spec.endpoint.url,
            ) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!(
                        "warning: this shard's clock is not checked: {} {e}; merge will show \
                         its start skew as unknown (give --ntp HOST to check it by SNTP)",
                        spec.endpoint.url
                    );
                    return Ok(None);
                }
            }
        }
        (None, None) => return Ok(None),
    };
    let uncertainty_ms = check.uncertainty_ns as f64 / 1e6;
    say.say(format!(
        "clock: this host's is {} {} (+-{uncertainty_ms:.3} ms, {} requests); the start is \
         corrected by it",
        behind_or_ahead(check.offset_ns),
        check.server,
        check.answered
    ));
    let bound = skew_bound(plan);
    if uncertainty_ms > bound {
        return Err(Error::Run(format!(
            "this host's clock against {} is known only to +-{uncertainty_ms:.1} ms, more than \
             the verdict's shard-skew-ms {bound}: the shards could not be known to start \
             together; give --ntp HOST with an NTP server near the hosts (or a larger \
             --bound shard-skew-ms=MS)",
            check.server
        )));
    }
    Ok(Some(check))
}

/// `+400 ms`-style offsets in words: the reference clock minus this host's, as "400.0 ms
/// behind X" (this host reads earlier) or "400.0 ms ahead of X".
fn behind_or_ahead(offset_ns: i64) -> String {
    let ms = offset_ns as f64 / 1e6;
    match ms >= 0.0 {
        true => format!("{ms:.1} ms behind"),
        false => format!("{:.1} ms ahead of", -ms),
    }
}

/// The verdict's `shard-skew-ms`, as this run's `--bound` values set it.
fn skew_bound(plan: &ReplayPlan) -> f64 {
    crate::stats::Bounds::parse(&plan.render.bounds)
        .unwrap_or_default()
        .get(crate::stats::verdict::Bound::ShardSkewMs)
}

/// The hosts' clocks compared with each other through their offsets from the one reference
/// clock, once every shard is ready: `Err` when a host is further than `bound_ms` from the
/// others' median (its clock is broken, whatever the correction), else a note when the
/// reference itself is that far from every host (the server's clock is off, not the hosts').
pub(super) fn compare_hosts(
    offsets: &[Option<i64>],
    bound_ms: f64,
    reference: &str,
) -> Result<Option<String>, String> {
    let mut known: Vec<(usize, f64)> = offsets
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.map(|o| (i, o as f64 / 1e6)))
        .collect();
    if known.is_empty() {
        return Ok(None);
    }
    known.sort_by(|a, b| a.1.total_cmp(&b.1));
    let n = known.len();
    let median = (known[(n - 1) / 2].1 + known[n / 2].1) / 2.0;
    let count = offsets.len();
    let apart: Vec<String> = known
        .iter()
        .filter(|(_, o)| (o - median).abs() > bound_ms)
        .map(|(i, o)| {
            // The host reads `median - o` later than the others'.
            format!("shard {i}/{count} {:+.1} ms", median - o)
        })
        .collect();
    if !apart.is_empty() {
        return Err(format!(
            "the hosts' clocks disagree by more than --max-clock-offset-ms {bound_ms} (each \
             against the others' median, measured through {reference}): {}; steer them with \
             chrony or ntpd (or give every shard --ntp HOST)",
            apart.join(", ")
        ));
    }
    let spread = known[n - 1].1 - known[0].1;
    Ok((median.abs() > bound_ms).then(|| {
        format!(
            "the server's clock ({reference}) is {:.1} s off every host's, while the hosts \
             agree within {spread:.1} ms: the shards start together on the server's clock (its \
             own timestamps, such as its Date headers, are that far from the hosts')",
            median.abs() / 1e3
        )
    }))
}

/// `--start-at`: sleeps until the shared instant `at` (on this host's clock, `offset_ns`
/// behind the checked one), less the lead the start needs; a signal ends the wait.
pub(super) fn wait_for_start_at(at: Option<u64>, offset_ns: i64, say: &Say) {
    let Some(at) = at else { return };
    say.say(format!(
        "waiting for the common start at {}",
        wall_start::rfc3339_utc(at)
    ));
    let own_at = wall_start::on_this_host(at, offset_ns);
    wall_start::sleep_until(own_at, START_AT_LEAD, || {
        crate::sys::stop::signals_received() > 0
    });
}

/// The run clock's time 0, as run.json states it.
pub(super) struct Begun {
    pub t0_ns: u64,
    /// `--start-at`: the instant asked for, the one met, and how late.
    pub common_start: Option<StartReport>,
    pub started_unix_ms: u64,
    pub t0_monotonic_ns: u64,
}

/// Decides time 0 (see [`time_zero`]) and warns when this host met `--start-at` late.
pub(super) fn begin(
    at: Option<u64>,
    offset_ns: i64,
    clock: &RunClock,
    first_built: impl Fn() -> bool,
) -> Begun {
    let (t0_ns, common_start) = time_zero(at, offset_ns, clock, first_built);
    let started_unix_ns = match common_start {
        Some(s) => s.actual_unix_ns,
        None => wall_start::unix_ns_now() + t0_ns.saturating_sub(clock.now_ns()),
    };
    if let Some(late) = common_start.filter(|s| s.late_ns > 0) {
        eprintln!(
            "warning: this host was ready {:.1} ms after --start-at: its schedule runs that much \
             later than the other shards' (run.json records it as start.late_ms)",
            late.late_ns as f64 / 1e6
        );
    }
    Begun {
        t0_ns,
        common_start,
        started_unix_ms: started_unix_ns / 1_000_000,
        t0_monotonic_ns: crate::sys::clock::on_monotonic(clock, t0_ns),
    }
}

/// The run clock's time 0: at the shared instant `at` (or at once when it has passed, and how
/// late); else as soon as `first_built` says a request is ready to send (a millisecond on),
/// waiting at most [`START_LEAD_NS`] for it.
fn time_zero(
    at: Option<u64>,
    offset_ns: i64,
    clock: &RunClock,
    first_built: impl Fn() -> bool,
) -> (u64, Option<StartReport>) {
    let Some(at) = at else {
        let until = clock.now_ns() + START_LEAD_NS;
        while !first_built() && clock.now_ns() < until {
            std::thread::sleep(Duration::from_micros(200));
        }
        return (clock.now_ns() + LATE_START_NS, None);
    };
    let own_at = wall_start::on_this_host(at, offset_ns);
    let target = wall_start::run_ns_at(clock, own_at);
    let earliest = clock.now_ns() + LATE_START_NS;
    let t0 = if target >= i128::from(earliest) {
        target as u64
    } else {
        earliest
    };
    let late_ns = (i128::from(t0) - target).max(0) as u64;
    (
        t0,
        Some(StartReport {
            requested_unix_ns: at,
            actual_unix_ns: own_at + late_ns,
            late_ns,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn hosts_are_compared_with_each_other_not_with_the_server() {
        // Every host 3 s behind the server, agreeing within 2 ms: the server's clock is off.
        let note = compare_hosts(
            &[Some(3000 * MS), Some(3002 * MS), Some(2999 * MS)],
            1000.0,
            "X",
        )
        .unwrap()
        .unwrap();
        assert!(
            note.starts_with("the server's clock (X) is 3.0 s off every host's"),
            "{note}"
        );
        // Within the bound of each other and of the server: nothing to say.
        assert_eq!(
            compare_hosts(&[Some(0), Some(400 * MS), None], 1000.0, "X"),
            Ok(None)
        );
        assert_eq!(compare_hosts(&[None, None], 1000.0, "X"), Ok(None));
        // One host 3 s from the others: refused, naming it and by how much it reads late.
        let e = compare_hosts(&[Some(0), Some(-3000 * MS), Some(MS)], 1000.0, "X").unwrap_err();
        assert!(e.contains("shard 1/3 +3000.0 ms"), "{e}");
        assert!(
            !e.contains("shard 0/3") && e.contains("--max-clock-offset-ms 1000"),
            "{e}"
        );
    }

    #[test]
    fn offsets_read_as_behind_or_ahead() {
        assert_eq!(behind_or_ahead(400 * MS), "400.0 ms behind");
        assert_eq!(behind_or_ahead(-250 * MS), "250.0 ms ahead of");
    }
}
