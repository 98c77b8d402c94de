//! Sender threads: each one mio event loop over keep-alive HTTP/1.1 connections.
//!
//! A sender pulls prepared requests from the shared channel into a local min-heap (bounded by
//! `lookahead`), and writes each on its deadline: a timerfd wakes `poll` just before it and
//! the last stretch is spun, so sockets keep being served while waiting. Every request ends in
//! exactly one record, sent to the collector as soon as it completes.
//!
//! Connections are kept in a slab whose tokens carry a generation, so an event for a closed
//! connection can never reach the connection that reuses its slot.
//!
//! Keeping the schedule on a busy machine: deadlines are checked between every few socket
//! events, only the first 16 KiB of each due request is written before the next due one
//! starts, connections are opened before the start for the trace's first second (see
//! [`start`]) and then 100 ms ahead of the requests that will need them (by a helper thread:
//! see [`connector`]), written request buffers go back to the producers
//! instead of being freed here, and the thread asks for a higher priority (SCHED_FIFO with
//! `--realtime`). A stop request ([`StopRequest`]) ends sending and, after the drain
//! timeout, cancels what is in flight.

mod active;
mod conn;
mod connector;
mod conversations;
mod exchange;
mod pool;
mod start;

use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender as ChannelSender, TryRecvError};
use hdrhistogram::Histogram;
use mio::event::Event;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::api::{Api, EventScanner};
use crate::clock::{
    minimise_timer_slack, raise_thread_priority, thread_cpu_ns, DeadlineTimer, RunClock,
};
use crate::expected_cache::SharedExpected;
use crate::fleet::Load;
use crate::http::response::Step;
use crate::limits;
use crate::pipeline::{BufferPool, ChannelBudget, PreparedRequest};
use crate::record::{ErrorKind, RequestRecord};
use crate::stats::latency_histogram;
use crate::stop::StopRequest;
use crate::transport::{Stream, TlsTarget};
use active::ActiveSessions;
pub use active::SessionCap;
use conn::{Conn, Established};
use connector::{Connector, Dial, Opened};
use conversations::Conversations;
use exchange::{Exchange, Feed, Hists};
use pool::Pool;
pub use start::StartGate;

const TIMER: Token = Token(usize::MAX);
/// The connector thread has opened a socket.
const CONNECTED: Token = Token(usize::MAX - 1);
const READ_BUF: usize = 64 << 10;
/// How often in-flight requests are checked against `--request-timeout`.
const HOUSEKEEPING_NS: u64 = 10_000_000;
/// How often idle connections are checked against [`pool::MAX_IDLE_NS`].
const IDLE_CHECK_NS: u64 = 250_000_000;
const FIRST_BACKOFF_NS: u64 = 10_000_000;
const MAX_BACKOFF_NS: u64 = 1_000_000_000;
/// A coalescing pause shorter than this is not worth a sleep.
const MIN_COALESCE_NS: u64 = 20_000;
/// How often a streaming socket is put back in delayed-ACK mode (see [`Conn::delay_acks`]).
const ACK_MODE_REFRESH_NS: u64 = 5_000_000;
/// Bytes of a request written when its deadline comes; the rest follows once every request
/// due at that moment has started.
const FIRST_WRITE: usize = 16 << 10;
/// Time kept free before a deadline when opening connections.
const CONNECT_COST_NS: u64 = 200_000;
/// How far ahead of their deadlines requests get a connection opened for them.
const CONNECT_AHEAD_NS: u64 = 100_000_000;
/// Socket events handled between two looks at the deadline heap.
const DEADLINE_CHECK_EVERY: usize = 16;
/// The longest `poll` sleeps, so that a stop request is seen promptly even with no traffic.
const MAX_POLL_WAIT: Duration = Duration::from_millis(50);

/// One endpoint as the senders see it.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    /// Request line and headers, up to (not including) `Content-Length`.
    pub request_head: Vec<u8>,
    /// TLS for an https endpoint.
    pub tls: Option<TlsTarget>,
    /// The dialect its responses are read in.
    pub api: Api,
}

