//! The router: a sender's connections and its pools, one per endpoint. It takes due requests
//! ([`Router::dispatch`]), opens, adopts and backs off connections for them, checks timeouts
//! and silent endpoints, and hands back every request that ended, complete or failed, for the
//! loop to record ([`Router::next_ended`]). It is the only place that counts requests in
//! flight and connections being opened. What one connection does with its bytes is in
//! [`sockets`] (the I/O) and [`super::wire`] (the decisions).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::{Interest, Registry, Token, Waker};

use crate::api::EventScanner;
use crate::pipeline::PreparedRequest;
use crate::record::ErrorKind;
use crate::stats::Gaps;
use crate::sys::limits;
use crate::transport::Stream;

use super::conn::Conn;
use super::connector::{Connector, Dial, Opened};
use super::deadlines::Deadlines;
use super::exchange::Exchange;
use super::pool::Pool;
use super::{Progress, SenderConfig, FIRST_BACKOFF_NS, HOUSEKEEPING_NS, IDLE_CHECK_NS};
use super::{MAX_BACKOFF_NS, READ_BUF};

mod sockets;

/// After the client ran out of descriptors, no new connection is asked for this long.
const DESCRIPTOR_PAUSE_NS: u64 = 10_000_000;
/// How far ahead of their deadlines requests get a connection opened for them.
const CONNECT_AHEAD_NS: u64 = 100_000_000;

struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

fn token(slot: usize, generation: u32) -> Token {
    Token(slot | (generation as usize) << 32)
}

/// What reading needs: the buffer, each endpoint's dialect, and what reads counted.
struct Reader {
    buf: Vec<u8>,
    scanners: Vec<EventScanner>,
    gaps: Gaps,
    reads: u64,
}

pub(super) struct Router {
    cfg: Arc<SenderConfig>,
    registry: Registry,
    connector: Connector,
    slots: Vec<Slot>,
    free: Vec<usize>,
    pools: Vec<Pool>,
    /// Connections opened so far: the next one's opening order.
    opened: u64,
    /// Requests on a connection, being written or answered.
    in_flight: usize,
    /// Requests whose first bytes were written on time and whose rest is still to write.
    unfinished_writes: Vec<(usize, u32)>,
    /// Requests that ended, in the order they did, for the loop to record.
    ended: VecDeque<(Exchange, usize)>,
    reader: Reader,
    progress: Arc<Progress>,
    /// The run is stopping: nothing is resent, no connection opened for a resend.
    stopping: bool,
    /// The client ran out of file descriptors, and said so once.
    descriptors_warned: bool,
    next_housekeeping: u64,
    /// When idle connections are next checked against [`super::pool::MAX_IDLE_NS`].
    next_idle_check: u64,
}

impl Router {
    pub fn new(
        cfg: Arc<SenderConfig>,
        registry: Registry,
        waker: Arc<Waker>,
        progress: Arc<Progress>,
    ) -> io::Result<Router> {
        let name = std::thread::current()
            .name()
            .unwrap_or("sender")
            .to_string();
        let dials = cfg.targets.iter().map(|t| Dial {
            addr: t.addr,
            host: t.host.clone(),
            tls: t.tls.clone(),
        });
        let connector = Connector::spawn(
            format!("{name}-connect"),
            waker,
            dials.collect(),
            Duration::from_nanos(cfg.stall_timeout_ns),
        )?;
        let scanners = cfg.targets.iter().map(|t| EventScanner::new(t.api));
        Ok(Router {
            pools: cfg
                .targets
                .iter()
                .map(|_| Pool::new(FIRST_BACKOFF_NS))
                .collect(),
            reader: Reader {
                buf: vec![0; READ_BUF],
                scanners: scanners.collect(),
                gaps: Gaps::default(),
                reads: 0,
            },
            cfg,
            registry,
            connector,
            slots: Vec::new(),
            free: Vec::new(),
            opened: 0,
            in_flight: 0,
            unfinished_writes: Vec::new(),
            ended: VecDeque::new(),
            progress,
            stopping: false,
            descriptors_warned: false,
            next_housekeeping: 0,
            next_idle_check: 0,
        })
    }

