//! One connection of a sender: its transport ([`Stream`]: plain TCP or TLS) and the HTTP
//! exchange on it. The event loop drives it and acts on what it returns: whether it is
//! established yet, how far a request got written, what a read brought.

use std::io::{self, IoSlice};

use super::exchange::Exchange;
use super::wire::Wire;
use crate::record::ErrorKind;
use crate::sys::clock::RunClock;
use crate::transport::Stream;

pub struct Conn {
    pub stream: Stream,
    /// The endpoint (pool) it belongs to.
    pub target: usize,
    /// Connected, and its TLS handshake (if any) complete: ready for requests.
    pub connected: bool,
    /// The request in flight and its response, as far as it came.
    pub wire: Wire,
    /// When [`Conn::delay_acks`] last ran.
    pub acks_delayed_ns: u64,
    /// Opening order (see [`super::pool::Pool::take_idle`]).
    pub seq: u64,
    /// It has carried a request.
    pub used: bool,
    /// It waits in its pool's idle queue.
    pub idle: bool,
}

/// How far a connection being opened has come.
pub enum Established {
    /// Still connecting, or the TLS handshake is under way.
    Pending,
    /// Ready for requests.
    Ready,
    /// The connect (`Connect`) or the TLS handshake (`Tls`) failed.
    Failed(ErrorKind, io::Error),
}

/// What [`Conn::write_request`] did.
pub struct Written {
    /// This call wrote the request's first bytes (it now counts as sent).
    pub started: bool,
    /// The whole request is written: its buffer, no longer needed, to give back.
    pub spent: Option<Vec<u8>>,
    /// The budget ran out with bytes still to write.
    pub out_of_budget: bool,
    pub failed: Option<(ErrorKind, String)>,
}

impl Conn {
    pub fn new(stream: Stream, target: usize, seq: u64) -> Conn {
        Conn {
            stream,
            target,
            connected: false,
            wire: Wire::default(),
            acks_delayed_ns: 0,
            seq,
            used: false,
            idle: false,
        }
    }

    /// Checks a connection being opened on one of its events: the TCP connect's outcome,
    /// then the TLS handshake as far as the socket allows.
    pub fn establish(&mut self) -> Established {
        match self.stream.tcp().take_error() {
            Ok(Some(e)) | Err(e) => return Established::Failed(ErrorKind::Connect, e),
            Ok(None) => {}
        }
        if self.stream.tcp().peer_addr().is_err() {
            return Established::Pending; // still connecting
        }
        match self.stream.handshake() {
            Ok(true) => {
                self.connected = true;
                let _ = self.stream.tcp().set_nodelay(true);
                Established::Ready
            }
            Ok(false) => Established::Pending,
            Err(e) => Established::Failed(ErrorKind::Tls, e),
        }
    }

    /// Takes a request: the response state starts afresh.
    pub fn begin(&mut self, ex: Exchange) {
        self.wire.begin(ex);
        self.used = true;
        self.idle = false;
    }