#[derive(Clone, Debug)]
pub struct SenderConfig {
    pub targets: Vec<Target>,
    /// Requests in flight per endpoint, kept here for `least-inflight` routing.
    pub load: Arc<Load>,
    /// `least-inflight`: per endpoint, the endpoints its bodies suit (itself included); a due
    /// request goes to the least loaded of them.
    pub peers: Option<Vec<Vec<u32>>>,
    pub stream: bool,
    pub request_timeout_ns: u64,
    /// A request sent this long ago with no first token yet fails as a timeout.
    pub first_token_timeout_ns: Option<u64>,
    /// A response that has started and then been silent this long fails as a timeout.
    pub stall_timeout_ns: u64,
    /// After a stop request, how long requests in flight may still finish.
    pub drain_timeout_ns: u64,
    pub stop: Arc<StopRequest>,
    /// Idle connections kept ready per endpoint (opened before the first deadline).
    pub spare_connections: usize,
    /// More connections opened per endpoint before the start: the trace's opening requests'.
    pub warm_connections: usize,
    /// Requests held in a sender's heap at most.
    pub lookahead: usize,
    /// The final stretch before a deadline that is spun rather than slept.
    pub spin_ns: u64,
    pub record_itl: bool,
    /// Written requests' buffers go back to the producers through it.
    pub buffers: BufferPool,
    /// Bytes in the channel; taking a request makes room for the producers.
    pub channel_budget: Arc<ChannelBudget>,
    /// `--read-coalesce-us`: pause after socket events so that tokens gather (0 = never).
    pub read_coalesce_ns: u64,
    /// `--realtime`: run under SCHED_FIFO.
    pub realtime: bool,
    /// Closed loop (`--concurrency`): each sender's most requests in flight, by sender id
    /// (empty otherwise).
    pub in_flight_caps: Vec<usize>,
    /// The expected prefix-cache hits, looked up as requests are sent.
    pub expected: Arc<SharedExpected>,
    /// Sets the run start on the shared clock once every sender has its connections open;
    /// deadlines are `t0 + scheduled_ns`.
    pub start: Arc<StartGate>,
    /// `--max-active-sessions`: the places all senders share.
    pub session_cap: Option<Arc<SessionCap>>,
    /// A session run's bound (`--duration`, `--time-in-secs`; run ns): no turn after it.
    pub session_bound_ns: Option<u64>,
}

/// Live counters shared with the progress display.
#[derive(Default)]
pub struct Progress {
    pub sent: AtomicU64,
}

/// Where a sender takes its requests from: the channel all senders share, and its own, with
/// the turns of the conversations it runs.
pub struct Inbox {
    pub shared: Receiver<PreparedRequest>,
    pub own: Receiver<PreparedRequest>,
}

impl Inbox {
    /// Its own turns first; Disconnected once both channels are.
    fn try_recv(&self) -> Result<PreparedRequest, TryRecvError> {
        match self.own.try_recv() {
            Ok(req) => Ok(req),
            Err(own) => match (self.shared.try_recv(), own) {
                (Ok(req), _) => Ok(req),
                (Err(TryRecvError::Disconnected), TryRecvError::Disconnected) => {
                    Err(TryRecvError::Disconnected)
                }
                _ => Err(TryRecvError::Empty),
            },
        }
    }
}

/// What a sender thread hands back when it ends.
pub struct SenderReport {
    pub itl_ns: Histogram<u64>,
    pub token_itl_ns: Histogram<u64>,
    pub cpu_ns: u64,
    pub reads: u64,
    /// Conversation turns not sent because a session bound passed before their release.
    pub turns_cut: u64,
}

/// Longest wait for the opening connections before the start goes ahead without the rest.
const WARM_UP_LIMIT_NS: u64 = 10_000_000_000;

pub fn spawn_sender(
    id: usize,
    cfg: Arc<SenderConfig>,
    clock: RunClock,
    rx: Inbox,
    records: ChannelSender<RequestRecord>,
    progress: Arc<Progress>,
    core: Option<core_affinity::CoreId>,
) -> JoinHandle<io::Result<SenderReport>> {
    std::thread::Builder::new()
        .name(format!("sender-{id}"))
        .spawn(move || {
            let _ended = SenderEnded(Arc::clone(&cfg.channel_budget));
            // Built first, so that its connector thread keeps the caller's cores and priority.
            let realtime = cfg.realtime;
            let sender = SenderLoop::new(id, cfg, clock, rx, records, progress)?;
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
            minimise_timer_slack();
            if !raise_thread_priority(realtime) && realtime {
                eprintln!("warning: --realtime needs CAP_SYS_NICE (root); sender {id} runs at normal priority");
            }
            sender.run()
        })
        .expect("spawn sender thread")
}

/// Tells the producers, however the sender thread ends, that it takes no more requests.
struct SenderEnded(Arc<ChannelBudget>);

impl Drop for SenderEnded {
    fn drop(&mut self) {
        self.0.sender_ended();
    }
}

struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

struct SenderLoop {
    id: usize,
    cfg: Arc<SenderConfig>,
    /// The run start (see [`StartGate`]), known once the connections are warm.
    t0_ns: u64,
    clock: RunClock,
    poll: Poll,
    timer: DeadlineTimer,
    connector: Connector,
    armed_for: Option<u64>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    pools: Vec<Pool>,
    heap: BinaryHeap<PreparedRequest>,
    /// Turns waiting for their parent's record.
    conversations: Conversations,
    /// Sessions' places and bound.
    active: ActiveSessions,
    /// Closed loop: requests dispatched and not yet recorded, and their cap.
    open_requests: usize,
    in_flight_cap: Option<usize>,
    in_flight: usize,
    rx: Inbox,
    producers_done: bool,
    /// Requests whose first bytes were written on time and whose rest is still to write.
    unfinished_writes: Vec<(usize, u32)>,
    /// Requests sent whose expected hits are still to look up.
    sent_unnoted: Vec<(usize, u32)>,
    /// Once a stop is requested: when requests still in flight are cancelled.
    cancel_at: Option<u64>,
    records: ChannelSender<RequestRecord>,
    progress: Arc<Progress>,
    read_buf: Vec<u8>,
    /// Per endpoint: what its stream events mean.
    scanners: Vec<EventScanner>,
    hists: Hists,
    next_housekeeping: u64,
    /// When idle connections are next checked against [`pool::MAX_IDLE_NS`].
    next_idle_check: u64,
    /// Connections opened so far: the next one's opening order.
    opened: u64,
    reads: u64,
    /// Turns dropped at the session bound (see [`SenderReport::turns_cut`]).
    turns_cut: u64,
}

