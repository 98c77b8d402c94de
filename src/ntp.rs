//! `--ntp HOST`: how far this host's clock is from an NTP server's, by SNTP (RFC 4330).
//!
//! Shards start at one instant on the reference clock: each measures its own clock's offset
//! from it (a few exchanges, the one with the least round-trip delay kept: its offset is the
//! least disturbed, and half its delay bounds the error) and starts when its clock reads the
//! instant minus the offset. The host's clock itself is chrony's to steer: nothing is set.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use serde_json::{json, Value};

use crate::sys::wall_start::unix_ns_now;

/// Seconds from the NTP era (1900) to the Unix epoch.
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;
/// Exchanges per check; the least-delay one is kept.
pub const SAMPLES: usize = 5;
/// How long one exchange may take.
const REPLY_TIMEOUT: Duration = Duration::from_millis(800);

/// One clock check: the server's clock minus ours, and how sure that is.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockCheck {
    pub server: String,
    /// `sntp` (`--ntp`) or `http-date` (the target's `Date` header).
    pub method: &'static str,
    /// Positive: our clock is behind the server's.
    pub offset_ns: i64,
    /// Half the least round-trip delay: the offset is right within this.
    pub uncertainty_ns: u64,
    /// Exchanges answered, of [`SAMPLES`].
    pub answered: usize,
}

impl ClockCheck {
    pub fn to_json(&self) -> Value {
        json!({
            "server": self.server,
            "method": self.method,
            "offset_ms": self.offset_ns as f64 / 1e6,
            "uncertainty_ms": self.uncertainty_ns as f64 / 1e6,
            "samples": self.answered,
        })
    }
}

/// Unix ns as a 64-bit NTP timestamp (32.32 fixed point since 1900).
fn to_ntp(unix_ns: u64) -> u64 {
    let secs = unix_ns / 1_000_000_000 + NTP_UNIX_OFFSET_S;
    let frac = ((unix_ns % 1_000_000_000) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// A 64-bit NTP timestamp as Unix ns.
pub fn from_ntp(ntp: u64) -> u64 {
    let secs = (ntp >> 32).saturating_sub(NTP_UNIX_OFFSET_S);
    let frac = ((ntp & 0xffff_ffff) * 1_000_000_000) >> 32;
    secs * 1_000_000_000 + frac
}

/// `HOST` or `HOST:PORT` (port 123 by default), resolved.
fn resolve(server: &str) -> Result<SocketAddr, String> {
    let with_port = match server.parse::<SocketAddr>() {
        Ok(addr) => return Ok(addr),
        Err(_)
            if server.contains(':')
                && !server.starts_with('[')
                && server.matches(':').count() == 1 =>
        {
            server.to_string()
        }
        Err(_) if server.starts_with('[') && server.contains("]:") => server.to_string(),
        Err(_) => format!(
            "{}:123",
            server.trim_start_matches('[').trim_end_matches(']')
        ),
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("--ntp {server}: cannot resolve: {e}"))?
        .next()
        .ok_or_else(|| format!("--ntp {server}: no address"))
}

/// One exchange: (offset ns, round-trip delay ns).
fn exchange(socket: &UdpSocket, addr: SocketAddr) -> Result<(i64, u64), String> {
    let mut request = [0u8; 48];
    request[0] = 0x23; // LI 0, version 4, mode 3 (client)
    let t1 = unix_ns_now();
    let t1_ntp = to_ntp(t1);
    request[40..48].copy_from_slice(&t1_ntp.to_be_bytes());
    socket
        .send_to(&request, addr)
        .map_err(|e| format!("send: {e}"))?;
    let mut reply = [0u8; 68];
    loop {
        let (n, from) = socket
            .recv_from(&mut reply)
            .map_err(|e| format!("no answer within {} ms ({e})", REPLY_TIMEOUT.as_millis()))?;
        let t4 = unix_ns_now();
        // A late answer to an earlier exchange carries another originate time: skipped.
        let word = |at: usize| u64::from_be_bytes(reply[at..at + 8].try_into().expect("8 bytes"));
        if from != addr || n < 48 || word(24) != t1_ntp {
            continue;
        }
        let mode = reply[0] & 0x7;
        let stratum = reply[1];
        if mode != 4 && mode != 5 {
            return Err(format!("not a server's answer (mode {mode})"));
        }
        if stratum == 0 {
            let code = String::from_utf8_lossy(&reply[12..16]).into_owned();
            return Err(format!("the server refused (kiss code {code:?})"));
        }
        let (t2, t3) = (from_ntp(word(32)) as i128, from_ntp(word(40)) as i128);
        let (t1, t4) = (t1 as i128, t4 as i128);
        let offset = ((t2 - t1) + (t3 - t4)) / 2;
        let delay = ((t4 - t1) - (t3 - t2)).max(0);
        return Ok((offset as i64, delay as u64));
    }
}

/// Measures this host's clock against `server`: [`SAMPLES`] exchanges, the least-delay one
/// kept. An error when none is answered.
pub fn check(server: &str) -> Result<ClockCheck, String> {
    let addr = resolve(server)?;
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("address")
    } else {
        "0.0.0.0:0".parse().expect("address")
    };
    let socket = UdpSocket::bind(bind).map_err(|e| format!("--ntp {server}: {e}"))?;
    socket
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| format!("--ntp {server}: {e}"))?;
    let mut best: Option<(i64, u64)> = None;
    let mut answered = 0;
    let mut last_error = String::new();
    for _ in 0..SAMPLES {
        match exchange(&socket, addr) {
            Ok((offset, delay)) => {
                answered += 1;
                if best.is_none_or(|(_, d)| delay < d) {
                    best = Some((offset, delay));
                }
            }
            Err(e) => last_error = e,
        }
    }
    let (offset_ns, delay) =
        best.ok_or_else(|| format!("--ntp {server} ({addr}): {last_error}"))?;
    Ok(ClockCheck {
        server: server.to_string(),
        method: "sntp",
        offset_ns,
        uncertainty_ns: delay / 2,
        answered,
    })
}

