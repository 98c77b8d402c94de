//! A clock check against the target server's `Date` header: how far this host's clock is from
//! the server's, with no NTP server to ask.
//!
//! A `Date` has whole seconds, so one answer bounds the offset only within a second: asked
//! between `sent` and `got` (this host's clock), an answer saying `D` means the server's clock
//! read between `D` and `D + 1` at some instant of that span, so the offset (server minus
//! host) lies in `[D - got, D + 1 - sent]`. Each next question is timed to reach the server
//! just when its second turns over if the offset is the middle of the window so far: either
//! answer halves the window. A dozen questions narrow one second to a few milliseconds plus
//! the round trip (the old way asked every 4 ms for a second and a half: 115 to 211 GETs).

use std::net::SocketAddr;
use std::time::Duration;

use super::blocking::{Accept, KeptConnection};
use crate::ntp::ClockCheck;
use crate::sys::wall_start::unix_ns_now;
use crate::transport::TlsTarget;

/// At most this many questions.
const MAX_ASKS: usize = 12;
/// Stop once the window is this narrow beyond the round trip (which no question narrows).
const ENOUGH_NS: i128 = 2_000_000;
const SECOND: i128 = 1_000_000_000;

/// Why the clock could not be checked against the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateCheckError {
    #[error("GET {path}: {0}", path = "/health")]
    Get(String),
    #[error("the server's answers carry no Date header")]
    NoDate,
    #[error("the server's Date headers contradict each other (its clock stepped)")]
    Inconsistent,
}

/// One answer: this host's clock when asked and when answered (ns), and the server's `Date`
/// (whole seconds).
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub sent: u64,
    pub got: u64,
    pub date_s: u64,
}

/// The window the offset (server minus host, ns) lies in, narrowed answer by answer: the
/// sans-I/O core of the check.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    lo: i128,
    hi: i128,
    /// The last question's round trip.
    rtt: i128,
    asked: usize,
}

impl Window {
    pub fn new(first: Answer) -> Result<Window, DateCheckError> {
        let mut w = Window {
            lo: i128::MIN,
            hi: i128::MAX,
            rtt: 0,
            asked: 0,
        };
        w.add(first)?;
        Ok(w)
    }

    pub fn add(&mut self, a: Answer) -> Result<(), DateCheckError> {
        let d = i128::from(a.date_s) * SECOND;
        self.lo = self.lo.max(d - i128::from(a.got));
        self.hi = self.hi.min(d + SECOND - i128::from(a.sent));
        self.rtt = i128::from(a.got.saturating_sub(a.sent));
        self.asked += 1;
        match self.lo <= self.hi {
            true => Ok(()),
            false => Err(DateCheckError::Inconsistent),
        }
    }

    /// Whether asking again would be worth it.
    pub fn done(&self) -> bool {
        self.asked >= MAX_ASKS || self.hi - self.lo <= ENOUGH_NS + self.rtt
    }

    /// When (this host's clock, ns) to send the next question, given the time now: so that
    /// it reaches the server as its second turns over, if the offset is the window's middle.
    pub fn next_send(&self, now: u64) -> u64 {
        let mid = (self.lo + self.hi) / 2;
        let arrive_after = i128::from(now) + self.rtt;
        // The server's next turn (its clock) after the question could arrive, on this host's.
        let turn = (arrive_after + mid).div_euclid(SECOND) * SECOND + SECOND - mid;
        (turn - self.rtt / 2).max(i128::from(now)) as u64
    }

    pub fn check(&self, server: String) -> ClockCheck {
        ClockCheck {
            server,
            method: "http-date",
            offset_ns: ((self.lo + self.hi) / 2) as i64,
            uncertainty_ns: ((self.hi - self.lo) / 2) as u64,
            answered: self.asked,
        }
    }
}

/// This host's clock against the server's `Date`: a dozen `GET /health` at most, over one
/// kept connection, each timed to halve what is known of the offset.
pub fn check(
    addr: SocketAddr,
    tls: Option<TlsTarget>,
    host: &str,
    url: &str,
) -> Result<ClockCheck, DateCheckError> {
    let mut conn = KeptConnection::new(addr, tls, Duration::from_secs(5));
    let mut ask = || -> Result<Answer, DateCheckError> {
        let sent = unix_ns_now();
        conn.get(host, "/health", Accept::Json, "")
            .map_err(|e| DateCheckError::Get(e.to_string()))?;
        let got = unix_ns_now();
        let date_s = conn.last_date_unix_s.ok_or(DateCheckError::NoDate)?;
        Ok(Answer { sent, got, date_s })
    };
    let mut window = Window::new(ask()?)?;
    while !window.done() {
        let at = window.next_send(unix_ns_now());
        let wait = at.saturating_sub(unix_ns_now());
        std::thread::sleep(Duration::from_nanos(wait));
        window.add(ask()?)?;
    }
    Ok(window.check(format!("{url} (Date header)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated server `offset_ns` ahead of the host, answering after `rtt_ns / 2`, asked
    /// from host time `start`: the check narrows to within its own uncertainty of the truth.
    fn simulate(offset_ns: i64, rtt_ns: u64, start: u64) -> ClockCheck {
        let ask = |sent: u64| {
            let at_server = (sent + rtt_ns / 2) as i64 + offset_ns;
            Answer {
                sent,
                got: sent + rtt_ns,
                date_s: (at_server / 1_000_000_000) as u64,
            }
        };
        let mut now = start;
        let mut w = Window::new(ask(now)).unwrap();
        now += rtt_ns;
        while !w.done() {
            now = w.next_send(now);
            w.add(ask(now)).unwrap();
            now += rtt_ns;
        }
        w.check("sim".into())
    }

    #[test]
    fn a_dozen_questions_find_the_offset_within_a_few_ms_plus_the_round_trip() {
        let starts = [1_795_392_000_000_000_000u64, 1_795_392_000_123_456_789];
        for offset in [
            0i64,
            400_000_000,
            -400_000_000,
            3_000_000_000,
            999_999_999,
            -7,
        ] {
            for rtt in [100_000u64, 2_000_000, 30_000_000] {
                for start in starts
                    .iter()
                    .map(|s| s + (offset.unsigned_abs() % 7) * 1_000)
                {
                    let c = simulate(offset, rtt, start);
                    let err = (c.offset_ns - offset).unsigned_abs();
                    assert!(err <= c.uncertainty_ns, "{offset} {rtt}: {c:?}");
                    assert!(c.answered <= MAX_ASKS, "{c:?}");
                    assert!(c.uncertainty_ns <= 2_000_000 + rtt, "{offset} {rtt}: {c:?}");
                }
            }
        }
    }

    #[test]
    fn contradicting_dates_are_an_error() {
        let mut w = Window::new(Answer {
            sent: 5_000_000_000,
            got: 5_001_000_000,
            date_s: 10,
        })
        .unwrap();
        let e = w.add(Answer {
            sent: 5_002_000_000,
            got: 5_003_000_000,
            date_s: 20,
        });
        assert_eq!(e, Err(DateCheckError::Inconsistent));
    }
}