fn token(slot: usize, generation: u32) -> Token {
    Token(slot | (generation as usize) << 32)
}

impl SenderLoop {
    fn new(
        id: usize,
        cfg: Arc<SenderConfig>,
        clock: RunClock,
        rx: Inbox,
        records: ChannelSender<RequestRecord>,
        progress: Arc<Progress>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let timer = DeadlineTimer::new(poll.registry(), TIMER)?;
        let connector = Connector::spawn(
            format!(
                "{}-connect",
                std::thread::current().name().unwrap_or("sender")
            ),
            Waker::new(poll.registry(), CONNECTED)?,
            cfg.targets
                .iter()
                .map(|t| Dial {
                    addr: t.addr,
                    tls: t.tls.clone(),
                })
                .collect(),
        )?;
        let pools = cfg
            .targets
            .iter()
            .map(|_| Pool::new(FIRST_BACKOFF_NS))
            .collect();
        let in_flight_cap = cfg.in_flight_caps.get(id).copied();
        let active = ActiveSessions::new(cfg.session_cap.clone(), cfg.session_bound_ns);
        Ok(SenderLoop {
            id,
            scanners: cfg
                .targets
                .iter()
                .map(|t| EventScanner::new(t.api))
                .collect(),
            cfg,
            t0_ns: 0,
            clock,
            poll,
            timer,
            connector,
            armed_for: None,
            slots: Vec::new(),
            free: Vec::new(),
            pools,
            heap: BinaryHeap::new(),
            conversations: Conversations::default(),
            active,
            open_requests: 0,
            in_flight_cap,
            in_flight: 0,
            rx,
            producers_done: false,
            unfinished_writes: Vec::new(),
            sent_unnoted: Vec::new(),
            cancel_at: None,
            records,
            progress,
            read_buf: vec![0; READ_BUF],
            hists: Hists {
                itl: latency_histogram(),
                token_itl: latency_histogram(),
            },
            next_housekeeping: 0,
            next_idle_check: 0,
            opened: 0,
            reads: 0,
            turns_cut: 0,
        })
    }

    fn run(mut self) -> io::Result<SenderReport> {
        let cpu_start = thread_cpu_ns();
        let mut events = Events::with_capacity(1024);
        self.warm_up(&mut events)?;
        let open = self.pools.iter().map(Pool::idle_len).sum();
        self.t0_ns = self.cfg.start.ready_then_wait(self.id, open);
        loop {
            self.check_stop();
            self.refill();
            self.take_held();
            self.send_due();
            self.finish_writes();
            if self.finished() {
                break;
            }
            self.arm_timer();
            let timeout = if self.active.holding() {
                Duration::from_nanos(active::HELD_RECHECK_NS)
            } else if !self.producers_done && self.heap.len() < self.cfg.lookahead {
                Duration::from_millis(1)
            } else if self.in_flight > 0 || self.pools.iter().any(|p| !p.waiting.is_empty()) {
                Duration::from_nanos(HOUSEKEEPING_NS)
            } else {
                MAX_POLL_WAIT
            };
            self.wait(&mut events, timeout)?;
            for (i, event) in events.iter().enumerate() {
                self.on_event(event);
                // A busy poll returns up to 1024 sockets: keep deadlines from waiting behind
                // all of them.
                if i % DEADLINE_CHECK_EVERY == DEADLINE_CHECK_EVERY - 1 {
                    self.send_due();
                    self.finish_writes();
                }
            }
            self.housekeeping();
            if !events.is_empty() {
                self.coalesce_reads();
            }
        }
        Ok(SenderReport {
            itl_ns: self.hists.itl,
            token_itl_ns: self.hists.token_itl,
            cpu_ns: thread_cpu_ns() - cpu_start,
            reads: self.reads,
            turns_cut: self.turns_cut,
        })
    }

    /// Opens the spare connections and those for the trace's opening requests, before the
    /// clock starts. Gives up on an endpoint whose connect fails (it backs off as in the run),
    /// and on the rest after [`WARM_UP_LIMIT_NS`] or a stop request.
    fn warm_up(&mut self, events: &mut Events) -> io::Result<()> {
        for target in 0..self.pools.len() {
            self.pools[target].upcoming = self.cfg.warm_connections;
            self.top_up(target);
        }
        let give_up = self.clock.now_ns() + WARM_UP_LIMIT_NS;
        while self.pools.iter().any(|p| p.connecting > 0)
            && self.clock.now_ns() < give_up
            && self.cfg.stop.requested_at().is_none()
        {
            self.wait(events, Duration::from_millis(10))?;
            for event in events.iter() {
                self.on_event(event);
            }
        }
        Ok(())
    }

