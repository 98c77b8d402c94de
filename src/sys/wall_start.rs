//! `--start-at`: the schedule's time 0 at an agreed wall-clock instant, so that shards on many
//! hosts start together without talking to each other.
//!
//! The instant is read on this host's clock (CLOCK_REALTIME) and turned into a deadline on the
//! run clock, which the senders wait on. A shard ready only after the instant starts at once
//! and says by how much it is late: its whole schedule is that much later than the others'
//! (a late shard does not burst the requests it missed).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys::clock::RunClock;

/// At most this far ahead: a start days away is a typing mistake.
pub const MAX_AHEAD_S: u64 = 7 * 86_400;

/// Unix ns now, by this host's wall clock.
pub fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Now on the reference clock a shard checked its own against (`--ntp`, or its endpoint's
/// `Date`): this host's clock plus `offset_ns`, the reference minus this host's.
pub fn reference_now(offset_ns: i64) -> u64 {
    unix_ns_now().saturating_add_signed(offset_ns)
}

/// An instant on the reference clock as this host's clock reads it (`offset_ns` earlier).
pub fn on_this_host(reference_unix_ns: u64, offset_ns: i64) -> u64 {
    reference_unix_ns.saturating_add_signed(offset_ns.saturating_neg())
}

/// `--start-at`: Unix milliseconds (`1795392000000`), or RFC 3339
/// (`2026-11-24T10:00:00Z`, `2026-11-24T11:00:00.250+01:00`). Returns Unix ns.
pub fn parse(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = |why: &str| {
        format!(
            "--start-at {text:?}: {why}; give Unix milliseconds (e.g. 1795392000000) or RFC 3339 \
             (e.g. 2026-11-24T10:00:00Z)"
        )
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let ms: u64 = text.parse().map_err(|_| bad("too large"))?;
        if ms < 1_000_000_000_000 {
            return Err(bad(
                "a Unix time in milliseconds has 13 digits (this looks like seconds)",
            ));
        }
        return ms.checked_mul(1_000_000).ok_or_else(|| bad("too large"));
    }
    rfc3339(text).ok_or_else(|| bad("not a date and time"))
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as Unix ns.
fn rfc3339(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = t.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut frac_ns = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        let kept = &t[at + 1..at + 1 + digits.min(9)];
        frac_ns = kept.parse::<i64>().ok()? * 10i64.pow(9 - kept.len() as u32);
        at += 1 + digits;
    }
    let zone_s = match &t[at..] {
        "Z" | "z" => 0,
        z if z.len() == 6 && matches!(z.as_bytes()[0], b'+' | b'-') && z.as_bytes()[3] == b':' => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            sign * (num(at + 1, 2)? * 3600 + num(at + 4, 2)? * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - zone_s;
    u64::try_from(secs * 1_000_000_000 + frac_ns).ok()
}

/// Unix ns as RFC 3339 UTC with milliseconds (`2026-11-24T10:00:00.250Z`).
pub fn rfc3339_utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let stamp = utc_stamp(secs); // yyyymmdd-hhmmss
    format!(
        "{}-{}-{}T{}:{}:{}.{:03}Z",
        &stamp[0..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15],
        unix_ns % 1_000_000_000 / 1_000_000
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `yyyymmdd-hhmmss` of a Unix time (UTC), by the civil-from-days algorithm.
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The run clock's reading at Unix time `unix_ns` (may be in the past: negative offsets are
/// kept as i128), from the two clocks read back to back.
pub fn run_ns_at(clock: &RunClock, unix_ns: u64) -> i128 {
    i128::from(unix_ns) - crate::sys::clock::paired_offset(|| clock.now_ns(), unix_ns_now)
}

/// Sleeps until `unix_ns - lead` by this host's clock, waking early when `stop()` says so.
/// Returns false when stopped.
pub fn sleep_until(unix_ns: u64, lead: Duration, stop: impl Fn() -> bool) -> bool {
    let target = unix_ns.saturating_sub(lead.as_nanos() as u64);
    loop {
        if stop() {
            return false;
        }
        let now = unix_ns_now();
        if now >= target {
            return true;
        }
        std::thread::sleep(Duration::from_nanos(target - now).min(Duration::from_millis(50)));
    }
}

/// How a `--start-at` start went, for run.json and merge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StartReport {
    /// The agreed instant (Unix ns).
    pub requested_unix_ns: u64,
    /// This shard's time 0 by its own clock (Unix ns): the instant, or later when late.
    pub actual_unix_ns: u64,
    /// How much later than the instant it started (0 when on time).
    pub late_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400 + 3661), "20000229-010101");
        assert_eq!(utc_stamp(1_795_392_000), "20261123-000000");
    }

    #[test]
    fn start_instants_in_both_forms() {
        assert_eq!(parse("1795392000000"), Ok(1_795_392_000_000_000_000));
        assert_eq!(parse("2026-11-23T00:00:00Z"), Ok(1_795_392_000_000_000_000));
        assert_eq!(
            parse("2026-11-23T01:00:00.25+01:00"),
            Ok(1_795_392_000_250_000_000)
        );
        assert_eq!(
            parse("2026-11-22T19:30:00.000000001-04:30"),
            Ok(1_795_392_000_000_000_001)
        );
        assert_eq!(parse("2000-02-29T00:00:00Z"), Ok(951_782_400_000_000_000));
        for bad in [
            "",
            "1795392000",
            "2026-13-01T00:00:00Z",
            "2026-11-23T00:00:00",
            "2026-11-23 00:00Z",
            "tomorrow",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("--start-at"), "{bad}: {e}");
        }
        assert!(parse("1795392000").unwrap_err().contains("seconds"));
        let at = 1_795_392_000_250_000_000;
        assert_eq!(rfc3339_utc(at), "2026-11-23T00:00:00.250Z");
        assert_eq!(parse(&rfc3339_utc(at)), Ok(at));
    }

    #[test]
    fn the_run_clock_reading_of_a_wall_instant() {
        let clock = RunClock::new();
        let now_run = i128::from(clock.now_ns());
        let in_a_second = run_ns_at(&clock, unix_ns_now() + 1_000_000_000);
        // Read a moment apart: within a generous scheduling slice of one second ahead.
        assert!((in_a_second - now_run - 1_000_000_000).abs() < 900_000_000);
        assert!(run_ns_at(&clock, unix_ns_now() - 5_000_000_000) < now_run);
    }
}
