//! `llmreplay capture`: a reverse proxy that forwards every request and answer unchanged, byte
//! for byte, and writes each generation request as a line of a trace that holds no text
//! ([`record`]): its arrival, lengths, the keyed hash ids of its prompt's token blocks
//! ([`blocks`]), the earlier request it continues ([`links`]), and what the proxy measured of
//! the answer.
//!
//! One mio event loop on the calling thread (no async runtime). Each client connection is a
//! [`pair::Pair`] with one upstream connection; the answer is measured by the sender's own
//! [`Wire`](crate::sender::wire::Wire) as the bytes pass, so the capture's TTFT is the replay's.
//! Lines are written in the order requests arrived (an answer that ends first waits for the
//! ones before it), flushed as they go. A signal, or `--max-requests`, stops the taking of
//! requests; the answers in flight are waited for (after a signal, [`DRAIN`] at most: the
//! rest are cut and recorded as cancelled).

pub mod blocks;
pub mod links;
mod pair;
pub mod parts;
mod record;
mod request;
mod writer;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

pub use blocks::{random_secret, BlockHasher};
use pair::{Cx, Ended, Pair};
use parts::Parts;
pub use request::{Openings, MAX_BODY};
use writer::TraceWriter;

use crate::error::{Error, Result};
use crate::prompt::PromptCounter;
use crate::stats::Gaps;
use crate::sys::clock::RunClock;
use crate::sys::stop::signals_received;
use crate::transport::{Stream, TlsTarget};

/// How long answers in flight may take to end once the capture stops.
pub const DRAIN: Duration = Duration::from_secs(10);

/// How often the loop looks at signals while no socket stirs.
const LOOK_EVERY: Duration = Duration::from_millis(50);

const LISTENER: Token = Token(usize::MAX);

/// Bytes a socket is read in at most at once.
const READ_BUFFER: usize = 64 << 10;

/// A server requests go to.
pub struct Server {
    pub addr: SocketAddr,
    pub tls: Option<TlsTarget>,
    /// As printed (no credentials).
    pub url: String,
}

/// What the capture needs.
pub struct CaptureConfig {
    /// Each client connection goes to the next in turn.
    pub upstreams: Vec<Server>,
    /// `--tls-cert`: clients are served https.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The served model's tokenizer and chat template, and what every prompt begins with.
    pub counter: PromptCounter,
    pub openings: Openings,
    pub hasher: BlockHasher,
    /// End after this many requests were taken (and answered).
    pub max_requests: Option<u64>,
    /// Headers whose value names a request's session ([`links`]), first found first.
    pub session_headers: Vec<String>,
    /// The share of conversations written (`--sample`; 1: all).
    pub sample: f64,
}

/// What went through.
#[derive(Debug, Default)]
pub struct CaptureStats {
    /// Generation requests written to the trace, and of them those that failed.
    pub recorded: u64,
    pub failed: u64,
    /// Generation requests whose body could not be read: forwarded, not in the trace; and
    /// why the first could not.
    pub unread: u64,
    pub unread_why: Option<String>,
    /// Other requests (`GET /v1/models`, ...): forwarded, not in the trace.
    pub other: u64,
    /// Generation requests of the conversations `--sample` left out: forwarded, not in the
    /// trace.
    pub sampled_out: u64,
    /// The trace's files (`--rotate-*`: its parts), and the last one written.
    pub parts: u64,
    pub last_part: PathBuf,
}

pub struct Capture {
    poll: Poll,
    listener: Option<TcpListener>,
    upstreams: Vec<Server>,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The number of connections accepted: the next one's upstream.
    accepted: usize,
    max_requests: Option<u64>,
    writer: TraceWriter,
    clock: RunClock,
    pairs: Vec<Option<Pair>>,
    free: Vec<usize>,
    gaps: Gaps,
    next_index: u64,
    /// The pairs' read buffer.
    scratch: Box<[u8]>,
}