    /// Writes up to `budget` more bytes of the request in flight: `head` (the endpoint's
    /// request line and headers), then its payload. Stops early when the socket is full (its
    /// WRITABLE event resumes). The first byte written stamps the request as sent.
    pub fn write_request(&mut self, head: &[u8], budget: usize, clock: &RunClock) -> Written {
        let mut w = Written {
            started: false,
            spent: None,
            out_of_budget: false,
            failed: None,
        };
        let Some(ex) = self.wire.exchange_mut() else {
            return w;
        };
        let mut left = budget;
        loop {
            let payload = ex.req.payload();
            let total = head.len() + payload.len();
            if ex.written >= total {
                return w;
            }
            if left == 0 {
                w.out_of_budget = true;
                return w;
            }
            let parts = if ex.written < head.len() {
                let rest = left.saturating_sub(head.len() - ex.written);
                [
                    IoSlice::new(&head[ex.written..]),
                    IoSlice::new(&payload[..rest.min(payload.len())]),
                ]
            } else {
                let from = ex.written - head.len();
                let to = from.saturating_add(left).min(payload.len());
                [IoSlice::new(&payload[from..to]), IoSlice::new(&[])]
            };
            let before = clock.now_ns();
            match self.stream.write_vectored(&parts) {
                Ok(0) => {
                    w.failed = Some((ErrorKind::Reset, "connection closed while sending".into()));
                    return w;
                }
                Ok(n) => {
                    if ex.sent_ns.is_none() {
                        ex.sent_ns = Some(before);
                        w.started = true;
                    }
                    ex.written += n;
                    left = left.saturating_sub(n);
                    if ex.written == total {
                        // The bytes are no longer needed while the response streams
                        // (but for a turn whose prompt its children carry forward, and a
                        // request that may yet be resent).
                        if ex.req.carry.is_none() && !ex.resendable {
                            w.spent = Some(std::mem::take(&mut ex.req.bytes));
                            ex.req.start = 0;
                        }
                        self.delay_acks(before);
                        return w;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return w,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    w.failed = Some((self.error_kind(&e), format!("write: {e}")));
                    return w;
                }
            }
        }
    }

    /// The error kind of a failed read or write: a TLS record that fails to decrypt or
    /// verify is `tls`, not a generic I/O error.
    pub fn error_kind(&self, e: &io::Error) -> ErrorKind {
        match self.stream {
            Stream::Tls(_) if e.kind() == io::ErrorKind::InvalidData => ErrorKind::Tls,
            _ => ErrorKind::from_io(e),
        }
    }

    /// Puts the socket (back) in delayed-ACK mode (TCP_QUICKACK off): once the request is
    /// written, then on a read at most every `ACK_MODE_REFRESH_NS`.
    ///
    /// A token stream is many small segments, and in quick-ACK mode Linux answers nearly each
    /// with an ACK whose transmit, and on loopback the server's processing of it, is charged to
    /// this thread: a fifth of the client's CPU at 500k tokens/s (bench-configs/d). The kernel
    /// leaves the mode by itself when a delayed ACK times out, hence the refresh; doing it on
    /// every read cost 6 % of the sender's CPU (perf) for no fewer segments. The server never
    /// waits on it: the kernel still ACKs once more than a segment's worth is unacknowledged.
    pub fn delay_acks(&mut self, now: u64) {
        let _ = crate::sys::sockopt::set(
            self.stream.tcp(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            &0 as &libc::c_int,
        );
        self.acks_delayed_ns = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::PreparedRequest;
    use std::io::Read;

    fn request(payload: Vec<u8>) -> Exchange {
        let req = PreparedRequest {
            bytes: payload,
            ..PreparedRequest::empty(0, 0)
        };
        Exchange::new(req, false)
    }

    /// A request larger than the socket buffers goes out in budgeted steps, head first, and
    /// is stamped sent once; its buffer comes back when the last byte is written.
    #[test]
    fn a_request_is_written_in_budgeted_steps_and_its_buffer_handed_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = mio::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut conn = Conn::new(Stream::Plain(tcp), 0, 1);
        while !matches!(conn.establish(), Established::Ready) {
            std::thread::yield_now();
        }
        let head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n".to_vec();
        let payload: Vec<u8> = (0..4 << 20).map(|i| (i % 253) as u8).collect();
        conn.begin(request(payload.clone()));
        let clock = RunClock::new();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            while got.len() < head.len() + payload.len() {
                let n = server.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            (got, head, payload)
        });
        let head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
        let first = conn.write_request(head, 16 << 10, &clock);
        assert!(first.started && first.out_of_budget && first.spent.is_none());
        assert_eq!(conn.wire.exchange().unwrap().written, 16 << 10);
        let mut spent = None;
        for _ in 0..1_000_000 {
            let w = conn.write_request(head, usize::MAX, &clock);
            assert!(!w.started && w.failed.is_none());
            if let Some(buf) = w.spent {
                spent = Some(buf);
                break;
            }
            std::thread::yield_now();
        }
        let spent = spent.expect("the whole request was written");
        assert_eq!(spent.len(), 4 << 20);
        let (got, head, payload) = reader.join().unwrap();
        assert_eq!(&got[..head.len()], &head[..]);
        assert!(
            got[head.len()..] == payload[..],
            "the payload arrived intact"
        );
        assert!(conn.wire.exchange().unwrap().sent_ns.is_some());
    }

    #[test]
    fn a_refused_connect_is_a_connect_failure() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        }; // closed again: nothing listens there
        let tcp = mio::net::TcpStream::connect(port).unwrap();
        let mut conn = Conn::new(Stream::Plain(tcp), 0, 1);
        let outcome = (0..100_000).find_map(|_| match conn.establish() {
            Established::Pending => {
                std::thread::yield_now();
                None
            }
            other => Some(other),
        });
        assert!(
            matches!(outcome, Some(Established::Failed(ErrorKind::Connect, _))),
            "refused"
        );
    }
}
