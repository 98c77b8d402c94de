//! The built-in mock inference server (CONTRACT §8): OpenAI chat and completions, streaming
//! and not, on one mio thread.
//!
//! One loopback `write()` costs more than generating hundreds of events (DESIGN-NOTES §3), so
//! each time a connection is woken, every event due by then is coalesced into one HTTP chunk
//! and one write. Due times come from a heap and a timerfd, so timing does not suffer from
//! mio's millisecond poll timeout.

mod arrival;
mod count_job;
mod counting;
pub(crate) mod dialect;
mod faults;
mod generation;
mod metrics;
mod token_cache;
mod workers;

pub use dialect::Dialect;
pub use faults::{FaultKind, FaultPlan};
pub use generation::{
    prompt_words, Generation, MockConfig, PromptCounting, Timing, APPROXIMATE_COUNT_HEADER,
};

use faults::{HUGE_HEAD_BYTES, SLOW_HEAD_NS};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Value};

use crate::clock::{minimise_timer_slack, DeadlineTimer, RunClock};
use crate::sockopt;
use crate::transport::Stream;

const LISTENER: Token = Token(usize::MAX - 1);
const TIMER: Token = Token(usize::MAX - 2);
const WAKER: Token = Token(usize::MAX - 3);
const COUNTED: Token = Token(usize::MAX - 4);
const MAX_REQUEST: usize = 64 << 20;
const MAX_REQUEST_HEAD: usize = 64 << 10;

/// Counters of a mock's lifetime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MockStats {
    pub connections: u64,
    pub requests: u64,
    pub tokens: u64,
    pub writes: u64,
    /// Generation requests per dialect: chat, completions, TGI.
    pub chat_requests: u64,
    pub completion_requests: u64,
    pub tgi_requests: u64,
    /// TLS handshakes completed, and how many of them resumed an earlier session.
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// The first `MockConfig::keep_bodies` generation requests: (path, body).
    pub bodies: Vec<(String, String)>,
    /// `--cache-blocks`: prompt words looked up in the prefix cache, and those found.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
}

/// A mock running on its own thread.
pub struct MockServer {
    addr: SocketAddr,
    waker: Arc<Waker>,
    handle: JoinHandle<io::Result<MockStats>>,
}