    /// Requests on a connection, being written or answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// What the reads counted: the gaps between content chunks, and the reads.
    pub fn take_counts(&mut self) -> (Gaps, u64) {
        (std::mem::take(&mut self.reader.gaps), self.reader.reads)
    }

    /// Requests dispatched and not yet ended: in flight, or waiting for a connection (a
    /// closed loop's slots in use).
    pub fn open(&self) -> usize {
        self.in_flight + self.pools.iter().map(|p| p.waiting.len()).sum::<usize>()
    }

    /// Nothing in flight, nothing waiting for a connection, nothing left to record.
    pub fn idle(&self) -> bool {
        self.open() == 0 && self.ended.is_empty()
    }

    /// Idle connections open (ready for the first requests).
    pub fn ready_connections(&self) -> usize {
        self.pools.iter().map(Pool::idle_len).sum()
    }

    /// Connections being opened.
    pub fn connecting(&self) -> bool {
        self.pools.iter().any(|p| p.connecting > 0)
    }

    pub fn out_of_descriptors(&self) -> bool {
        self.descriptors_warned
    }

    /// The next request that ended, with its endpoint, for the loop to record.
    pub fn next_ended(&mut self) -> Option<(Exchange, usize)> {
        self.ended.pop_front()
    }

    /// Ends `ex` (complete or failed) on endpoint `target`: it leaves the fleet's count. One
    /// that failed without a response (its endpoint down, the run stopped) ends `now`.
    fn end(&mut self, mut ex: Exchange, target: usize, now: u64) {
        ex.end_ns.get_or_insert(now);
        self.cfg.load.finished(target);
        self.ended.push_back((ex, target));
    }

    /// Before the start: opens the spare connections and `warm` more per endpoint.
    pub fn warm_up(&mut self, warm: usize, soon: &Deadlines) {
        for target in 0..self.pools.len() {
            self.pools[target].upcoming = warm;
            self.top_up(target, soon);
        }
    }

    /// Hands a due request to an idle connection of its endpoint, or queues it.
    pub fn dispatch(&mut self, mut req: PreparedRequest, now: u64, soon: &Deadlines) {
        if let Some(peers) = &self.cfg.peers {
            req.endpoint = self.cfg.load.least_loaded(&peers[req.endpoint as usize]);
        }
        if let Some(shape) = req.cache_shape.take() {
            let mut model = self.cfg.expected.lock().unwrap_or_else(|p| p.into_inner());
            req.expected_cached_tokens = Some(model.planned(req.endpoint, &shape));
        }
        let target = req.endpoint as usize;
        self.cfg.load.started(target);
        let mut ex = Exchange::new(req, self.cfg.record_itl);
        // It was one of the upcoming requests the pool has a connection for: counted twice
        // until the next recount, a burst would open a second connection for each.
        let pool = &mut self.pools[target];
        pool.upcoming = pool.upcoming.saturating_sub(1);
        let mut stale = Vec::new();
        let idle = pool.take_idle(now, &mut stale);
        for slot in stale {
            self.close_taken_idle(slot);
        }
        let pool = &self.pools[target];
        if let Some(slot) = idle {
            self.start(slot, ex, soon);
        } else if now < pool.down_until && pool.connecting == 0 {
            let (kind, why) = pool
                .down_because
                .clone()
                .unwrap_or((ErrorKind::Connect, "unreachable".into()));
            let url = &self.cfg.targets[target].url;
            ex.fail(
                kind,
                format!("{url} is down, reconnecting with backoff: {why}"),
            );
            self.end(ex, target, now);
        } else {
            ex.waiting_since = Some(now);
            self.pools[target].waiting.push_back(ex);
        }
        self.top_up(target, soon);
    }

