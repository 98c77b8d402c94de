//! The byte stream under HTTP: plain TCP, or TLS (rustls) over the same non-blocking mio
//! socket. The sender, the mock and the start-up probes read and write through [`Stream`]
//! and never learn which one is underneath.
//!
//! The TLS side is driven as rustls' own mio examples drive it: ciphertext moves between the
//! socket and the connection with `read_tls` / `write_tls`, plaintext with `reader` /
//! `writer`, and `process_new_packets` runs after every read. Sockets are registered for
//! both READABLE and WRITABLE edges, so whatever rustls still holds to send is written on
//! the next writable edge ([`Stream::flush`]).

pub mod tls;

use std::io::{self, IoSlice, Read, Write};

use mio::net::TcpStream;

pub use tls::{ClientTls, TlsOptions, TlsTarget};

/// A connection's byte stream.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

pub struct TlsStream {
    tcp: TcpStream,
    tls: rustls::Connection,
}

impl Stream {
    /// `tcp` with a TLS session on top (client or server side).
    pub fn tls(tcp: TcpStream, tls: impl Into<rustls::Connection>) -> Stream {
        let mut tls = tls.into();
        tls.set_buffer_limit(Some(TLS_SEND_BUFFER));
        Stream::Tls(Box::new(TlsStream { tcp, tls }))
    }

    /// The socket, for registration and socket options.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    pub fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.tcp,
        }
    }

    /// Whether a read shorter than the buffer means the socket was drained (its next data
    /// raises a new edge). True for plain TCP; TLS may hold decrypted bytes back.
    pub fn short_read_drains(&self) -> bool {
        matches!(self, Stream::Plain(_))
    }

    /// Advances a TLS handshake as far as the socket allows: true once it is complete (at
    /// once for plain TCP). A failed handshake is an `InvalidData` error whose message says
    /// why (an unknown issuer, a name mismatch, an expired certificate...).
    pub fn handshake(&mut self) -> io::Result<bool> {
        let Stream::Tls(t) = self else {
            return Ok(true);
        };
        loop {
            t.write_pending()?;
            if !t.tls.is_handshaking() {
                return Ok(true);
            }
            if !t.tls.wants_read() {
                return Ok(false); // waiting for the socket to take what we have to send
            }
            match t.tls.read_tls(&mut t.tcp) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed during the TLS handshake",
                    ))
                }
                Ok(_) => t.process()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// For a TLS stream whose handshake is complete: whether it resumed an earlier session
    /// (a reconnect that skipped the full handshake). `None` for plain TCP or mid-handshake.
    pub fn resumed(&self) -> Option<bool> {
        match self {
            Stream::Tls(t) if !t.tls.is_handshaking() => Some(matches!(
                t.tls.handshake_kind(),
                Some(rustls::HandshakeKind::Resumed)
            )),
            _ => None,
        }
    }

    /// Sends what TLS still holds (nothing to do for plain TCP).
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.write_pending(),
        }
    }

    /// Reads plaintext. `Ok(0)` is the end of the stream (a TCP close with or without TLS's
    /// close_notify: HTTP's own framing says whether the response was complete).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }

    /// Writes plaintext; `WouldBlock` when neither the socket nor TLS's buffer takes more.
    pub fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(parts),
            Stream::Tls(t) => t.write_vectored(parts),
        }
    }

    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }
}

/// Bytes of ciphertext rustls may hold unsent before its writer pushes back: what keeps a
/// large prompt from being encrypted far ahead of the socket.
const TLS_SEND_BUFFER: usize = 256 << 10;

impl TlsStream {
    fn process(&mut self) -> io::Result<()> {
        self.tls
            .process_new_packets()
            .map(drop)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, tls::describe(&e)))
    }

    /// Writes ciphertext until rustls has none left or the socket is full.
    fn write_pending(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext buffered: take more ciphertext from the socket.
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    self.process()?;
                    // Key updates and alerts may need an answer.
                    self.write_pending()?;
                }
                Err(e) => return Err(e), // WouldBlock included: the socket is drained
            }
        }
    }

    fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_pending()?;
        let n = self.tls.writer().write_vectored(parts)?;
        self.write_pending()?;
        if n == 0 && parts.iter().any(|p| !p.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::net::TcpListener;
    use mio::{Events, Interest, Poll, Token};

    /// A TLS client and server over a loopback socket pair, both non-blocking: a 1 MiB
    /// request and a 1 MiB answer cross through partial writes and reads, the handshake
    /// included, as the event loops drive them.
    #[test]
    fn tls_streams_carry_large_payloads_both_ways_without_blocking() {
        let dir = std::env::temp_dir().join(format!("llmreplay-transport-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let server_cfg = tls::server_config(&cert, &key).unwrap();
        let client = ClientTls::new(&TlsOptions {
            ca_cert: Some(cert),
            insecure: false,
        })
        .unwrap()
        .target("127.0.0.1")
        .unwrap();

        let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut c = client.wrap(tcp).unwrap();
        let (accepted, _) = loop {
            match listener.accept() {
                Ok(pair) => break pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        let mut s = Stream::tls(accepted, rustls::ServerConnection::new(server_cfg).unwrap());
        let mut poll = Poll::new().unwrap();
        for (stream, t) in [(&mut c, 0), (&mut s, 1)] {
            poll.registry()
                .register(
                    stream.tcp_mut(),
                    Token(t),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .unwrap();
        }
        let request: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        let answer: Vec<u8> = (0..1 << 20).map(|i| (i % 241) as u8).collect();
        let (mut sent, mut got_request, mut answered, mut got_answer) =
            (0, Vec::new(), 0, Vec::new());
        let mut buf = vec![0u8; 16 << 10];
        let mut events = Events::with_capacity(8);
        let mut rounds = 0;
        while got_answer.len() < answer.len() {
            rounds += 1;
            assert!(rounds < 100_000, "no progress");
            poll.poll(&mut events, Some(std::time::Duration::from_millis(100)))
                .unwrap();
            // Client: handshake, then write the request, read the answer.
            if c.handshake().unwrap() {
                c.flush().unwrap();
                while sent < request.len() {
                    match c.write(&request[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("client write: {e}"),
                    }
                }
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => panic!("server closed"),
                        Ok(n) => got_answer.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("client read: {e}"),
                    }
                }
            }
            // Server: read the request, answer once it is whole.
            loop {
                match s.read(&mut buf) {
                    Ok(0) => panic!("client closed"),
                    Ok(n) => got_request.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("server read: {e}"),
                }
            }
            s.flush().unwrap();
            while got_request.len() == request.len() && answered < answer.len() {
                match s.write(&answer[answered..]) {
                    Ok(n) => answered += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("server write: {e}"),
                }
            }
        }
        assert!(got_request == request, "the request arrived intact");
        assert!(got_answer == answer, "the answer arrived intact");
        assert_eq!(s.resumed(), Some(false), "a first handshake is a full one");
        let plain = Stream::Plain(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        assert_eq!(plain.resumed(), None);
    }
}
