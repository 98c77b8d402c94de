//! Blocking start-up checks (before the run's clock starts): can an endpoint be reached (and
//! does its certificate verify), and which model does it serve.

use std::net::SocketAddr;
use std::time::Duration;

pub use super::blocking::Accept;
use super::blocking::{connect_tcp, KeptConnection};
use crate::transport::{tls, TlsTarget};

/// Why an endpoint failed its probe.
#[derive(Debug)]
pub enum ProbeError {
    /// No TCP connection (the server may still come up).
    Connect(String),
    /// The TLS handshake failed: a certificate problem will not go away by itself.
    Tls(String),
}

/// Connects once (and completes the TLS handshake for https), to tell a reachable endpoint
/// from a dead one before anything is scheduled.
pub fn reachable(
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let tcp = connect_tcp(addr, timeout).map_err(|e| ProbeError::Connect(e.to_string()))?;
    if let Some(tls) = tls {
        let mut stream = tls
            .blocking(tcp)
            .map_err(|e| ProbeError::Tls(tls::describe_io(&e)))?;
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).map_err(|e| {
                ProbeError::Tls(match e.kind() {
                    // A read timeout on a blocking socket is EAGAIN ("os error 11").
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                        "no answer to the TLS handshake within {:.0} s: the server took the \
                         connection and said nothing (a plain-HTTP server waits for a request: \
                         if it is one, use http://)",
                        timeout.as_secs_f64()
                    ),
                    _ => tls::describe_io(&e),
                })
            })?;
        }
    }
    Ok(())
}

/// Whether the server at `addr` answers a TLS ClientHello as a TLS server does (a handshake
/// or a TLS alert): asked of an `http://` endpoint that closed every connection without a
/// byte of answer, as an OpenSSL or rustls server does with a plain-HTTP request. A plain-HTTP
/// server answers the hello with an HTTP error or a close: false.
pub fn answers_tls(addr: SocketAddr, host: &str, timeout: Duration) -> bool {
    let insecure = tls::TlsOptions {
        insecure: true,
        ..Default::default()
    };
    let target = match tls::ClientTls::new(&insecure).and_then(|c| c.target(host)) {
        Ok(t) => t,
        Err(_) => return false,
    };
    let Ok(tcp) = connect_tcp(addr, timeout) else {
        return false;
    };
    let Ok(mut stream) = target.blocking(tcp) else {
        return false;
    };
    while stream.conn.is_handshaking() {
        if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
            return e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .is_some_and(|e| matches!(e, rustls::Error::AlertReceived(_)));
        }
    }
    true
}

/// `GET /health` over a fresh connection, each step within `timeout`: the sender's liveness
/// probe of an endpoint that left requests silent.
pub fn get_health(
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    host: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), super::blocking::GetError> {
    KeptConnection::new(addr, tls.cloned(), timeout).get(host, "/health", Accept::Json, "")
}

/// `GET path` over a fresh connection (TLS for https); returns (status, body).
pub fn get(
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    host: &str,
    path: &str,
    accept: Accept,
    extra_headers: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    KeptConnection::new(addr, tls.cloned(), timeout)
        .get(host, path, accept, extra_headers)
        .map_err(|e| e.to_string())
}