/// A minimal SNTP server whose clock is ours plus `offset_ns`, for tests (and for trying
/// `--ntp` without one): answers every request until the process ends.
pub fn serve_offset(socket: UdpSocket, offset_ns: i64) {
    let mut buf = [0u8; 68];
    while let Ok((n, from)) = socket.recv_from(&mut buf) {
        if n < 48 {
            continue;
        }
        let now = to_ntp((unix_ns_now() as i64 + offset_ns) as u64);
        let mut reply = [0u8; 48];
        reply[0] = 0x24; // version 4, mode 4 (server)
        reply[1] = 1; // stratum 1
        reply[24..32].copy_from_slice(&buf[40..48]); // originate = the client's transmit
        reply[32..40].copy_from_slice(&now.to_be_bytes());
        reply[40..48].copy_from_slice(&now.to_be_bytes());
        let _ = socket.send_to(&reply, from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntp_timestamps_round_trip() {
        let t = 1_795_392_000_123_456_789u64;
        let back = from_ntp(to_ntp(t));
        assert!(back.abs_diff(t) <= 1, "{back} vs {t}");
        assert_eq!(to_ntp(0) >> 32, NTP_UNIX_OFFSET_S);
    }

    #[test]
    fn a_server_ahead_by_250_ms_is_measured_so() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        std::thread::spawn(move || serve_offset(socket, 250_000_000));
        let c = check(&addr.to_string()).unwrap();
        assert!(
            (c.offset_ns - 250_000_000).abs() <= 2_000_000 + c.uncertainty_ns as i64,
            "{c:?}"
        );
        assert_eq!(c.answered, SAMPLES);
        // Nobody answering: an error naming the server.
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = check(&silent.local_addr().unwrap().to_string()).unwrap_err();
        assert!(e.contains("no answer"), "{e}");
    }
}
