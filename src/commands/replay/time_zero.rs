//! The run's time 0: a lead after the connections are open, or the `--start-at` instant that
//! the shards of one run share (with `--ntp`, the clock checked first).

use std::time::Duration;

use super::setup::Say;
use crate::error::{Error, Result};
use crate::plan::ReplayPlan;
use crate::sys::clock::RunClock;
use crate::sys::wall_start::StartReport;

/// Longest wait, once the senders' connections are open, for the producers' first request:
/// the clock starts as soon as one is built (producers have been filling the channel since
/// before the connections), at the latest after this.
pub(super) const START_LEAD_NS: u64 = 500_000_000;
/// `--start-at`: the senders open their connections this long before the instant (servers
/// close idle keep-alive connections after a few seconds: vLLM's uvicorn after 5).
pub(super) const START_AT_LEAD: Duration = Duration::from_secs(2);
/// A shard ready after its `--start-at` instant starts this soon.
pub(super) const LATE_START_NS: u64 = 1_000_000;

/// `--ntp`: this host's clock against the server's, before the start (an error when the
/// server does not answer: the user asked for a checked clock).
pub(super) fn check_clock(plan: &ReplayPlan, say: &Say) -> Result<Option<crate::ntp::ClockCheck>> {
    let Some(server) = &plan.hosts.ntp else {
        return Ok(None);
    };
    let check = crate::ntp::check(server).map_err(Error::Run)?;
    let offset_ms = check.offset_ns as f64 / 1e6;
    say.say(format!(
        "clock: {offset_ms:+.3} ms from {server} (+-{:.3} ms)",
        check.uncertainty_ns as f64 / 1e6
    ));
    if offset_ms.abs() > 5.0 {
        eprintln!(
            "warning: this host's clock is {offset_ms:+.1} ms off {server}: with --start-at its \
             shard starts that far from the others (merge corrects the skew it reports, not the \
             load); steer the clock with chrony or ntpd"
        );
    }
    Ok(Some(check))
}

/// The run clock's time 0: with `--start-at`, the agreed instant (or at once when it has
/// passed, and how late); else as soon as `first_built` says a request is ready to send (a
/// millisecond on), waiting at most [`START_LEAD_NS`] for it.
pub(super) fn time_zero(
    plan: &ReplayPlan,
    clock: &RunClock,
    first_built: impl Fn() -> bool,
) -> (u64, Option<StartReport>) {
    let Some(at) = plan.hosts.start_at_unix_ns else {
        let until = clock.now_ns() + START_LEAD_NS;
        while !first_built() && clock.now_ns() < until {
            std::thread::sleep(Duration::from_micros(200));
        }
        return (clock.now_ns() + LATE_START_NS, None);
    };
    let target = crate::sys::wall_start::run_ns_at(clock, at);
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
