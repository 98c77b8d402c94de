//! Blocking start-up checks (before the run's clock starts): can an endpoint be reached (and
//! does its certificate verify), and which model does it serve.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::response::{ResponseHead, ResponseParser, ResponseSink, Step};
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
    let tcp = connect(addr, timeout).map_err(ProbeError::Connect)?;
    if let Some(tls) = tls {
        let mut stream = tls
            .blocking(tcp)
            .map_err(|e| ProbeError::Tls(tls::describe_io(&e)))?;
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| ProbeError::Tls(tls::describe_io(&e)))?;
        }
    }
    Ok(())
}

fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    let tcp = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    Ok(tcp)
}

/// The body a GET asks for.
#[derive(Clone, Copy)]
pub enum Accept {
    /// Model discovery.
    Json,
    /// A Prometheus exposition in the text format (not OpenMetrics, whose counter names differ).
    Text,
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
    let accept = match accept {
        Accept::Json => "application/json",
        Accept::Text => "text/plain;version=0.0.4",
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\n{extra_headers}Connection: close\r\n\r\n");
    let tcp = connect(addr, timeout)?;
    match tls {
        None => exchange(tcp, &request),
        Some(tls) => {
            let stream = tls.blocking(tcp).map_err(|e| tls::describe_io(&e))?;
            exchange(stream, &request)
        }
    }
}

fn exchange(mut stream: impl Read + Write, request: &str) -> Result<(u16, Vec<u8>), String> {
    stream
        .write_all(request.as_bytes())
        .map_err(|e| tls::describe_io(&e))?;
    /// An exposition of a big server (histograms per model and engine) runs to a few MiB.
    const MAX_BODY: usize = 16 << 20;
    #[derive(Default)]
    struct Collect(u16, Vec<u8>, bool);
    impl ResponseSink for Collect {
        fn head(&mut self, head: &ResponseHead) {
            self.0 = head.status;
        }
        fn body(&mut self, data: &[u8]) {
            match self.1.len() + data.len() <= MAX_BODY {
                true => self.1.extend_from_slice(data),
                false => self.2 = true,
            }
        }
    }
    let mut parser = ResponseParser::default();
    let mut sink = Collect::default();
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = stream.read(&mut buf).map_err(|e| tls::describe_io(&e))?;
        if n == 0 {
            parser.finish_at_eof().map_err(|e| e.to_string())?;
            break;
        }
        if let Step::Done { .. } = parser
            .feed(&buf[..n], &mut sink)
            .map_err(|e| e.to_string())?
        {
            break;
        }
    }
    if sink.2 {
        // A cut body would read as a shorter answer than the server gave.
        return Err(format!(
            "the response is larger than {} MiB",
            MAX_BODY >> 20
        ));
    }
    Ok((sink.0, sink.1))
}
