//! Blocking start-up checks (before the run's clock starts): can an endpoint be reached,
//! and which model does it serve.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use super::response::{ResponseHead, ResponseParser, ResponseSink, Step};

/// Connects once, to tell a reachable endpoint from a dead one.
pub fn reachable(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    TcpStream::connect_timeout(&addr, timeout)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `GET path` over a fresh connection; returns (status, body).
pub fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    extra_headers: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n{extra_headers}Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
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
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
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

/// The first model id of an OpenAI-style `GET /v1/models` answer.
pub fn first_model(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("data")?
        .as_array()?
        .first()?
        .get("id")?
        .as_str()
        .map(str::to_string)
}