    /// Opens connections so that waiting requests and the spare pool are covered.
    fn top_up(&mut self, target: usize, soon: &Deadlines) {
        let now = soon.now();
        let pool = &self.pools[target];
        if now < pool.down_until || now < pool.open_paused_until || self.stopping {
            return;
        }
        let want = pool.waiting.len() + pool.upcoming + self.cfg.spare_connections;
        let have = pool.idle_len() + pool.connecting;
        let needed_now = pool.waiting.len();
        for n in have..want {
            // Each new socket costs this thread its registration and handshake events: a
            // hundred opened ahead of need would hold up a send, so those wait for a later
            // pass when a deadline is near. Connections for waiting requests are asked at once.
            if n >= needed_now && soon.send_is_near(now) {
                return;
            }
            self.ask_connection(target);
        }
    }

    fn ask_connection(&mut self, target: usize) {
        self.connector.request(target);
        self.pools[target].connecting += 1;
    }

    /// Takes in the sockets the connector opened, and the answers to probes.
    pub fn take_opened(&mut self, soon: &Deadlines) {
        while let Some(opened) = self.connector.try_opened() {
            match opened {
                Opened::Stream(target, opened) => {
                    if let Err(e) = opened.and_then(|stream| self.adopt(target, stream)) {
                        self.pools[target].connecting -= 1;
                        self.connect_failed(target, ErrorKind::Connect, &e, soon.now());
                    }
                }
                Opened::Probe(target, answer) => {
                    self.pools[target].probing = false;
                    if let Err(e) = answer {
                        self.endpoint_gone(target, &e, soon);
                    }
                }
            }
        }
    }

