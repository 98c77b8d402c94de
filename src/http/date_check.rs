//! A clock check against the target server's `Date` header: how far this host's clock is from
//! the server's, with no NTP server to ask.
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
use crate::sys::wall_start::unix_ns_now;
use crate::transport::TlsTarget;

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
