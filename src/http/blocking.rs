//! Blocking HTTP/1.1 GETs for the side channels: the start-up probes and the `/metrics`
//! scrapes. A [`KeptConnection`] is opened once and reused for every GET (keep-alive), so a
//! scraper whose connection was opened before the load keeps its place on a server whose
//! HTTP workers each hold one connection (llama.cpp's server, any thread-per-connection
//! front end). Failures are typed: a timeout, a refused connection, a closed one, TLS.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rustls::{ClientConnection, StreamOwned};

use super::response::{ResponseHead, ResponseParser, ResponseSink, Step};
use crate::transport::{tls, TlsTarget};

/// Why a GET got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    #[error("no answer within {:.1} s (timeout)", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("connection refused")]
    Refused,
    #[error("the server closed the connection without an answer")]
    Closed,
    #[error("TLS: {0}")]
    Tls(String),
    #[error("the response is larger than {} MiB", MAX_BODY >> 20)]
    TooLarge,
    #[error("{0}")]
    Other(String),
}

impl GetError {
    fn of_io(e: &io::Error, timeout: Duration) -> GetError {
        if let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return GetError::Tls(tls::describe(tls));
        }
        match e.kind() {
            // A read or write timeout on a blocking socket is EAGAIN ("os error 11").
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => GetError::Timeout(timeout),
            io::ErrorKind::ConnectionRefused => GetError::Refused,
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => GetError::Closed,
            _ => GetError::Other(e.to_string()),
        }
    }
}

/// The body a GET asks for.
#[derive(Clone, Copy)]
pub enum Accept {
    /// Model discovery.
    Json,
    /// A Prometheus exposition in the text format (not OpenMetrics, whose counter names differ).
    Text,
}

/// An exposition of a big server (histograms per model and engine) runs to a few MiB.
const MAX_BODY: usize = 16 << 20;

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One server's connection for GETs, opened on first use and kept while the server keeps it.
pub struct KeptConnection {
    addr: SocketAddr,
    tls: Option<TlsTarget>,
    timeout: Duration,
    stream: Option<Stream>,
    /// The last answer's `Date` header, Unix seconds.
    pub last_date_unix_s: Option<u64>,
}

impl KeptConnection {
    pub fn new(addr: SocketAddr, tls: Option<TlsTarget>, timeout: Duration) -> KeptConnection {
        KeptConnection {
            addr,
            tls,
            timeout,
            stream: None,
            last_date_unix_s: None,
        }
    }

    fn connect(&self) -> Result<Stream, GetError> {
        let of_io = |e: io::Error| GetError::of_io(&e, self.timeout);
        let tcp = connect_tcp(self.addr, self.timeout).map_err(of_io)?;
        Ok(match &self.tls {
            None => Stream::Plain(tcp),
            Some(tls) => Stream::Tls(Box::new(tls.blocking(tcp).map_err(of_io)?)),
        })
    }

    /// `GET path`; returns (status, body). A kept connection the server closed while idle is
    /// opened again once; any other failure drops it, to be opened again next time.
    pub fn get(
        &mut self,
        host: &str,
        path: &str,
        accept: Accept,
        extra_headers: &str,
    ) -> Result<(u16, Vec<u8>), GetError> {
        let accept = match accept {
            Accept::Json => "application/json",
            Accept::Text => "text/plain;version=0.0.4",
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\n{extra_headers}\r\n"
        );
        let reused = self.stream.is_some();
        match self.exchange(&request) {
            Err(GetError::Closed) if reused => self.exchange(&request),
            other => other,
        }
    }

    /// `POST path` with a JSON body; returns (status, body).
    pub fn post_json(
        &mut self,
        host: &str,
        path: &str,
        body: &[u8],
        extra_headers: &str,
    ) -> Result<(u16, Vec<u8>), GetError> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}\r\n{}",
            body.len(),
            String::from_utf8_lossy(body)
        );
        let reused = self.stream.is_some();
        match self.exchange(&request) {
            Err(GetError::Closed) if reused => self.exchange(&request),
            other => other,
        }
    }

    fn exchange(&mut self, request: &str) -> Result<(u16, Vec<u8>), GetError> {
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => self.connect()?,
        };
        let (head_keeps, date, answer) = exchange(&mut stream, request, self.timeout)?;
        self.last_date_unix_s = date;
        if head_keeps {
            self.stream = Some(stream);
        }
        Ok(answer)
    }
}

/// A blocking TCP connection whose connect, reads and writes each give up after `timeout`.
pub fn connect_tcp(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// An answer read whole: whether the connection may carry another, its `Date` (Unix s), and
/// its status and body.
type Answer = (bool, Option<u64>, (u16, Vec<u8>));

/// Writes the request and reads one whole response.
fn exchange(stream: &mut Stream, request: &str, timeout: Duration) -> Result<Answer, GetError> {
    let of_io = |e: io::Error| GetError::of_io(&e, timeout);
    stream.write_all(request.as_bytes()).map_err(of_io)?;
    stream.flush().map_err(of_io)?;
    #[derive(Default)]
    struct Collect {
        status: u16,
        keep_alive: bool,
        date: Option<u64>,
        body: Vec<u8>,
        too_large: bool,
    }
    impl ResponseSink for Collect {
        fn head(&mut self, head: &ResponseHead) {
            self.status = head.status;
            self.keep_alive = head.keep_alive;
            self.date = head.date_unix_s;
        }
        fn body(&mut self, data: &[u8]) {
            match self.body.len() + data.len() <= MAX_BODY {
                true => self.body.extend_from_slice(data),
                false => self.too_large = true,
            }
        }
    }
    let mut parser = ResponseParser::default();
    let mut sink = Collect::default();
    let mut buf = [0u8; 16 << 10];
    let mut got_any = false;
    let keeps = loop {
        let n = stream.read(&mut buf).map_err(of_io)?;
        if n == 0 {
            if !got_any {
                return Err(GetError::Closed);
            }
            parser
                .finish_at_eof()
                .map_err(|e| GetError::Other(e.to_string()))?;
            break false;
        }
        got_any = true;
        if let Step::Done { consumed } = parser
            .feed(&buf[..n], &mut sink)
            .map_err(|e| GetError::Other(e.to_string()))?
        {
            // Bytes past the answer were never asked for: the connection is not trusted.
            break sink.keep_alive && consumed == n;
        }
    };
    if sink.too_large {
        // A cut body would read as a shorter answer than the server gave.
        return Err(GetError::TooLarge);
    }
    Ok((keeps, sink.date, (sink.status, sink.body)))
}
