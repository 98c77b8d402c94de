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
//!
//! The loop ([`SenderLoop`], here) is split by what it owns: [`deadlines`] (the heap and the
//! timer), [`routing`] (endpoints and their connection pools), [`sockets`] (one exchange on one
//! connection), [`turns`] (sessions, and emitting records), [`housekeeping`] (timeouts and
//! idle connections). What a connection reads is parsed without I/O: [`exchange::Feed`] takes
//! bytes and the HTTP parser returns a step, so responses are tested without sockets.

mod active;
mod conn;
mod connector;
mod conversations;
mod deadlines;
mod exchange;
pub use exchange::read_response;
mod housekeeping;
mod pool;
mod routing;
mod sockets;
mod start;
mod turns;

use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender as ChannelSender, TryRecvError};
use mio::event::Event;
use mio::{Events, Poll, Token, Waker};

use crate::api::{Api, EventScanner};
use crate::fleet::Load;
use crate::pipeline::{BufferPool, ChannelBudget, PreparedRequest};
use crate::record::{ErrorKind, RequestRecord};
use crate::stats::Gaps;
use crate::sys::clock::{
    minimise_timer_slack, raise_thread_priority, thread_cpu_ns, DeadlineTimer, RunClock,
};
use crate::sys::stop::StopRequest;
use crate::transport::TlsTarget;
use active::ActiveSessions;
pub use active::SessionCap;
use conn::Conn;
use connector::{Connector, Dial};
use conversations::Conversations;
use pool::Pool;
pub use start::StartGate;

const TIMER: Token = Token(usize::MAX);
/// A helper thread has something for the loop: the connector a socket, the seam counter a
/// count (mio allows one waker a poll: they share it).
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
    /// Its `Host` header (for the liveness probe's GET).
    pub host: String,
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
    /// The expected prefix-cache hits' model, for requests whose endpoint is picked here.
    pub expected: crate::expected_cache::SharedModel,
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
    /// Sets the run start on the shared clock once every sender has its connections open;
    /// deadlines are `t0 + scheduled_ns`.
    pub start: Arc<StartGate>,
    /// `--max-active-sessions`: the places all senders share.
    pub session_cap: Option<Arc<SessionCap>>,
    /// A session run's bound (`--duration`, `--time-in-secs`; run ns): no turn after it.
    pub session_bound_ns: Option<u64>,
    /// Carry-forward: how each endpoint's answers are counted where a carried turn puts
    /// them ([`crate::carry::seam`]).
    pub seams: Arc<crate::carry::Seams>,
    /// `--save-prompts`: a rebuilt turn's record takes its prompts.jsonl line as sent.
    pub save_prompts: bool,
}

/// Live counters shared with the progress display.
#[derive(Default)]
pub struct Progress {
    pub sent: AtomicU64,
    /// Requests that reached their sender after their send time (the producers behind).
    pub arrived_late: AtomicU64,
    /// The client ran out of file descriptors.
    pub out_of_descriptors: std::sync::atomic::AtomicBool,
}

/// Where a sender takes its requests from: the channel all senders share, and its own, with
/// the turns of the conversations it runs.
pub struct Inbox {
    pub shared: Receiver<PreparedRequest>,
    pub own: Receiver<PreparedRequest>,
}

