//! The built-in mock inference server (CONTRACT §8): every dialect of [`crate::api`], streaming
//! and not, on one mio thread.
//!
//! One loopback `write()` costs more than generating hundreds of events (DESIGN-NOTES §3), so
//! each time a connection is woken, every event due by then is coalesced into one HTTP chunk
//! and one write. Due times come from a heap and a timerfd, so timing does not suffer from
//! mio's millisecond poll timeout.

mod count_job;
mod counting;
mod emit;
mod faults;
mod fixture;
mod generation;
mod http;
mod lateness;
mod metrics;
mod request;
mod token_cache;
mod workers;

pub use faults::{FaultKind, FaultPlan};
pub use fixture::StreamFixture;
pub use generation::{
    prompt_words, Generation, MockConfig, PromptCounting, Timing, APPROXIMATE_COUNT_HEADER,
};
pub use http::{error_body, JsonlLog};
use http::{reset_on_close, respond_json_raw, write_response};

use faults::{HUGE_HEAD_BYTES, SLOW_HEAD_NS};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Value};

use crate::sys::clock::{minimise_timer_slack, DeadlineTimer, RunClock};
use crate::sys::{rx_stamp, sockopt};
use crate::transport::Stream;

const LISTENER: Token = Token(usize::MAX - 1);
const TIMER: Token = Token(usize::MAX - 2);
/// The loop's one waker (mio allows one a poll): a count is done, or [`MockServer::stop`].
const WAKER: Token = Token(usize::MAX - 3);
/// Largest request taken (as `llmreplay capture` takes): a bigger one closes its connection.
const MAX_REQUEST: usize = crate::capture::MAX_BODY;
const MAX_REQUEST_HEAD: usize = 64 << 10;

/// Counters of a mock's lifetime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MockStats {
    pub connections: u64,
    pub requests: u64,
    pub tokens: u64,
    pub writes: u64,
    /// Generation requests per dialect (by `--api` name).
    pub requests_by_api: std::collections::BTreeMap<&'static str, u64>,
    /// TLS handshakes completed, and how many of them resumed an earlier session.
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// The first `MockConfig::keep_bodies` generation requests: (path, body).
    pub bodies: Vec<(String, String)>,
    /// `--cache-blocks`: prompt words looked up in the prefix cache, and those found.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    /// Answers that ended later than the timing the mock was given.
    pub lateness: lateness::Lateness,
}

impl MockStats {
    /// Generation requests in dialect `api` (its `--api` name).
    pub fn requests_of(&self, api: &str) -> u64 {
        self.requests_by_api.get(api).copied().unwrap_or(0)
    }
}

/// A mock running on its own thread.
pub struct MockServer {
    addr: SocketAddr,
    waker: Arc<Waker>,
    stopping: Arc<AtomicBool>,
    handle: JoinHandle<io::Result<MockStats>>,
}

impl MockServer {
    /// Binds `listen` (port 0 picks a free one) and serves until [`MockServer::stop`].
    pub fn start(listen: SocketAddr, cfg: MockConfig) -> io::Result<MockServer> {
        let listener = TcpListener::bind(listen)?;
        // mio listens with a backlog of 1024: thousands of clients connecting at once would
        // overflow it and wait out SYN retransmits (1, 3, 7 s). Ask for more (the kernel caps
        // it at net.core.somaxconn).
        sockopt::widen_backlog(&listener, 65535);
        if cfg.arrival_log.is_some() || cfg.timing_log.is_some() {
            rx_stamp::enable(&listener)?;
        }
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stopping = Arc::new(AtomicBool::new(false));
        let (loop_waker, loop_stopping) = (waker.clone(), stopping.clone());
        let handle = std::thread::Builder::new()
            .name("mock".into())
            .spawn(move || {
                minimise_timer_slack();
                MockLoop::new(poll, listener, cfg, loop_waker)?.run(&loop_stopping)
            })?;
        Ok(MockServer {
            addr,
            waker,
            stopping,
            handle,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and returns its counters.
    pub fn stop(self) -> io::Result<MockStats> {
        self.stopping.store(true, Ordering::Release);
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
    /// Requests it has taken.
    requests: u64,
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
    /// Waiting connections a freed worker took, to read next ([`MockLoop::read_taken`]).
    taken: VecDeque<Token>,
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
    fn new(
        poll: Poll,
        mut listener: TcpListener,
        cfg: MockConfig,
        waker: Arc<Waker>,
    ) -> io::Result<Self> {
        let http_workers = cfg.http_workers;
        let cfg_prefix_cache = cfg.prefix_cache;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let timer = DeadlineTimer::new(poll.registry(), TIMER)?;
        let counting = match &cfg.counting {
            PromptCounting::Tokenizer(counter) => Some(counting::CountPool::start(
                counter.clone(),
                cfg.count_threads,
                match cfg.prefix_cache {
                    Some((n, b)) => Some(token_cache::TokenCache::new(
                        n,
                        b,
                        counter
                            .content_ids(crate::api::TOKEN_TEXT)
                            .map_err(io::Error::other)?,
                    )),
                    None => None,
                },
                waker,
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
            taken: VecDeque::new(),
            prefix_cache: cfg_prefix_cache
                .map(|(n, b)| crate::prefix_cache::PrefixCache::new(n, b)),
            counting,
            running: 0,
            waiting: VecDeque::new(),
        })
    }

    fn run(mut self, stopping: &AtomicBool) -> io::Result<MockStats> {
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
                self.woke_wall_ns = rx_stamp::wall_ns();
                self.woke_mono_ns = crate::sys::clock::monotonic_ns();
            }
            for event in events.iter() {
                match event.token() {
                    WAKER if stopping.load(Ordering::Acquire) => return Ok(self.stats),
                    WAKER => self.take_counts(),
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
            self.read_taken();
            self.emit_due();
            self.read_taken();
            self.arm_timer();
            let counting = matches!(self.cfg.counting, PromptCounting::Tokenizer(_));
            if let Some(report) = self.stats.lateness.report(self.woke_ns, counting) {
                eprintln!("{report}");
            }
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
                            requests: 0,
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
            match rx_stamp::read_first_byte(tcp, &mut byte) {
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
        // The freed worker takes the next waiting connection, and reads what it sent soon.
        if let Some((s, g)) = next {
            if let Some(conn) = conn_in(&mut self.conns, s, g) {
                conn.attached = true;
                conn.active_ns = self.clock.now_ns();
            }
            self.taken.push_back(token(s, g));
        }
    }

    /// Reads the connections freed workers took. Not from inside [`MockLoop::close`]: a
    /// taken connection that its client already closed is closed in turn and frees its
    /// worker for the next, and hundreds of them queued (a client that stopped) would recurse
    /// once each until the stack overflowed.
    fn read_taken(&mut self) {
        while let Some(t) = self.taken.pop_front() {
            self.woke_ns = self.clock.now_ns();
            self.on_conn_event(t);
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

fn respond_json(conn: &mut Conn, status: u16, body: &Value) {
    respond_json_raw(&mut conn.output, status, body);
}