    /// Waits for events; an interrupted wait is a round without any.
    fn wait(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        match self.poll.poll(events, Some(timeout)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    fn on_event(&mut self, event: &Event) {
        match event.token() {
            TIMER => {
                self.timer.drain();
                self.armed_for = None;
            }
            CONNECTED => self.take_opened(),
            token => self.on_socket_event(token, event.is_read_closed()),
        }
    }

    /// `--read-coalesce-us`: after a round of socket events, lets the next tokens gather for a
    /// moment (never past the next deadline) so that one poll and one read collect several:
    /// fewer wake-ups per token, each token timestamped at most that much late.
    fn coalesce_reads(&self) {
        if self.cfg.read_coalesce_ns == 0 || self.in_flight == 0 {
            return;
        }
        let now = self.clock.now_ns();
        let until = self
            .next_wake()
            .unwrap_or(u64::MAX)
            .min(now + self.cfg.read_coalesce_ns);
        if until > now + MIN_COALESCE_NS {
            std::thread::sleep(Duration::from_nanos(until - now));
        }
    }

    fn finished(&mut self) -> bool {
        let idle = (self.producers_done || self.cancel_at.is_some())
            && self.heap.is_empty()
            && !self.active.holding()
            && self.in_flight == 0
            && self.pools.iter().all(|p| p.waiting.is_empty());
        if idle && self.conversations.waiting() {
            // Nothing left that could release them: their parents never came.
            let now = self.clock.now_ns().saturating_sub(self.t0_ns);
            for orphan in self.conversations.orphans(now) {
                self.schedule(orphan);
            }
            return false;
        }
        idle
    }

    /// On a stop request: requests not yet due are dropped unrecorded (they were never part of
    /// the run), due ones still waiting for a connection are `cancelled`; requests in flight
    /// are cancelled once the drain timeout has passed.
    fn check_stop(&mut self) {
        let Some(at) = self.cfg.stop.requested_at() else {
            return;
        };
        if self.cancel_at.is_none() {
            self.cancel_at = Some(at + self.cfg.drain_timeout_ns);
            // Connects asked for the requests dropped here are not made (after a burst the
            // helper thread would go on opening thousands of connections nobody will use).
            self.connector.stop();
            self.heap.clear();
            let held = self.active.clear_held();
            for turn in self.conversations.clear().into_iter().chain(held) {
                self.cfg.buffers.give(turn.bytes);
            }
            for target in 0..self.pools.len() {
                for mut ex in std::mem::take(&mut self.pools[target].waiting) {
                    ex.fail(ErrorKind::Cancelled, "run stopped before it could be sent");
                    self.emit(ex, target);
                }
            }
        }
        if self.in_flight > 0 && self.clock.now_ns() >= self.cancel_at.expect("set above") {
            let busy: Vec<usize> = self.in_flight_exchanges().map(|(slot, _)| slot).collect();
            let secs = self.cfg.drain_timeout_ns as f64 / 1e9;
            for slot in busy {
                self.fail_and_close(
                    slot,
                    ErrorKind::Cancelled,
                    format!("run stopped; not finished within the {secs} s drain timeout"),
                );
            }
        }
    }

    /// Moves prepared requests from the channel into the deadline heap.
    fn refill(&mut self) {
        if self.cancel_at.is_some() {
            return;
        }
        // A closed loop takes no more than it has slots for: the rest stays in the shared
        // channel for the other senders' free slots.
        let lookahead = self.in_flight_cap.unwrap_or(self.cfg.lookahead);
        // Held-back turns count too, or the sender would take the whole channel ahead of
        // time; but with nothing to send or in flight, their parents can only be further on
        // in the channel: then it takes until one comes.
        while self.heap.len() + self.conversations.parked_len() < lookahead
            || (self.heap.is_empty() && self.in_flight == 0)
        {
            match self.rx.try_recv() {
                Ok(req) => {
                    self.cfg.channel_budget.release(req.bytes.capacity());
                    self.active.arrived(&req);
                    if let Some(req) = self.conversations.admit(req) {
                        self.schedule(req);
                    }
                    self.give_spent();
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.producers_done = true;
                    self.active.no_more_turns();
                    break;
                }
            }
        }
    }

    /// Sends every request that is due, spinning up to a deadline within the spin window; but
    /// once one is sent, a later deadline is left to the next round: under a dense schedule
    /// (deadlines closer than the spin window) spinning from send to send would leave the
    /// sockets unread, and every token's time late, for as long as the schedule stays dense.
    fn send_due(&mut self) {
        let mut sent = false;
        loop {
            if self.slots_full() {
                return;
            }
            let Some(top) = self.heap.peek() else { return };
            let due = self.t0_ns + top.scheduled_ns;
            let now = self.clock.now_ns();
            if due > now + self.cfg.spin_ns || (sent && due > now) {
                return;
            }
            let req = self.heap.pop().expect("peeked");
            // A session's first turn waits here while every session place is taken.
            let Some(mut req) = self.active.due(req) else {
                continue;
            };
            sent = true;
            self.clock.spin_until(due);
            if self.in_flight_cap.is_some() {
                // Closed loop: it was due at the start and waited for this slot; its send
                // time is now, and drift is measured from it.
                let now = self.clock.now_ns().saturating_sub(self.t0_ns);
                req.queue_ns = Some(now.saturating_sub(req.scheduled_ns));
                req.scheduled_ns = now;
            }
            self.dispatch(req);
        }
    }

    /// Closed loop: every slot has a request in flight.
    fn slots_full(&self) -> bool {
        self.in_flight_cap
            .is_some_and(|cap| self.open_requests >= cap)
    }

    /// When the loop must be awake for the next deadline: the start of its spin window
    /// (none while a closed loop's slots are full: a record's end frees one).
    fn next_wake(&self) -> Option<u64> {
        if self.slots_full() {
            return None;
        }
        let top = self.heap.peek()?;
        Some((self.t0_ns + top.scheduled_ns).saturating_sub(self.cfg.spin_ns))
    }

    fn arm_timer(&mut self) {
        let Some(wake) = self.next_wake() else { return };
        if self.armed_for != Some(wake) {
            let now = self.clock.now_ns();
            if self.timer.arm_in(wake.saturating_sub(now)).is_ok() {
                self.armed_for = Some(wake);
            }
        }
    }

    /// Hands a due request to an idle connection of its endpoint, or queues it.
    fn dispatch(&mut self, mut req: PreparedRequest) {
        if let Some(peers) = &self.cfg.peers {
            req.endpoint = self.cfg.load.least_loaded(&peers[req.endpoint as usize]);
        }
        let target = req.endpoint as usize;
        self.cfg.load.started(target);
        self.open_requests += 1;
        let mut ex = Exchange::new(req, self.cfg.record_itl);
        let now = self.clock.now_ns();
        // It was one of the upcoming requests the pool has a connection for: counted twice
        // until the next recount, a burst would open a second connection for each.
        let pool = &mut self.pools[target];
        pool.upcoming = pool.upcoming.saturating_sub(1);
        if let Some(slot) = self.pools[target].take_idle() {
            self.start(slot, ex);
        } else if now < self.pools[target].down_until && self.pools[target].connecting == 0 {
            let (kind, why) = self.pools[target]
                .down_because
                .clone()
                .unwrap_or((ErrorKind::Connect, "unreachable".into()));
            ex.fail(
                kind,
                format!(
                    "{} is down, reconnecting with backoff: {why}",
                    self.cfg.targets[target].url
                ),
            );
            self.emit(ex, target);
        } else {
            self.pools[target].waiting.push_back(ex);
        }
        self.top_up(target);
    }

    /// Opens connections so that waiting requests and the spare pool are covered.
    fn top_up(&mut self, target: usize) {
        let now = self.clock.now_ns();
        let pool = &self.pools[target];
        if now < pool.down_until {
            return;
        }
        let want = pool.waiting.len() + pool.upcoming + self.cfg.spare_connections;
        let have = pool.idle_len() + pool.connecting;
        let needed_now = pool.waiting.len();
        for n in have..want {
            // Each new socket costs this thread its registration and handshake events: a
            // hundred opened ahead of need would hold up a send, so those wait for a later
            // pass when a deadline is near. Connections for waiting requests are asked at once.
            if n >= needed_now && self.send_is_near() {
                return;
            }
            self.connector.request(target);
            self.pools[target].connecting += 1;
        }
    }

    /// A deadline falls within the spin window (plus the cost of one connect).
    fn send_is_near(&self) -> bool {
        self.heap.peek().is_some_and(|top| {
            self.t0_ns + top.scheduled_ns
                <= self.clock.now_ns() + self.cfg.spin_ns + CONNECT_COST_NS
        })
    }

    /// Takes in the sockets the connector opened, and the answers to probes.
    fn take_opened(&mut self) {
        while let Some(opened) = self.connector.try_opened() {
            match opened {
                Opened::Stream(target, opened) => {
                    if let Err(e) = opened.and_then(|stream| self.adopt(target, stream)) {
                        self.pools[target].connecting -= 1;
                        self.connect_failed(target, ErrorKind::Connect, &e);
                    }
                }
                Opened::Probe(target, answer) => {
                    self.pools[target].probing = false;
                    if let Err(e) = answer {
                        self.endpoint_gone(target, &e);
                    }
                }
            }
        }
    }

    /// Endpoint `target` takes no new connection: the requests it has left without an answer
    /// for `--stall-timeout` will never get one (a server shutting down keeps them open and
    /// silent) and fail as `endpoint-down`.
    fn endpoint_gone(&mut self, target: usize, e: &io::Error) {
        let now = self.clock.now_ns();
        let stall = self.cfg.stall_timeout_ns;
        let url = &self.cfg.targets[target].url;
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
                        "{url} takes no new connection ({e}) and left this request without \
                         an answer for {silent:.1} s (--stall-timeout)"
                    ),
                )
            })
            .collect();
        for (slot, message) in gone {
            self.fail_and_close(slot, ErrorKind::EndpointDown, message);
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
        if let Err(e) = self.poll.registry().register(
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

    /// A connect (`Connect`) or TLS handshake (`Tls`) failed: the endpoint backs off.
    fn connect_failed(&mut self, target: usize, kind: ErrorKind, e: &io::Error) {
        let now = self.clock.now_ns();
        let url = &self.cfg.targets[target].url;
        let hint = if limits::is_fd_exhaustion(e) {
            " (raise ulimit -n: every request in flight needs a connection)"
        } else {
            ""
        };
        let why = match kind {
            ErrorKind::Tls => format!("TLS handshake with {url}: {e}"),
            _ => format!("connect to {url}: {e}{hint}"),
        };
        let pool = &mut self.pools[target];
        pool.down_until = now + pool.backoff_ns;
        pool.backoff_ns = (pool.backoff_ns * 2).min(MAX_BACKOFF_NS);
        pool.down_because = Some((kind, why.clone()));
        if pool.connecting == 0 {
            // Nothing else will connect soon: the queued requests fail now, at their deadlines.
            let waiting = std::mem::take(&mut pool.waiting);
            for mut ex in waiting {
                ex.fail(kind, why.clone());
                self.emit(ex, target);
            }
        }
    }

    fn start(&mut self, slot: usize, ex: Exchange) {
        self.slots[slot]
            .conn
            .as_mut()
            .expect("idle slot has a connection")
            .begin(ex);
        self.in_flight += 1;
        // Only the start now: the rest waits until every request due at this moment has
        // started, so a burst of large prompts does not delay the last one's first byte.
        if self.write_some(slot, FIRST_WRITE) {
            let generation = self.slots[slot].generation;
            self.unfinished_writes.push((slot, generation));
        }
    }

    /// Writes up to `budget` more bytes of the request on `slot` (less if the socket is full:
    /// its WRITABLE event resumes). True when the budget ran out with bytes still to write.
    fn write_some(&mut self, slot: usize, budget: usize) -> bool {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let head = &self.cfg.targets[conn.target].request_head;
        let written = conn.write_request(head, budget, &self.clock);
        if written.started {
            self.progress.sent.fetch_add(1, Ordering::Relaxed);
            self.sent_unnoted.push((slot, self.slots[slot].generation));
        }
        if let Some(buffer) = written.spent {
            self.cfg.buffers.give(buffer);
        }
        if let Some((kind, message)) = written.failed {
            self.fail_and_close(slot, kind, message);
            return false;
        }
        written.out_of_budget
    }

    /// Writes the rest of the requests started by `send_due`, then looks up the expected
    /// hits of those sent (after the burst, so that it waits for no lookup).
    fn finish_writes(&mut self) {
        while let Some((slot, generation)) = self.unfinished_writes.pop() {
            if self.slots[slot].generation == generation && self.slots[slot].conn.is_some() {
                self.write_some(slot, usize::MAX);
            }
        }
        let model = &self.cfg.expected;
        for (slot, generation) in self.sent_unnoted.drain(..) {
            let s = &mut self.slots[slot];
            if let (true, Some(ex)) = (
                s.generation == generation,
                s.conn.as_mut().and_then(|c| c.exchange.as_mut()),
            ) {
                ex.note_sent(model);
            }
        }
    }

    fn on_socket_event(&mut self, token: Token, read_closed: bool) {
        let slot = token.0 & 0xffff_ffff;
        let generation = (token.0 >> 32) as u32;
        match self.slots.get(slot) {
            Some(s) if s.generation == generation && s.conn.is_some() => {}
            _ => return, // stale event for a closed connection
        }
        let conn = self.slots[slot].conn.as_mut().expect("checked");
        if !conn.connected {
            let target = conn.target;
            match conn.establish() {
                Established::Pending => return,
                Established::Failed(kind, e) => {
                    self.close(slot);
                    self.connect_failed(target, kind, &e);
                    return;
                }
                Established::Ready => {}
            }
            let seq = conn.seq;
            let pool = &mut self.pools[target];
            pool.connected();
            match pool.waiting.pop_front() {
                Some(ex) => self.start(slot, ex),
                None => {
                    let now = self.clock.now_ns();
                    pool.put_idle(slot, seq, false, now);
                    conn.idle = true;
                }
            }
            return;
        }
        if let Err(e) = conn.stream.flush() {
            let kind = conn.error_kind(&e);
            self.fail_and_close(slot, kind, format!("write: {e}"));
            return;
        }
        self.write_some(slot, usize::MAX);
        self.read_all(slot, read_closed);
    }

    /// Reads what the socket holds, feeding the response parser.
    ///
    /// A read shorter than the buffer took everything queued, and data that arrives later
    /// raises a new edge-triggered event, so the loop stops there instead of paying for one
    /// more read(2) that would only say "would block" (a third of all reads when tokens arrive
    /// one segment at a time). The exception is a pending end of stream (`until_eof`): it
    /// raised its event already, so it must be read now.
    fn read_all(&mut self, slot: usize, until_eof: bool) {
        let mut buf = std::mem::take(&mut self.read_buf);
        while let Some(conn) = self.slots[slot].conn.as_mut() {
            let n = match conn.stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let kind = conn.error_kind(&e);
                    self.fail_and_close(slot, kind, format!("read: {e}"));
                    break;
                }
            };
            let drained = n < buf.len() && conn.stream.short_read_drains();
            let now = self.clock.now_ns();
            self.reads += 1;
            if now.saturating_sub(conn.acks_delayed_ns) >= ACK_MODE_REFRESH_NS {
                conn.delay_acks(now);
            }
            if n == 0 {
                self.on_eof(slot, now);
                break;
            }
            let Some(ex) = conn.exchange.as_mut() else {
                // Bytes on an idle connection: the server broke the protocol; drop it.
                self.close(slot);
                break;
            };
            ex.last_byte_ns = Some(now);
            let mut feed = Feed {
                ex,
                sse: &mut conn.sse,
                body: &mut conn.body,
                scanner: &self.scanners[conn.target],
                hists: &mut self.hists,
                now,
                stream: self.cfg.stream,
            };
            match conn.parser.feed(&buf[..n], &mut feed) {
                Err(e) => self.fail_and_close(slot, ErrorKind::Protocol, e.to_string()),
                Ok(Step::NeedMore) => {
                    if ex
                        .error
                        .as_ref()
                        .is_some_and(|e| e.kind == ErrorKind::Protocol)
                    {
                        self.fail_and_close(slot, ErrorKind::Protocol, String::new());
                        break;
                    }
                    ex.note_first_token(&self.cfg.expected);
                }
                Ok(Step::Done { consumed }) => {
                    let reusable =
                        consumed == n && conn.parser.head().is_some_and(|h| h.keep_alive);
                    self.complete(slot, now, reusable);
                }
            }
            if drained && !until_eof {
                break;
            }
        }
        self.read_buf = buf;
    }

    fn on_eof(&mut self, slot: usize, now: u64) {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        if conn.exchange.is_none() {
            self.close(slot);
            return;
        }
        match conn.parser.finish_at_eof() {
            Ok(()) => self.complete(slot, now, false),
            Err(e) => {
                self.fail_and_close(
                    slot,
                    ErrorKind::Reset,
                    format!("connection closed by the server: {e}"),
                );
            }
        }
    }

    /// The response is complete: emit its record; keep the connection if it can be reused.
    fn complete(&mut self, slot: usize, now: u64, reusable: bool) {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let mut ex = conn.exchange.take().expect("exchange in flight");
        ex.finish_response(&conn.body, &self.scanners[conn.target], now);
        ex.note_first_token(&self.cfg.expected);
        let target = conn.target;
        self.in_flight -= 1;
        self.emit(ex, target);
        if !reusable {
            self.close(slot);
            self.top_up(target);
            return;
        }
        match self.pools[target].waiting.pop_front() {
            Some(next) => self.start(slot, next),
            None => {
                let conn = self.slots[slot].conn.as_mut().expect("live slot");
                conn.idle = true;
                self.pools[target].put_idle(slot, conn.seq, true, now);
            }
        }
    }

    fn fail_and_close(&mut self, slot: usize, kind: ErrorKind, message: String) {
        let Some(conn) = self.slots[slot].conn.as_mut() else {
            return;
        };
        let target = conn.target;
        if let Some(mut ex) = conn.exchange.take() {
            ex.fail(kind, message);
            ex.end_ns = Some(self.clock.now_ns());
            self.in_flight -= 1;
            self.emit(ex, target);
        }
        self.close(slot);
        self.top_up(target);
    }

    fn close(&mut self, slot: usize) {
        let Some(mut conn) = self.slots[slot].conn.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream.tcp_mut());
        let pool = &mut self.pools[conn.target];
        if !conn.connected {
            pool.connecting -= 1;
        }
        if conn.idle {
            pool.forget(slot);
        }
        debug_assert!(
            conn.exchange.is_none(),
            "an exchange must be emitted before its connection closes"
        );
        self.slots[slot].generation = self.slots[slot].generation.wrapping_add(1);
        self.free.push(slot);
    }

    /// Gives back the buffers of turns rebuilt with their parent's history.
    fn give_spent(&mut self) {
        for buffer in self.conversations.spent.drain(..) {
            self.cfg.buffers.give(buffer);
        }
    }

    /// A request ready for the deadline heap; a session turn past the session bound is
    /// dropped instead, with the turns of its session that would follow it.
    fn schedule(&mut self, req: PreparedRequest) {
        let mut todo = vec![req];
        while let Some(req) = todo.pop() {
            match self.active.past_bound(&req) {
                true => todo.extend(self.drop_turn(req)),
                false => self.heap.push(req),
            }
        }
    }

    /// A turn not sent (past the bound, or its session never started): its session counts
    /// it gone, and the turns after it, now or when they come, are released as after a
    /// failed parent that never ends, so past the bound too.
    fn drop_turn(&mut self, req: PreparedRequest) -> Vec<PreparedRequest> {
        if let Some(turn) = &req.session {
            self.active.gone(&turn.link.root);
        }
        self.turns_cut += 1;
        let children = self.conversations.ended(req.index, u64::MAX, true, None);
        self.cfg.buffers.give(req.bytes);
        children
    }

    /// Sessions held for a place: those a freed place lets go, to the heap; those the bound
    /// has passed, dropped.
    fn take_held(&mut self) {
        if !self.active.holding() {
            return;
        }
        let now = self.clock.now_ns().saturating_sub(self.t0_ns);
        for req in self.active.take_held(now) {
            self.heap.push(req);
        }
        for req in self.active.drop_held_past_bound(now) {
            for follower in self.drop_turn(req) {
                self.schedule(follower);
            }
        }
    }

    fn emit(&mut self, mut ex: Exchange, target: usize) {
        self.cfg.load.finished(target);
        self.open_requests = self.open_requests.saturating_sub(1);
        // A request that failed without a response (its endpoint down, the run stopped) ends
        // now: the run's duration must include it.
        if ex.end_ns.is_none() {
            ex.end_ns = Some(self.clock.now_ns());
        }
        // A turn whose children carry its prompt and answer forward kept its bytes.
        let carried = ex.req.carry.take().map(|slot| {
            let bytes = std::mem::take(&mut ex.req.bytes);
            (
                slot,
                bytes,
                ex.req.start,
                ex.answer.take().unwrap_or_default(),
            )
        });
        let mut record = ex.into_record(&self.cfg.targets[target].url, self.t0_ns);
        if let Some(e) = &mut record.error {
            if let std::borrow::Cow::Owned(clean) = crate::secrets::redact(&e.message) {
                e.message = clean;
            }
        }
        if record.session.is_some() {
            let end = record.end_ns.unwrap_or(0);
            // Only a successful turn's prompt and answer are worth carrying.
            let ok = record.ok();
            let history = carried.and_then(|(slot, bytes, start, answer)| {
                let answered = record.output_tokens.unwrap_or(0);
                let h = ok.then(|| crate::carry::history(&bytes[start..], &slot, answer, answered));
                self.cfg.buffers.give(bytes);
                h
            });
            let children = self
                .conversations
                .ended(record.index, end, !record.ok(), history);
            self.give_spent();
            if self.cancel_at.is_none() {
                for child in children {
                    self.schedule(child);
                }
            }
            if let Some(turn) = &record.session {
                self.active.gone(&turn.root);
            }
        }
        // The collector outlives the senders; if it is gone the run is being torn down.
        let _ = self.records.send(record);
    }

    /// The slots with a request in flight, and that request.
    fn in_flight_exchanges(&self) -> impl Iterator<Item = (usize, &Exchange)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| Some((slot, s.conn.as_ref()?.exchange.as_ref()?)))
    }

    /// Counts, per endpoint, the requests due soon (the pools are topped up below).
    fn count_upcoming(&mut self, now: u64) {
        for pool in &mut self.pools {
            pool.upcoming = 0;
        }
        let horizon = now + CONNECT_AHEAD_NS;
        for req in self.heap.iter() {
            if self.t0_ns + req.scheduled_ns <= horizon {
                self.pools[req.endpoint as usize].upcoming += 1;
            }
        }
        if let Some(cap) = self.in_flight_cap {
            // A closed loop's whole queue is due, but only its slots need connections.
            for pool in &mut self.pools {
                pool.upcoming = pool.upcoming.min(cap);
            }
        }
    }

    /// Request timeouts, and reconnecting endpoints after their backoff.
    fn housekeeping(&mut self) {
        let now = self.clock.now_ns();
        if now < self.next_housekeeping {
            return;
        }
        self.next_housekeeping = now + HOUSEKEEPING_NS;
        self.count_upcoming(now);
        let timeout = self.cfg.request_timeout_ns;
        let t0 = self.t0_ns;
        let mut expired = Vec::new();
        let stall = self.cfg.stall_timeout_ns;
        let first_token_limit = self.cfg.first_token_timeout_ns.filter(|_| self.cfg.stream);
        let mut suspects = Vec::new();
        for (slot, ex) in self.in_flight_exchanges() {
            let since = ex.sent_ns.unwrap_or(t0 + ex.req.scheduled_ns);
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
            self.fail_and_close(slot, ErrorKind::Timeout, message);
        }
        if now >= self.next_idle_check {
            self.next_idle_check = now + IDLE_CHECK_NS;
            for target in 0..self.pools.len() {
                for slot in self.pools[target].take_expired(now) {
                    if let Some(conn) = self.slots[slot].conn.as_mut() {
                        conn.idle = false; // already out of the queue
                    }
                    self.close(slot);
                }
            }
        }
        for target in 0..self.pools.len() {
            while let Some(ex) = self.pools[target].waiting.front() {
                if now.saturating_sub(t0 + ex.req.scheduled_ns) <= timeout {
                    break;
                }
                let mut ex = self.pools[target].waiting.pop_front().expect("front");
                ex.fail(
                    ErrorKind::Timeout,
                    "no connection became available within the request timeout",
                );
                self.emit(ex, target);
            }
            self.top_up(target);
        }
    }
}
