//! The HTTP `Date` header (RFC 9110 §5.6.7, IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`) and a
//! clock check against it: how far this host's clock is from the target server's, with no NTP
//! server to ask.
//!
//! A `Date` has whole seconds, so one answer bounds the offset only within a second. The check
//! asks again and again, a few milliseconds apart, until the server's second turns over: the
//! server's clock read `s + 1.000` somewhere between the send of the last answer that said `s`
//! and the receipt of the first that said `s + 1`. The middle of that window is the estimate,
//! half its width the uncertainty (a few ms on a LAN).

use std::net::SocketAddr;
use std::time::Duration;

use super::blocking::{Accept, KeptConnection};
use crate::ntp::ClockCheck;
use crate::sys::wall_start::{days_from_civil, unix_ns_now};
use crate::transport::TlsTarget;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// An IMF-fixdate as Unix seconds; None for any other form (the obsolete RFC 850 and asctime
/// forms are not sent by the servers this checks).
pub fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() != 29 || &t[3..5] != ", " || &t[25..] != " GMT" {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = t.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let day = num(5, 2)?;
    let month = MONTHS.iter().position(|m| *m == &t[8..11])? as i64 + 1;
    let year = num(12, 4)?;
    if b[11] != b' ' || b[16] != b' ' || b[19] != b':' || b[22] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(17, 2)?, num(20, 2)?, num(23, 2)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()
}

/// Unix ns as an IMF-fixdate (the second it falls in).
pub fn format(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let stamp = crate::sys::wall_start::utc_stamp(secs); // yyyymmdd-hhmmss
    let month: usize = stamp[4..6].parse().unwrap_or(1);
    format!(
        "{}, {} {} {} {}:{}:{} GMT",
        WEEKDAYS[(secs / 86_400 % 7) as usize],
        &stamp[6..8],
        MONTHS[month - 1],
        &stamp[0..4],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15]
    )
}

/// Longest the check asks for: a little over one turn of the server's second.
const CHECK_SPAN: Duration = Duration::from_millis(1_600);
/// Pause between two questions.
const PAUSE: Duration = Duration::from_millis(4);

/// Why the clock could not be checked against the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateCheckError {
    #[error("GET {path}: {0}", path = "/health")]
    Get(String),
    #[error("the server's answers carry no Date header")]
    NoDate,
    #[error("the server's Date did not turn over a second within {} ms", CHECK_SPAN.as_millis())]
    NoTurn,
}

/// This host's clock against the server's `Date`: `GET /health` over one kept connection,
/// every few ms, until the server's second turns over.
pub fn check(
    addr: SocketAddr,
    tls: Option<TlsTarget>,
    host: &str,
    url: &str,
) -> Result<ClockCheck, DateCheckError> {
    let mut conn = KeptConnection::new(addr, tls, Duration::from_secs(5));
    let mut ask = || -> Result<(u64, u64, u64), DateCheckError> {
        let sent = unix_ns_now();
        conn.get(host, "/health", Accept::Json, "")
            .map_err(|e| DateCheckError::Get(e.to_string()))?;
        let got = unix_ns_now();
        let date = conn.last_date_unix_s.ok_or(DateCheckError::NoDate)?;
        Ok((sent, got, date))
    };
    let first = ask()?;
    let until = first.1 + CHECK_SPAN.as_nanos() as u64;
    let (mut before, mut asked) = (first, 1);
    loop {
        std::thread::sleep(PAUSE);
        let now = ask()?;
        asked += 1;
        if now.2 > before.2 {
            // The server read `now.2` s exactly between `before`'s send and `now`'s receipt.
            let (from, to) = (before.0, now.1);
            let mid = from / 2 + to / 2;
            return Ok(ClockCheck {
                server: format!("{url} (Date header)"),
                method: "http-date",
                offset_ns: (i128::from(now.2) * 1_000_000_000 - i128::from(mid)) as i64,
                uncertainty_ns: (to - from) / 2,
                answered: asked,
            });
        }
        if now.1 > until {
            return Err(DateCheckError::NoTurn);
        }
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imf_fixdates_both_ways() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(
            format(784_111_777_250_000_000),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        let now = unix_ns_now();
        assert_eq!(parse(&format(now)), Some(now / 1_000_000_000));
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
