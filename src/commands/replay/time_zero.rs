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
pub(super) const START_AT_LEAD: Duration = Duration::from_secs(2);
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
            let at = rv
                .wait_ready(&run, r.ready_timeout, || {
                    crate::sys::stop::signals_received() > 0
                })
                .map_err(Error::Run)?;
            say.say(format!("all {count} shards ready"));
            Some(at)
        }
        _ => None,
    };
    if let Some(at) = at {
        let late_s = wall_start::unix_ns_now().saturating_sub(at) / 1_000_000_000;
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
/// `Date` header; refused beyond `--max-clock-offset-ms`. None when not checked (one host,
/// or a server that sends no `Date`: said).
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
    let offset_ms = check.offset_ns as f64 / 1e6;
    say.say(format!(
        "clock: {offset_ms:+.3} ms from {} (+-{:.3} ms)",
        check.server,
        check.uncertainty_ns as f64 / 1e6
    ));
    let bound = plan.hosts.max_clock_offset_ms;
    if offset_ms.abs() - check.uncertainty_ns as f64 / 1e6 > bound {
        return Err(Error::Run(format!(
            "this host's clock is {offset_ms:+.1} ms off {} (more than --max-clock-offset-ms \
             {bound}): its shard would start that far from the others; steer the clock with \
             chrony or ntpd",
            check.server
        )));
    }
    if offset_ms.abs() > 5.0 {
        eprintln!(
            "warning: this host's clock is {offset_ms:+.1} ms off {}: its shard starts that \
             far from the others (merge shows the skew, and its verdict flags it over \
             shard-skew-ms); steer the clock with chrony or ntpd",
            check.server
        );
    }
    Ok(Some(check))
}

/// The run clock's time 0: at the shared instant `at` (or at once when it has passed, and how
/// late); else as soon as `first_built` says a request is ready to send (a millisecond on),
/// waiting at most [`START_LEAD_NS`] for it.
pub(super) fn time_zero(
    at: Option<u64>,
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
    let target = wall_start::run_ns_at(clock, at);
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
            actual_unix_ns: at + late_ns,
            late_ns,
        }),
    )
}