impl MockServer {
    /// Binds `listen` (port 0 picks a free one) and serves until [`MockServer::stop`].
    pub fn start(listen: SocketAddr, cfg: MockConfig) -> io::Result<MockServer> {
        let listener = TcpListener::bind(listen)?;
        // mio listens with a backlog of 1024: thousands of clients connecting at once would
        // overflow it and wait out SYN retransmits (1, 3, 7 s). Ask for more (the kernel caps
        // it at net.core.somaxconn); listen(2) on a listening socket only updates the backlog.
        // SAFETY: listen on a descriptor this listener owns.
        unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 65535) };
        if cfg.arrival_log.is_some() || cfg.timing_log.is_some() {
            arrival::enable(&listener)?;
        }
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let handle = std::thread::Builder::new()
            .name("mock".into())
            .spawn(move || {
                minimise_timer_slack();
                MockLoop::new(poll, listener, cfg)?.run()
            })?;
        Ok(MockServer {
            addr,
            waker,
            handle,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and returns its counters.
    pub fn stop(self) -> io::Result<MockStats> {
        self.waker.wake()?;
        self.handle
            .join()
            .map_err(|_| io::Error::other("mock thread panicked"))?
    }

    /// Serves until the process ends (the `mock` subcommand).
    pub fn wait(self) -> io::Result<MockStats> {
        self.handle
            .join()
            .map_err(|_| io::Error::other("mock thread panicked"))?
    }
}

struct Conn {
    stream: Stream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// The request being answered (one at a time per connection, as HTTP/1.1 without
    /// pipelining).
    generation: Option<Generation>,
    close_after: bool,
    /// The fault injected into the request being answered.
    fault: Option<FaultKind>,
    /// A response head held back until the first events (`slow-head`).
    head_pending: Option<Vec<u8>>,
    /// The TLS handshake was counted in [`MockStats`].
    handshake_counted: bool,
    /// Served by a worker (always, without `--http-workers`); a waiting connection is not
    /// read.
    attached: bool,
    /// When it last read or wrote: idle connections are closed after the keep-alive timeout.
    active_ns: u64,
    /// When the first bytes of the request now in `input` arrived (see [`arrival`]), or
    /// were read. A large body takes a while to arrive in full; the send drift a server sees
    /// is about the start.
    arrived_ns: Option<u64>,
    /// `--timing-log`: the kernel's receive time of that first byte, on CLOCK_MONOTONIC.
    received_mono_ns: Option<u64>,
}

struct MockLoop {
    poll: Poll,
    /// Gone after a graceful shutdown (new connections are refused).
    listener: Option<TcpListener>,
    timer: DeadlineTimer,
    armed_for: Option<u64>,
    cfg: MockConfig,
    clock: RunClock,
    conns: Vec<Option<(u32, Conn)>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    /// (due ns, slot, generation of the slot)
    due: BinaryHeap<Reverse<(u64, usize, u32)>>,
    next_id: u64,
    stats: MockStats,
    fault_log: Option<JsonlLog>,
    arrival_log: Option<JsonlLog>,
    /// accept(2) failed (out of descriptors) with connections still queued: the listener
    /// raises no new edge for them, so accepting is retried every ACCEPT_RETRY.
    accept_retry: bool,
    /// When `poll` last returned: the arrival time of whatever that round reads, when the
    /// kernel gives no receive timestamp.
    woke_ns: u64,
    /// The same moment on the wall clock, the clock of receive timestamps.
    woke_wall_ns: u64,
    /// And on CLOCK_MONOTONIC (`--timing-log`).
    woke_mono_ns: u64,
    timing_log: Option<JsonlLog>,
    /// `--http-workers`: connections hold a worker each.
    workers: Option<workers::Workers>,
    /// `--tokenizer`: the threads that count prompts.
    counting: Option<counting::CountPool>,
    /// `--cache-blocks`: the prefix cache that sets `cached_tokens`.
    prefix_cache: Option<crate::prefix_cache::PrefixCache>,
    /// Requests generating now (admitted under `--max-running`).
    running: usize,
    /// `--max-running`: requests waiting for a place, oldest first: (slot, generation of the
    /// slot, request id). An entry whose connection closed is skipped when it comes up.
    waiting: VecDeque<(usize, u32, u64)>,
}

/// A request is held by its prompt count: have it counted at normal priority, once.
fn hurry(pool: &Option<counting::CountPool>, of: count_job::CountFor, g: &mut Generation) {
    if let (Some(pool), Some(job), false) = (pool, &g.count_job, g.count_hurried) {
        g.count_hurried = true;
        pool.hurry(of, job.clone());
    }
}

/// How often idle connections are checked against the keep-alive timeout.
const IDLE_CHECK: Duration = Duration::from_millis(50);

const ACCEPT_RETRY: Duration = Duration::from_millis(10);

fn token(slot: usize, generation: u32) -> Token {
    Token(slot | (generation as usize) << 32)
}

impl MockLoop {
    fn new(poll: Poll, mut listener: TcpListener, cfg: MockConfig) -> io::Result<Self> {
        let http_workers = cfg.http_workers;
        let cfg_prefix_cache = cfg.prefix_cache;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let timer = DeadlineTimer::new(poll.registry(), TIMER)?;
        let counting = match &cfg.counting {
            PromptCounting::Tokenizer(counter) => Some(counting::CountPool::start(
                counter.clone(),
                cfg.count_threads,
                cfg.prefix_cache
                    .map(|(n, b)| token_cache::TokenCache::new(n, b)),
                Arc::new(Waker::new(poll.registry(), COUNTED)?),
            )?),
            _ => None,
        };
        let fault_log = cfg.fault_log.as_deref().map(JsonlLog::create).transpose()?;
        let timing_log = cfg
            .timing_log
            .as_deref()
            .map(JsonlLog::create)
            .transpose()?;
        let arrival_log = cfg
            .arrival_log
            .as_deref()
            .map(JsonlLog::create)
            .transpose()?;
        Ok(MockLoop {
            poll,
            listener: Some(listener),
            timer,
            armed_for: None,
            cfg,
            clock: RunClock::new(),
            conns: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            due: BinaryHeap::new(),
            next_id: 0,
            stats: MockStats::default(),
            fault_log,
            arrival_log,
            accept_retry: false,
            woke_ns: 0,
            woke_wall_ns: 0,
            woke_mono_ns: 0,
            timing_log,
            workers: http_workers.map(workers::Workers::new),
            prefix_cache: cfg_prefix_cache
                .map(|(n, b)| crate::prefix_cache::PrefixCache::new(n, b)),
            counting,
            running: 0,
            waiting: VecDeque::new(),
        })
    }

    fn run(mut self) -> io::Result<MockStats> {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = match (self.accept_retry, &self.workers) {
                (true, _) => Some(ACCEPT_RETRY),
                (false, Some(_)) => Some(IDLE_CHECK),
                (false, None) => None,
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            self.woke_ns = self.clock.now_ns();
            if self.arrival_log.is_some() || self.timing_log.is_some() {
                self.woke_wall_ns = arrival::wall_ns();
                self.woke_mono_ns = crate::clock::monotonic_ns();
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => return Ok(self.stats),
                    COUNTED => self.take_counts(),
                    LISTENER => self.accept(),
                    TIMER => {
                        self.timer.drain();
                        self.armed_for = None;
                    }
                    t => self.on_conn_event(t),
                }
            }
            if self.accept_retry {
                self.accept();
            }
            self.close_idle_workers();
            self.emit_due();
            self.arm_timer();
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((tcp, _)) => {
                    self.stats.connections += 1;
                    if self.cfg.faults.refuses_connection(self.stats.connections) {
                        self.log_fault(None, FaultKind::Refuse);
                        drop(tcp);
                        continue;
                    }
                    let _ = tcp.set_nodelay(true);
                    let mut stream = match &self.cfg.tls {
                        None => Stream::Plain(tcp),
                        Some(tls) => match rustls::ServerConnection::new(Arc::clone(tls)) {
                            Ok(session) => Stream::tls(tcp, session),
                            Err(_) => continue,
                        },
                    };
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.conns.push(None);
                        self.generations.push(0);
                        self.conns.len() - 1
                    });
                    let generation = self.generations[slot];
                    if self
                        .poll
                        .registry()
                        .register(
                            stream.tcp_mut(),
                            token(slot, generation),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                        .is_err()
                    {
                        self.free.push(slot);
                        continue;
                    }
                    self.conns[slot] = Some((
                        generation,
                        Conn {
                            stream,
                            input: Vec::new(),
                            output: Vec::new(),
                            written: 0,
                            generation: None,
                            close_after: false,
                            fault: None,
                            head_pending: None,
                            handshake_counted: false,
                            attached: self
                                .workers
                                .as_mut()
                                .is_none_or(|w| w.admit((slot, generation))),
                            active_ns: self.clock.now_ns(),
                            arrived_ns: None,
                            received_mono_ns: None,
                        },
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.accept_retry = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // EMFILE and the like: descriptors come back as connections close.
                    self.accept_retry = true;
                    return;
                }
            }
        }
    }

    fn conn_mut(&mut self, slot: usize, generation: u32) -> Option<&mut Conn> {
        conn_in(&mut self.conns, slot, generation)
    }

    fn on_conn_event(&mut self, t: Token) {
        let (slot, generation) = (t.0 & 0xffff_ffff, (t.0 >> 32) as u32);
        let (woke_ns, woke_wall_ns, woke_mono_ns) =
            (self.woke_ns, self.woke_wall_ns, self.woke_mono_ns);
        let stamped = self.arrival_log.is_some() || self.timing_log.is_some();
        let Some(conn) = conn_in(&mut self.conns, slot, generation) else {
            return;
        };
        if !conn.attached {
            return; // waits, unread, in the accept queue of a worker pool
        }
        conn.active_ns = woke_ns;
        let mut open = true;
        // Over TLS the first bytes are the handshake's: requests are stamped when read.
        let plain = match &conn.stream {
            Stream::Plain(tcp) => Some(tcp),
            Stream::Tls(_) => None,
        };
        if let (true, true, Some(tcp)) = (stamped, conn.input.is_empty(), plain) {
            let mut byte = [0u8; 1];
            match arrival::read_first_byte(tcp, &mut byte) {
                Ok((0, _)) => open = false,
                Ok((_, stamp)) => {
                    conn.input.push(byte[0]);
                    // The kernel's wall-clock time, moved onto the mock's clock through the
                    // moment the loop woke (it may be a little after that moment).
                    conn.arrived_ns = stamp.map(|wall| {
                        (woke_ns as i64 + (wall as i64 - woke_wall_ns as i64)).max(0) as u64
                    });
                    conn.received_mono_ns = Some(stamp.map_or(woke_mono_ns, |wall| {
                        (woke_mono_ns as i64 + (wall as i64 - woke_wall_ns as i64)) as u64
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => open = false,
            }
        }
        let mut buf = [0u8; 16 << 10];
        while open {
            match conn.stream.read(&mut buf) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => conn.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    open = false;
                    break;
                }
            }
        }
        if !conn.input.is_empty() && conn.arrived_ns.is_none() {
            conn.arrived_ns = Some(woke_ns);
        }
        if let (false, Some(resumed)) = (conn.handshake_counted, conn.stream.resumed()) {
            conn.handshake_counted = true;
            self.stats.tls_handshakes += 1;
            self.stats.tls_resumed += u64::from(resumed);
        }
        if !open || conn.input.len() > MAX_REQUEST {
            self.close(slot);
            return;
        }
        self.next_request(slot, generation);
        self.flush(slot, generation);
    }

    /// Answers the complete requests waiting in the connection's input, up to the first one
    /// that starts a generation.
    fn next_request(&mut self, slot: usize, generation: u32) {
        while self.take_request(slot, generation) {}
    }

    /// Takes one complete request from the input. True when it was answered at once (so the
    /// next one may be taken too); false when incomplete, idle or generating.
    fn take_request(&mut self, slot: usize, generation: u32) -> bool {
        let now = self.clock.now_ns();
        let id = self.next_id;
        let cfg = self.cfg.clone();
        let Some(conn) = conn_in(&mut self.conns, slot, generation) else {
            return false;
        };
        if conn.generation.is_some() || conn.input.is_empty() {
            return false;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(&conn.input) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if conn.input.len() > MAX_REQUEST_HEAD {
                    conn.close_after = true;
                    respond_json(conn, 431, &error_body("request head too large", 431));
                }
                return false;
            }
            Err(e) => {
                conn.close_after = true;
                respond_json(
                    conn,
                    400,
                    &error_body(&format!("invalid request: {e}"), 400),
                );
                conn.input.clear();
                return false;
            }
        };
        let mut length = 0usize;
        let mut index = None;
        let mut wants_close = false;
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("x-llmreplay-index") {
                index = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            }
            if h.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
            } else if h.name.eq_ignore_ascii_case("connection")
                && h.value.eq_ignore_ascii_case(b"close")
            {
                wants_close = true;
            }
        }
        if conn.input.len() < head_len + length {
            return false; // body still arriving
        }
        // Only now: a close flagged while the body was still arriving would end the
        // connection before the request is answered.
        conn.close_after |= wants_close;
        if let Some(log) = self.arrival_log.as_mut() {
            // On this process's clock: compare gaps between arrivals, not absolute times.
            let arrival_ns = conn.arrived_ns.unwrap_or(now);
            log.log(&json!({"index": index, "arrival_ns": arrival_ns}));
        }
        let method = req.method.unwrap_or("").to_string();
        let path = req
            .path
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_string();
        let body: Vec<u8> = conn.input[head_len..head_len + length].to_vec();
        conn.input.drain(..head_len + length);
        let received_mono_ns = conn.received_mono_ns.take().unwrap_or(self.woke_mono_ns);
        // A pipelined next request is already here.
        conn.arrived_ns = (!conn.input.is_empty()).then_some(now);
        self.stats.requests += 1;
        let dialect = match (method.as_str(), path.as_str()) {
            ("POST", "/v1/chat/completions") => Dialect::Chat,
            ("POST", "/v1/completions") => Dialect::Completions,
            ("POST", "/generate_stream") => Dialect::Tgi { stream: true },
            ("POST", "/generate") => Dialect::Tgi { stream: false },
            ("GET", "/info") => {
                let info = json!({"model_id": cfg.model, "model_dtype": "mock", "max_input_tokens": 1_000_000, "max_total_tokens": 2_000_000, "version": "llmreplay-mock"});
                respond_json(conn, 200, &info);
                return true;
            }
            ("GET", "/health") => {
                write_response(&mut conn.output, 200, "text/plain", "", b"");
                return true;
            }
            ("GET", "/metrics") => {
                let text = metrics::exposition(&metrics::Levels {
                    model: &cfg.model,
                    running: self.running,
                    waiting: self.waiting.len(),
                    stats: &self.stats,
                });
                let kind = "text/plain; version=0.0.4; charset=utf-8";
                write_response(&mut conn.output, 200, kind, "", text.as_bytes());
                return true;
            }
            ("GET", "/v1/models") => {
                let models = json!({"object": "list", "data": [{"id": cfg.model, "object": "model", "created": 0, "owned_by": "llmreplay-mock"}]});
                respond_json(conn, 200, &models);
                return true;
            }
            (
                _,
                "/v1/chat/completions"
                | "/v1/completions"
                | "/generate"
                | "/generate_stream"
                | "/health"
                | "/metrics"
                | "/v1/models"
                | "/info",
            ) => {
                respond_json(
                    conn,
                    405,
                    &error_body(&format!("method {method} not allowed"), 405),
                );
                return true;
            }
            _ => {
                respond_json(
                    conn,
                    404,
                    &error_body(&format!("no route for {method} {path}"), 404),
                );
                return true;
            }
        };
        if self.stats.bodies.len() < cfg.keep_bodies {
            let text = String::from_utf8_lossy(&body).into_owned();
            self.stats.bodies.push((path.clone(), text));
        }
        match dialect {
            Dialect::Chat => self.stats.chat_requests += 1,
            Dialect::Completions => self.stats.completion_requests += 1,
            Dialect::Tgi { .. } => self.stats.tgi_requests += 1,
        }
        let cache = &mut self.prefix_cache;
        let stats = &mut self.stats;
        let parsed = serde_json::from_slice::<Value>(&body)
            .map_err(|e| format!("invalid JSON body: {e}"))
            .and_then(|v| {
                let mut g = Generation::from_request(dialect, &v, id, now, &cfg.counting)?;
                let uncached = match cache.as_mut() {
                    Some(cache) => {
                        let (hits, queries, chain) = cache.serve_request(dialect, &v);
                        g.cache_chain = Some(chain);
                        // With --tokenizer, the token cache reports the hits (the words'
                        // serve the prefill time).
                        if g.count_job.is_none() {
                            stats.prefix_hits += hits;
                            stats.prefix_queries += queries;
                        }
                        g.cached_tokens = Some(hits);
                        queries - hits
                    }
                    // A prompt still to count: its words, one a token in synthetic prompts.
                    None if g.count_job.is_some() => prompt_words(dialect, &v),
                    None => g.prompt_tokens,
                };
                g.prefill_ns = uncached * cfg.prefill_ns_per_token;
                Ok(g)
            });
        let generation_state = match parsed {
            Ok(g) => g,
            Err(message) => {
                respond_json(conn, 400, &error_body(&message, 400));
                return true;
            }
        };
        self.next_id += 1;
        let mut generation_state = generation_state;
        if self.timing_log.is_some() {
            generation_state.timing = Some(Box::new(Timing {
                index,
                received_ns: received_mono_ns,
                chunks_ns: Vec::with_capacity(generation_state.chunks(&cfg) as usize + 1),
                chunks_tokens: Vec::with_capacity(generation_state.chunks(&cfg) as usize + 1),
            }));
        }
        let fault = cfg.faults.for_request(index.unwrap_or(id));
        conn.fault = fault;
        let mut head: Vec<u8> = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n".to_vec();
        if matches!(cfg.counting, PromptCounting::Approximate) {
            head.extend_from_slice(APPROXIMATE_COUNT_HEADER.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        match fault {
            Some(FaultKind::Status(code)) => {
                conn.fault = None;
                respond_json(conn, code, &error_body("injected fault", code));
                self.log_fault(index, FaultKind::Status(code));
                return true;
            }
            Some(FaultKind::HugeHead) => {
                conn.fault = None;
                conn.close_after = true;
                let filler = "a".repeat(HUGE_HEAD_BYTES);
                write!(
                    conn.output,
                    "HTTP/1.1 200 OK\r\nx-filler: {filler}\r\ncontent-length: 0\r\n\r\n"
                )
                .ok();
                self.log_fault(index, FaultKind::HugeHead);
                return true;
            }
            Some(FaultKind::CloseAfterResponse) => {
                conn.close_after = true;
                head.extend_from_slice(b"connection: close\r\n");
            }
            Some(FaultKind::SlowHead) => generation_state.arrival_ns += SLOW_HEAD_NS,
            Some(FaultKind::Stall | FaultKind::ResetMidStream | FaultKind::TruncatedChunk) => {
                generation_state.stop_at = generation_state.tokens / 2;
            }
            Some(FaultKind::MalformedSse | FaultKind::Refuse) | None => {}
        }
        head.extend_from_slice(b"\r\n");
        if generation_state.stream {
            if fault == Some(FaultKind::SlowHead) {
                conn.head_pending = Some(head);
            } else {
                conn.output.extend_from_slice(&head);
            }
        }
        if let (Some(pool), Some(job)) = (&self.counting, &generation_state.count_job) {
            pool.submit((slot, generation, generation_state.id()), job.clone());
        }
        if let Some(f) = fault {
            self.log_fault(index, f);
        }
        if cfg.graceful_shutdown_after.is_some_and(|n| id + 1 >= n) && self.listener.is_some() {
            // Closing the listener refuses new connects; the queued stay queued.
            if let Some(mut listener) = self.listener.take() {
                let _ = self.poll.registry().deregister(&mut listener);
            }
            self.accept_retry = false;
        }
        if self.listener.is_none() || cfg.max_running.is_some_and(|n| self.running >= n) {
            generation_state.queued = true;
            self.waiting
                .push_back((slot, generation, generation_state.id()));
            let conn = conn_in(&mut self.conns, slot, generation).expect("open");
            conn.generation = Some(generation_state);
            return false;
        }
        self.running += 1;
        let conn = conn_in(&mut self.conns, slot, generation).expect("open");
        conn.generation = Some(generation_state);
        self.schedule_first(slot, generation);
        false
    }

    /// Puts an admitted request's first event (its whole answer, not streaming) on the
    /// timeline, counted from its `arrival_ns`.
    fn schedule_first(&mut self, slot: usize, generation: u32) {
        let cfg = &self.cfg;
        let Some(g) =
            conn_in(&mut self.conns, slot, generation).and_then(|c| c.generation.as_ref())
        else {
            return;
        };
        let due = match g.stream {
            true => g.chunk_due(cfg, 0),
            false => g.chunk_due(cfg, g.chunks(cfg) - 1),
        };
        self.due.push(Reverse((due, slot, generation)));
    }

    /// A generating request ended (answered, cut or its connection gone): the oldest waiting
    /// request still connected takes its place, its time to first token starting now.
    fn release(&mut self) {
        self.running = self.running.saturating_sub(1);
        if self.listener.is_none() {
            return; // shut down: nothing more is admitted
        }
        let now = self.clock.now_ns();
        while let Some((slot, generation, id)) = self.waiting.pop_front() {
            let Some(g) = conn_in(&mut self.conns, slot, generation)
                .and_then(|c| c.generation.as_mut())
                .filter(|g| g.id() == id && g.queued)
            else {
                continue;
            };
            g.queued = false;
            g.arrival_ns = now;
            self.running += 1;
            self.schedule_first(slot, generation);
            return;
        }
    }

    /// `--timing-log`: notes when this write of events began (`now`); an ended request's line
    /// is written (its last write's time is its last byte's).
    fn log_timing(&mut self, slot: usize, generation: u32, ended: Option<Generation>, now: u64) {
        match ended {
            Some(mut g) => {
                let Some(mut t) = g.timing.take() else { return };
                t.chunks_ns.push(now);
                t.chunks_tokens.push(g.sent);
                if let Some(log) = self.timing_log.as_mut() {
                    log.log(&json!({"index": t.index, "received_ns": t.received_ns,
                                    "chunks_ns": t.chunks_ns, "chunks_tokens": t.chunks_tokens,
                                    "last_byte_ns": now}));
                }
            }
            None => {
                let g =
                    conn_in(&mut self.conns, slot, generation).and_then(|c| c.generation.as_mut());
                if let Some(g) = g {
                    let sent = g.sent;
                    if let Some(t) = g.timing.as_mut() {
                        t.chunks_ns.push(now);
                        t.chunks_tokens.push(sent);
                    }
                }
            }
        }
    }

    fn log_fault(&mut self, index: Option<u64>, fault: FaultKind) {
        if let Some(log) = self.fault_log.as_mut() {
            log.log(&json!({"index": index, "fault": fault.name()}));
        }
    }

    /// Writes everything due on every connection whose time has come.
    fn emit_due(&mut self) {
        let now = self.clock.now_ns();
        while let Some(&Reverse((due, slot, generation))) = self.due.peek() {
            if due > now {
                break;
            }
            self.due.pop();
            let cfg = self.cfg.clone();
            let Some(conn) = conn_in(&mut self.conns, slot, generation) else {
                continue;
            };
            let Some(g) = conn.generation.as_mut() else {
                continue;
            };
            if !g.stream && g.held() {
                hurry(&self.counting, (slot, generation, g.id()), g);
                continue; // answered when the count arrives (take_counts)
            }
            let mut finished = false;
            let mut tokens_before = g.sent;
            if let Some(head) = conn.head_pending.take() {
                conn.output.extend_from_slice(&head);
            }
            if g.stream {
                // One HTTP chunk for all due events: size as fixed-width hex, patched after.
                let start = conn.output.len();
                conn.output.extend_from_slice(b"00000000\r\n");
                if conn.fault == Some(FaultKind::MalformedSse) && g.sent == 0 {
                    conn.output.extend_from_slice(
                        b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n",
                    );
                }
                let n = g.write_due_events(&cfg, now, &mut conn.output);
                if n == 0 {
                    conn.output.truncate(start);
                } else {
                    let size = conn.output.len() - start - 10;
                    conn.output[start..start + 8].copy_from_slice(format!("{size:08x}").as_bytes());
                    conn.output.extend_from_slice(b"\r\n");
                }
                if g.sent >= g.stop_at && !g.done() {
                    let fault = conn.fault.take();
                    self.cut_stream(slot, generation, fault);
                    continue;
                }
                if g.closed() {
                    conn.output.extend_from_slice(b"0\r\n\r\n");
                    finished = true;
                } else if g.held() {
                    // The rest waits for the prompt count (take_counts).
                    hurry(&self.counting, (slot, generation, g.id()), g);
                } else {
                    let per = u64::from(cfg.tokens_per_chunk.max(1));
                    self.due
                        .push(Reverse((g.chunk_due(&cfg, g.sent / per), slot, generation)));
                }
            } else {
                tokens_before = 0;
                let body = g.full_response();
                let extra = match cfg.counting {
                    PromptCounting::Approximate => APPROXIMATE_COUNT_HEADER,
                    _ => "",
                };
                let bytes = serde_json::to_vec(&body).unwrap_or_default();
                write_response(&mut conn.output, 200, "application/json", extra, &bytes);
                finished = true;
            }
            let conn = conn_in(&mut self.conns, slot, generation).expect("still open");
            let g = conn.generation.as_ref().expect("generation");
            self.stats.tokens += g.sent - tokens_before;
            let wrote = g.sent > tokens_before || finished;
            let mut ended = None;
            if finished {
                ended = conn.generation.take();
                if let Some((cache, g)) = self.prefix_cache.as_mut().zip(ended.as_mut()) {
                    if let Some(chain) = g.cache_chain.take() {
                        cache.extend(chain, generation::TOKEN_TEXT.trim().as_bytes(), g.sent);
                    }
                }
                self.release();
            }
            // Read before the write: a write's time is then at or before the client's read of
            // it even when this thread is preempted as the write returns.
            let write_ns = self.timing_log.is_some().then(crate::clock::monotonic_ns);
            self.flush(slot, generation);
            if let (Some(write_ns), true) = (write_ns, wrote) {
                self.log_timing(slot, generation, ended, write_ns);
            }
            if finished {
                // A request may already be waiting on this connection.
                self.next_request(slot, generation);
                self.flush(slot, generation);
            }
        }
    }

    /// Prompt counts finished on the tokenizer threads: what waited for them is now due.
    fn take_counts(&mut self) {
        let Some(pool) = &self.counting else { return };
        let now = self.clock.now_ns();
        for counted in pool.finished() {
            let (slot, generation, id) = counted.of;
            let Some(g) = conn_in(&mut self.conns, slot, generation)
                .and_then(|c| c.generation.as_mut())
                .filter(|g| g.id() == id)
            else {
                continue; // the connection closed meanwhile
            };
            let Some(prompt_tokens) = counted.prompt_tokens else {
                continue; // the other thread counted it
            };
            if !g.count_pending {
                continue; // both threads counted it
            }
            if let Some(hits) = counted.cached_tokens {
                // The token cache's hits replace the word cache's estimate.
                g.cached_tokens = Some(hits);
                self.stats.prefix_hits += hits;
                if let Ok(n) = &prompt_tokens {
                    self.stats.prefix_queries += n;
                }
            }
            match prompt_tokens {
                Ok(n) => g.counted(n),
                Err(e) => {
                    eprintln!(
                        "mock: cannot count the prompt of request {id} (usage reports 0): {e}"
                    );
                    g.counted(0);
                }
            }
            self.due.push(Reverse((now, slot, generation)));
        }
    }

    /// Ends a stream the way its fault says: a stall leaves the connection open and silent, a
    /// reset sends RST, a truncated chunk announces more than it sends and closes.
    fn cut_stream(&mut self, slot: usize, generation: u32, fault: Option<FaultKind>) {
        match fault {
            Some(FaultKind::TruncatedChunk) => {
                if let Some(conn) = self.conn_mut(slot, generation) {
                    conn.output
                        .extend_from_slice(b"00000400\r\ndata: {\"choices\"");
                    conn.generation = None;
                    conn.close_after = true;
                }
                self.release();
                self.flush(slot, generation);
                self.close(slot);
            }
            Some(FaultKind::ResetMidStream) => {
                self.flush(slot, generation);
                if let Some(conn) = self.conn_mut(slot, generation) {
                    reset_on_close(conn.stream.tcp());
                }
                self.close(slot);
            }
            _ => self.flush(slot, generation), // stall: nothing more is ever sent
        }
    }

    fn arm_timer(&mut self) {
        let Some(&Reverse((due, _, _))) = self.due.peek() else {
            return;
        };
        if self.armed_for != Some(due) {
            let now = self.clock.now_ns();
            if self.timer.arm_in(due.saturating_sub(now)).is_ok() {
                self.armed_for = Some(due);
            }
        }
    }

    fn flush(&mut self, slot: usize, generation: u32) {
        let now = self.clock.now_ns();
        let Some(conn) = self.conn_mut(slot, generation) else {
            return;
        };
        let mut failed = conn.stream.flush().is_err();
        let mut writes = 0;
        while !failed && conn.written < conn.output.len() {
            match conn.stream.write(&conn.output[conn.written..]) {
                Ok(n) => {
                    writes += 1;
                    conn.written += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if writes > 0 {
            conn.active_ns = now;
        }
        if conn.written == conn.output.len() {
            conn.output.clear();
            conn.written = 0;
        }
        let close =
            failed || (conn.close_after && conn.output.is_empty() && conn.generation.is_none());
        self.stats.writes += writes;
        if close {
            self.close(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        let Some((generation, mut conn)) = self.conns[slot].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream.tcp_mut());
        match conn.generation.as_ref().map(|g| g.queued) {
            Some(false) => self.release(),
            Some(true) => self.waiting.retain(|w| (w.0, w.1) != (slot, generation)),
            None => {}
        }
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        self.free.push(slot);
        let conns = &self.conns;
        let next = self.workers.as_mut().and_then(|w| {
            w.release(
                (slot, generation),
                |(s, g)| matches!(conns.get(s), Some(Some((gen, _))) if *gen == g),
            )
        });
        // The freed worker takes the next waiting connection and reads what it sent.
        if let Some((s, g)) = next {
            let now = self.clock.now_ns();
            if let Some(conn) = conn_in(&mut self.conns, s, g) {
                conn.attached = true;
                conn.active_ns = now;
            }
            self.woke_ns = now;
            self.on_conn_event(token(s, g));
        }
    }

    /// `--http-workers`: a worker whose connection has been idle for the keep-alive timeout
    /// closes it, as llama-server's do.
    fn close_idle_workers(&mut self) {
        let Some(workers) = &self.workers else {
            return;
        };
        let now = self.clock.now_ns();
        let keep_alive = self.cfg.keep_alive_ns;
        let idle: Vec<usize> = workers
            .attached()
            .iter()
            .filter(|&&(s, g)| {
                self.conns.get(s).is_some_and(|c| match c {
                    Some((gen, c)) => {
                        *gen == g
                            && c.generation.is_none()
                            && c.output.is_empty()
                            && c.input.is_empty()
                            && now.saturating_sub(c.active_ns) > keep_alive
                    }
                    None => false,
                })
            })
            .map(|&(s, _)| s)
            .collect();
        for slot in idle {
            self.close(slot);
        }
    }
}

/// The connection in `slot`, if it is still the one `generation` names.
fn conn_in(conns: &mut [Option<(u32, Conn)>], slot: usize, generation: u32) -> Option<&mut Conn> {
    match conns.get_mut(slot) {
        Some(Some((g, conn))) if *g == generation => Some(conn),
        _ => None,
    }
}

/// `--fault-log` and `--arrival-log`: one JSON line per event, flushed at once.
pub struct JsonlLog(BufWriter<File>);

impl JsonlLog {
    pub fn create(path: &Path) -> std::io::Result<JsonlLog> {
        Ok(JsonlLog(BufWriter::new(File::create(path)?)))
    }

    /// Writes one line and flushes it, so a killed mock loses nothing.
    pub fn log(&mut self, line: &serde_json::Value) {
        let _ = writeln!(self.0, "{line}");
        let _ = self.0.flush();
    }
}

/// Makes the coming close send RST instead of FIN (SO_LINGER with a zero timeout).
fn reset_on_close(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = sockopt::set(stream, libc::SOL_SOCKET, libc::SO_LINGER, &linger);
}

/// An error body shaped like vLLM's.
pub fn error_body(message: &str, code: u16) -> Value {
    let kind = match code {
        400 => "BadRequestError",
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    json!({"object": "error", "message": message, "type": kind, "param": null, "code": code})
}

fn respond_json(conn: &mut Conn, status: u16, body: &Value) {
    respond_json_raw(&mut conn.output, status, body);
}

fn respond_json_raw(out: &mut Vec<u8>, status: u16, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    write_response(out, status, "application/json", "", &bytes);
}

/// A whole response; `extra_header` is one header line without its CRLF, or empty.
fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    extra_header: &str,
    body: &[u8],
) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let crlf = if extra_header.is_empty() { "" } else { "\r\n" };
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{extra_header}{crlf}content-length: {}\r\n\r\n",
        body.len()
    )
    .ok();
    out.extend_from_slice(body);
}
