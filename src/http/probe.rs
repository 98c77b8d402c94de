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

/// `GET path` over a fresh connection (TLS for https); returns (status, body).
pub fn get(
    addr: SocketAddr,
    tls: Option<&TlsTarget>,
    host: &str,
    path: &str,
    extra_headers: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let tcp = connect(addr, timeout)?;
    match tls {
        None => exchange(tcp, host, path, extra_headers),
        Some(tls) => {
            let stream = tls.blocking(tcp).map_err(|e| tls::describe_io(&e))?;
            exchange(stream, host, path, extra_headers)
        }
    }
}

fn exchange(
    mut stream: impl Read + Write,
    host: &str,
    path: &str,
    extra_headers: &str,
) -> Result<(u16, Vec<u8>), String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n{extra_headers}Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| tls::describe_io(&e))?;
    #[derive(Default)]
    struct Collect(u16, Vec<u8>);
    impl ResponseSink for Collect {
        fn head(&mut self, head: &ResponseHead) {
            self.0 = head.status;
        }
        fn body(&mut self, data: &[u8]) {
            if self.1.len() < 1 << 20 {
                self.1.extend_from_slice(data);
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
    Ok((sink.0, sink.1))
}