impl Capture {
    /// Listens on `listen`; the trace goes to `out`.
    pub fn bind(listen: SocketAddr, cfg: CaptureConfig, out: Parts) -> io::Result<Capture> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(listen)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Capture {
            poll,
            listener: Some(listener),
            upstreams: cfg.upstreams,
            tls: cfg.tls,
            accepted: 0,
            max_requests: cfg.max_requests,
            writer: TraceWriter::start(
                out,
                cfg.counter,
                cfg.openings,
                cfg.hasher,
                cfg.session_headers,
                cfg.sample,
            ),
            clock: RunClock::new(),
            pairs: Vec::new(),
            free: Vec::new(),
            gaps: Gaps::default(),
            next_index: 0,
            scratch: vec![0; READ_BUFFER].into_boxed_slice(),
        })
    }

    pub fn addr(&self) -> io::Result<SocketAddr> {
        match &self.listener {
            Some(l) => l.local_addr(),
            None => Err(io::Error::other("not listening")),
        }
    }

    /// Serves until a signal or `--max-requests`, then drains and writes the last lines.
    pub fn run(mut self) -> Result<CaptureStats> {
        let mut events = Events::with_capacity(1024);
        let mut ended = Vec::new();
        // Stopping: since when no request is taken, and until when answers may take (a
        // signal gives them DRAIN; `--max-requests` waits for every one, until a signal).
        let mut stopping = false;
        let mut drain_until = u64::MAX;
        loop {
            let now = self.clock.now_ns();
            let asked = self.max_requests.is_some_and(|n| self.next_index >= n);
            let signalled = signals_received() > 0;
            if (asked || signalled) && !stopping {
                stopping = true;
                self.stop_listening();
            }
            if signalled && drain_until == u64::MAX {
                drain_until = now + DRAIN.as_nanos() as u64;
            }
            if stopping && (now >= drain_until || !self.pairs.iter().flatten().any(Pair::busy)) {
                break;
            }
            match self.poll.poll(&mut events, Some(LOOK_EVERY)) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.writer.finish()?;
                    return Err(Error::Run(format!("capture: poll: {e}")));
                }
                Ok(()) => {}
            }
            // Each pair once a round, and whether its client stirred (a new pair's did).
            let mut touched: Vec<(usize, bool)> = Vec::new();
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(&mut touched),
                    token => {
                        let (slot, upstream) = pair::slot_of(token);
                        let pair = self.pairs.get_mut(slot).and_then(Option::as_mut);
                        if let (true, Some(pair)) =
                            (event.is_read_closed() || event.is_error(), pair)
                        {
                            pair.saw_close(upstream);
                        }
                        touched.push((slot, !upstream));
                    }
                }
            }
            touched.sort_unstable_by_key(|&(slot, client)| (slot, !client));
            touched.dedup_by_key(|&mut (slot, _)| slot);
            self.pump(&touched, stopping, &mut ended);
            if !ended.drain(..).all(|e| self.writer.send(e)) {
                break; // the writer stopped: its error ends the capture
            }
        }
        let all: Vec<usize> = (0..self.pairs.len()).collect();
        self.cut(&all, &mut ended);
        for e in ended {
            self.writer.send(e);
        }
        self.writer.finish()
    }

    fn stop_listening(&mut self) {
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
    }

    fn accept(&mut self, touched: &mut Vec<(usize, bool)>) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return, // WouldBlock, or out of descriptors: the next edge retries
            };
            let slot = self.free.pop().unwrap_or_else(|| {
                self.pairs.push(None);
                self.pairs.len() - 1
            });
            let upstream = self.accepted % self.upstreams.len();
            self.accepted += 1;
            let client = match &self.tls {
                None => Stream::Plain(tcp),
                Some(tls) => match rustls::ServerConnection::new(Arc::clone(tls)) {
                    Ok(session) => Stream::tls(tcp, session),
                    Err(_) => {
                        self.free.push(slot);
                        continue;
                    }
                },
            };
            match Pair::accept(client, slot, upstream, self.poll.registry()) {
                Ok(pair) => {
                    self.pairs[slot] = Some(pair);
                    touched.push((slot, true));
                }
                Err(_) => self.free.push(slot),
            }
        }
    }

    /// Pumps the pairs of `slots`, and frees those that ended (after the round: an event
    /// of this round may still name the slot).
    fn pump(&mut self, touched: &[(usize, bool)], stopping: bool, ended: &mut Vec<Ended>) {
        self.each_pair(touched, stopping, ended, |pair, client, cx, ended| {
            if !stopping || pair.busy() {
                pair.pump(client, cx, ended);
            }
        });
    }

    /// Cuts what is still in flight on the pairs of `slots`.
    fn cut(&mut self, slots: &[usize], ended: &mut Vec<Ended>) {
        let all: Vec<(usize, bool)> = slots.iter().map(|&slot| (slot, false)).collect();
        self.each_pair(&all, true, ended, |pair, _, cx, ended| pair.cut(cx, ended));
    }

    fn each_pair(
        &mut self,
        slots: &[(usize, bool)],
        stopping: bool,
        ended: &mut Vec<Ended>,
        mut act: impl FnMut(&mut Pair, bool, &mut Cx, &mut Vec<Ended>),
    ) {
        let mut cx = Cx {
            registry: self.poll.registry(),
            upstreams: &self.upstreams,
            gaps: &mut self.gaps,
            next_index: &mut self.next_index,
            now: self.clock.now_ns(),
            stopping,
            scratch: &mut self.scratch,
        };
        let mut freed = Vec::new();
        for &(slot, client) in slots {
            let Some(pair) = self.pairs.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            act(pair, client, &mut cx, ended);
            if pair.gone {
                pair.deregister(cx.registry);
                self.pairs[slot] = None;
                freed.push(slot);
            }
        }
        self.free.extend(freed);
    }
}