impl Inbox {
    /// Requests waiting in both channels.
    fn backlog(&self) -> usize {
        self.own.len() + self.shared.len()
    }

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

/// What a sender thread hands back when it ends (all of them together, [`SenderReport::add`]).
#[derive(Default)]
pub struct SenderReport {
    /// The gaps between content chunks (ITL).
    pub gaps: Gaps,
    pub cpu_ns: u64,
    pub reads: u64,
    /// Conversation turns not sent because a session bound passed before their release.
    pub turns_cut: u64,
    /// Sessions whose first turn still waited for a `--max-active-sessions` place at the
    /// bound: never started (their turns are in `turns_cut`).
    pub sessions_dropped: u64,
    /// Requests taken from the channel after their send time (more than [`LATE_ARRIVAL_NS`])
    /// with nothing behind them: the producers were behind.
    pub arrived_late: u64,
    /// Requests taken after their send time from a channel that held more: built in time,
    /// they waited behind a burst larger than the senders' lookahead.
    pub queued_late: u64,
    /// The client ran out of file descriptors at least once (EMFILE, ENFILE).
    pub out_of_descriptors: bool,
}

impl SenderReport {
    /// Adds another sender's report to this one.
    pub fn add(&mut self, other: SenderReport) {
        self.gaps.add(&other.gaps);
        self.cpu_ns += other.cpu_ns;
        self.reads += other.reads;
        self.turns_cut += other.turns_cut;
        self.sessions_dropped += other.sessions_dropped;
        self.arrived_late += other.arrived_late;
        self.queued_late += other.queued_late;
        self.out_of_descriptors |= other.out_of_descriptors;
    }
}

/// Requests a sender took after their send time: just built (the producers behind), or
/// waiting in the channel behind others (a burst beyond the lookahead).
#[derive(Default)]
struct Lateness {
    arrived: u64,
    queued: u64,
}

/// A request that reaches its sender this long after its send time came late.
pub const LATE_ARRIVAL_NS: u64 = 1_000_000;

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
    /// Turns waiting for their parent's record, and the counts of the answers they carry.
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
    /// Once a stop is requested: when requests still in flight are cancelled.
    cancel_at: Option<u64>,
    records: ChannelSender<RequestRecord>,
    progress: Arc<Progress>,
    read_buf: Vec<u8>,
    /// Per endpoint: what its stream events mean.
    scanners: Vec<EventScanner>,
    gaps: Gaps,
    next_housekeeping: u64,
    /// When idle connections are next checked against [`pool::MAX_IDLE_NS`].
    next_idle_check: u64,
    /// Connections opened so far: the next one's opening order.
    opened: u64,
    reads: u64,
    /// Turns dropped at the session bound (see [`SenderReport::turns_cut`]).
    turns_cut: u64,
    /// See [`SenderReport::sessions_dropped`].
    sessions_dropped: u64,
    /// Requests taken after their send time: see [`SenderReport::arrived_late`] and
    /// [`SenderReport::queued_late`].
    late: Lateness,
    /// The client ran out of file descriptors, and said so once.
    descriptors_warned: bool,
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
        let waker = Arc::new(Waker::new(poll.registry(), CONNECTED)?);
        let connector = Connector::spawn(
            format!(
                "{}-connect",
                std::thread::current().name().unwrap_or("sender")
            ),
            Arc::clone(&waker),
            cfg.targets
                .iter()
                .map(|t| Dial {
                    addr: t.addr,
                    host: t.host.clone(),
                    tls: t.tls.clone(),
                })
                .collect(),
            Duration::from_nanos(cfg.stall_timeout_ns),
        )?;
        let pools = cfg
            .targets
            .iter()
            .map(|_| Pool::new(FIRST_BACKOFF_NS))
            .collect();
        let seam_counter = match cfg.seams.any() {
            true => Some(crate::carry::SeamCounter::spawn(
                format!(
                    "{}-seams",
                    std::thread::current().name().unwrap_or("sender")
                ),
                Arc::clone(&cfg.seams),
                Arc::clone(&waker),
            )?),
            false => None,
        };
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
            conversations: Conversations::new(seam_counter),
            active,
            open_requests: 0,
            in_flight_cap,
            in_flight: 0,
            rx,
            producers_done: false,
            unfinished_writes: Vec::new(),
            cancel_at: None,
            records,
            progress,
            read_buf: vec![0; READ_BUF],
            gaps: Gaps::default(),
            next_housekeeping: 0,
            next_idle_check: 0,
            opened: 0,
            reads: 0,
            turns_cut: 0,
            sessions_dropped: 0,
            late: Lateness::default(),
            descriptors_warned: false,
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
            gaps: self.gaps,
            cpu_ns: thread_cpu_ns() - cpu_start,
            reads: self.reads,
            turns_cut: self.turns_cut,
            sessions_dropped: self.sessions_dropped,
            arrived_late: self.late.arrived,
            queued_late: self.late.queued,
            out_of_descriptors: self.descriptors_warned,
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
            CONNECTED => {
                self.take_opened();
                self.take_seams();
            }
            token => self.on_socket_event(token, event.is_read_closed()),
        }
    }

    fn finished(&mut self) -> bool {
        if self.conversations.counts_pending() && self.cancel_at.is_none() {
            return false; // their turns go once the counts come back
        }
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
}