    /// Endpoint `target` takes no new connection, or answers none: the requests it has left
    /// without an answer for `--stall-timeout` will never get one (a server shutting down
    /// keeps them open and silent; a hung engine never starts them) and fail as
    /// `endpoint-down`.
    fn endpoint_gone(&mut self, target: usize, e: &io::Error, soon: &Deadlines) {
        let now = soon.now();
        let stall = self.cfg.stall_timeout_ns;
        let url = &self.cfg.targets[target].url;
        let what = match e.kind() {
            io::ErrorKind::Other => e.to_string(),
            _ => format!("takes no new connection ({e})"),
        };
        let gone: Vec<(usize, String)> = self
            .in_flight_exchanges()
            .filter(|(slot, ex)| {
                self.slots[*slot]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.target == target)
                    && ex
                        .waiting_for_answer(now)
                        .is_some_and(|silent| silent > stall)
            })
            .map(|(slot, ex)| {
                let silent = ex.waiting_for_answer(now).unwrap_or(0) as f64 / 1e9;
                (
                    slot,
                    format!(
                        "{url} {what}, and left this request without an answer for \
                         {silent:.1} s (--stall-timeout)"
                    ),
                )
            })
            .collect();
        for (slot, message) in gone {
            self.fail_and_close(slot, ErrorKind::EndpointDown, message, soon);
        }
    }

    /// Registers a socket whose connect is under way; its first event tells how it went.
    fn adopt(&mut self, target: usize, mut stream: Stream) -> io::Result<()> {
        self.opened += 1;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                generation: 0,
                conn: None,
            });
            self.slots.len() - 1
        });
        let generation = self.slots[slot].generation;
        if let Err(e) = self.registry.register(
            stream.tcp_mut(),
            token(slot, generation),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(slot);
            return Err(e);
        }
        self.slots[slot].conn = Some(Conn::new(stream, target, self.opened));
        Ok(())
    }

    /// A connect (`Connect`) or TLS handshake (`Tls`) failed: the endpoint backs off, unless
    /// the client ran out of file descriptors.
    fn connect_failed(&mut self, target: usize, kind: ErrorKind, e: &io::Error, now: u64) {
        let url = &self.cfg.targets[target].url;
        if limits::is_fd_exhaustion(e) {
            // The client's own limit, not the endpoint's fault: no backoff, no request failed
            // for it. Waiting requests take the connections that others free (or time out
            // waiting, told why); new connections are asked again after a pause.
            let why = format!(
                "this client is out of file descriptors ({e}): ulimit -n caps the requests in \
                 flight; raise it (ulimit -n 65536)"
            );
            if !std::mem::replace(&mut self.descriptors_warned, true) {
                self.progress
                    .out_of_descriptors
                    .store(true, Ordering::Relaxed);
                eprintln!(
                    "warning: {why}; requests wait for a connection another request frees, \
                     and {url} is not blamed"
                );
            }
            let pool = &mut self.pools[target];
            pool.open_paused_until = now + DESCRIPTOR_PAUSE_NS;
            pool.out_of_descriptors = Some(why);
            return;
        }
        let why = match kind {
            ErrorKind::Tls => format!("TLS handshake with {url}: {e}"),
            _ => format!("connect to {url}: {e}"),
        };
        let pool = &mut self.pools[target];
        pool.down_until = now + pool.backoff_ns;
        pool.backoff_ns = (pool.backoff_ns * 2).min(MAX_BACKOFF_NS);
        pool.down_because = Some((kind, why.clone()));
        if pool.connecting == 0 {
            // Nothing else will connect soon: the queued requests fail now, at their deadlines.
            for mut ex in std::mem::take(&mut pool.waiting) {
                ex.fail(kind, why.clone());
                self.end(ex, target, now);
            }
        }
    }

    /// Counts, per endpoint, the requests due soon (connections are opened for them).
    fn count_upcoming(&mut self, now: u64, soon: &Deadlines) {
        for pool in &mut self.pools {
            pool.upcoming = 0;
        }
        for endpoint in soon.due_before(now + CONNECT_AHEAD_NS) {
            self.pools[endpoint as usize].upcoming += 1;
        }
        if let Some(cap) = soon.cap() {
            // A closed loop's whole queue is due, but only its slots need connections.
            for pool in &mut self.pools {
                pool.upcoming = pool.upcoming.min(cap);
            }
        }
    }

    /// Every few milliseconds: request timeouts, silent endpoints probed, idle connections
    /// closed, requests that waited too long for a connection failed, pools topped up.
    pub fn housekeeping(&mut self, soon: &Deadlines) {
        let now = soon.now();
        if now < self.next_housekeeping {
            return;
        }
        self.next_housekeeping = now + HOUSEKEEPING_NS;
        self.count_upcoming(now, soon);
        self.expire_in_flight(now, soon);
        if now >= self.next_idle_check {
            self.next_idle_check = now + IDLE_CHECK_NS;
            for target in 0..self.pools.len() {
                for slot in self.pools[target].take_expired(now) {
                    self.close_taken_idle(slot);
                }
            }
        }
        let timeout = self.cfg.request_timeout_ns;
        for target in 0..self.pools.len() {
            while let Some(ex) = self.pools[target].waiting.front() {
                if now.saturating_sub(soon.due_at(&ex.req)) <= timeout {
                    break;
                }
                let mut ex = self.pools[target].waiting.pop_front().expect("front");
                let mut why =
                    "no connection became available within the request timeout".to_string();
                if let Some(descriptors) = &self.pools[target].out_of_descriptors {
                    why = format!("{why}: {descriptors}");
                }
                ex.fail(ErrorKind::Timeout, why);
                self.end(ex, target, now);
            }
            self.top_up(target, soon);
        }
    }

    /// Requests in flight past `--request-timeout`, `--first-token-timeout` or
    /// `--stall-timeout` fail; an endpoint that left one without an answer for the stall
    /// timeout is probed.
    fn expire_in_flight(&mut self, now: u64, soon: &Deadlines) {
        let timeout = self.cfg.request_timeout_ns;
        let stall = self.cfg.stall_timeout_ns;
        let first_token_limit = self.cfg.first_token_timeout_ns.filter(|_| self.cfg.stream);
        let mut expired = Vec::new();
        let mut suspects = Vec::new();
        for (slot, ex) in self.in_flight_exchanges() {
            let since = ex.sent_ns.unwrap_or(soon.due_at(&ex.req));
            let waited = now.saturating_sub(since);
            if waited > timeout {
                let secs = timeout as f64 / 1e9;
                expired.push((slot, format!("no complete response within {secs} s")));
            } else if let Some(silent) = ex.waiting_for_answer(now) {
                // Before its answer starts, a request waits on a live server (a long queue or
                // prefill) until --first-token-timeout; silence only makes its server a suspect.
                if first_token_limit.is_some_and(|limit| waited > limit) {
                    let secs = first_token_limit.unwrap_or(0) as f64 / 1e9;
                    expired.push((slot, format!("no first token within {secs} s")));
                } else if silent > stall {
                    if let Some(conn) = self.slots[slot].conn.as_ref() {
                        suspects.push(conn.target);
                    }
                }
            } else if let Some(silent) = ex
                .last_byte_ns
                .map(|t| now.saturating_sub(t))
                .filter(|&silent| silent > stall)
            {
                let secs = silent as f64 / 1e9;
                expired.push((
                    slot,
                    format!("the response stalled: nothing for {secs:.1} s (--stall-timeout)"),
                ));
            }
        }
        for target in suspects {
            let pool = &mut self.pools[target];
            if !pool.probing && pool.probed_ns.is_none_or(|t| now >= t + stall) {
                pool.probing = true;
                pool.probed_ns = Some(now);
                self.connector.probe(target);
            }
        }
        for (slot, message) in expired {
            self.fail_and_close(slot, ErrorKind::Timeout, message, soon);
        }
    }

    /// A stop request: no more connects; requests waiting for a connection are cancelled.
    pub fn stop(&mut self, now: u64) {
        self.stopping = true;
        // Connects asked for the requests dropped here are not made (after a burst the
        // helper thread would go on opening thousands of connections nobody will use).
        self.connector.stop();
        for target in 0..self.pools.len() {
            for mut ex in std::mem::take(&mut self.pools[target].waiting) {
                ex.fail(ErrorKind::Cancelled, "run stopped before it could be sent");
                self.end(ex, target, now);
            }
        }
    }

    /// The drain timeout passed after a stop: requests still in flight are cancelled.
    pub fn cancel_in_flight(&mut self, soon: &Deadlines) {
        let busy: Vec<usize> = self.in_flight_exchanges().map(|(slot, _)| slot).collect();
        let secs = self.cfg.drain_timeout_ns as f64 / 1e9;
        for slot in busy {
            self.fail_and_close(
                slot,
                ErrorKind::Cancelled,
                format!("run stopped; not finished within the {secs} s drain timeout"),
                soon,
            );
        }
    }

    /// Closes an idle connection its pool already gave up (taken out of the idle queue).
    fn close_taken_idle(&mut self, slot: usize) {
        if let Some(conn) = self.slots[slot].conn.as_mut() {
            conn.idle = false; // already out of the queue
        }
        self.close(slot);
    }

    fn close(&mut self, slot: usize) {
        let Some(mut conn) = self.slots[slot].conn.take() else {
            return;
        };
        let _ = self.registry.deregister(conn.stream.tcp_mut());
        let pool = &mut self.pools[conn.target];
        if !conn.connected {
            pool.connecting -= 1;
        }
        if conn.idle {
            pool.forget(slot);
        }
        debug_assert!(
            conn.wire.exchange().is_none(),
            "an exchange must be ended before its connection closes"
        );
        self.slots[slot].generation = self.slots[slot].generation.wrapping_add(1);
        self.free.push(slot);
    }

    /// The slots with a request in flight, and that request.
    fn in_flight_exchanges(&self) -> impl Iterator<Item = (usize, &Exchange)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| Some((slot, s.conn.as_ref()?.wire.exchange()?)))
    }
}
