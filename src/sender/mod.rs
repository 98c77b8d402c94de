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
//! The loop ([`SenderLoop`], here) is a few owners, each the only one to change its state:
//! [`intake`] (the channels, and requests that came late), [`turns`] (sessions: turns that
//! wait for their parents, session places, and each ended request's record), [`deadlines`]
//! (the heap, the clock and the timer: `due_ns`, when a request is due, moves; its
//! `scheduled_ns`, the plan, never does) and [`router`] (connections and pools: the only
//! place that counts requests in flight and connections being opened; its `sockets` do the
//! I/O). What a connection reads is decided without I/O: [`wire::Wire`] takes bytes and
//! returns an outcome (complete and reuse or close, fail, resend), so responses are tested
//! without sockets.

mod active;
mod conn;
mod connector;
mod conversations;
mod deadlines;
mod exchange;
mod intake;
mod null;
mod pool;
mod router;
mod start;
mod turns;
pub mod wire;
pub use exchange::Exchange;
pub use intake::Inbox;
pub use null::spawn_null_sender;
pub use wire::read_response;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender as ChannelSender;
use mio::event::Event;
use mio::{Events, Poll, Token, Waker};

use crate::api::Api;
use crate::fleet::Load;
use crate::pipeline::{BufferPool, ChannelBudget};
use crate::record::RequestRecord;
use crate::stats::Gaps;
use crate::sys::clock::{minimise_timer_slack, raise_thread_priority, thread_cpu_ns, RunClock};
use crate::sys::stop::StopRequest;
use crate::transport::TlsTarget;
pub use active::SessionCap;
use conversations::Conversations;
use deadlines::Deadlines;
use intake::Intake;
use router::Router;
pub use start::StartGate;
use turns::Sessions;

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

/// One sender's event loop: it owns its deadlines (and the clock), its router (connections
/// and pools), its sessions, and its intake; each changes only its own state, and the loop
/// moves requests between them: intake → sessions → deadlines → router → sessions → records.
struct SenderLoop {
    id: usize,
    cfg: Arc<SenderConfig>,
    poll: Poll,
    deadlines: Deadlines,
    router: Router,
    sessions: Sessions,
    intake: Intake,
    records: ChannelSender<RequestRecord>,
    /// Once a stop is requested: when requests still in flight are cancelled.
    cancel_at: Option<u64>,
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
        let cap = cfg.in_flight_caps.get(id).copied();
        let deadlines = Deadlines::new(clock, poll.registry(), TIMER, cfg.spin_ns, cap)?;
        let waker = Arc::new(Waker::new(poll.registry(), CONNECTED)?);
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
        let registry = poll.registry().try_clone()?;
        let router = Router::new(Arc::clone(&cfg), registry, waker, Arc::clone(&progress))?;
        let conversations = Conversations::new(seam_counter);
        Ok(SenderLoop {
            id,
            sessions: Sessions::new(Arc::clone(&cfg), conversations),
            intake: Intake::new(rx, progress),
            cfg,
            poll,
            deadlines,
            router,
            records,
            cancel_at: None,
        })
    }

    fn run(mut self) -> io::Result<SenderReport> {
        let cpu_start = thread_cpu_ns();
        let mut events = Events::with_capacity(1024);
        self.warm_up(&mut events)?;
        let open = self.router.ready_connections();
        let t0 = self.cfg.start.ready_then_wait(self.id, open);
        self.deadlines.start_at(t0);
        loop {
            self.check_stop();
            self.refill();
            self.sessions.take_held(&mut self.deadlines);
            self.send_due();
            self.router.finish_writes(&self.deadlines);
            self.record_ended();
            if self.finished() {
                break;
            }
            self.deadlines.arm_timer(self.router.open());
            self.wait(&mut events, self.poll_timeout())?;
            for (i, event) in events.iter().enumerate() {
                self.on_event(event);
                // A busy poll returns up to 1024 sockets: keep deadlines from waiting behind
                // all of them.
                if i % DEADLINE_CHECK_EVERY == DEADLINE_CHECK_EVERY - 1 {
                    self.send_due();
                    self.router.finish_writes(&self.deadlines);
                }
            }
            self.router.housekeeping(&self.deadlines);
            self.record_ended();
            if !events.is_empty() && self.cfg.read_coalesce_ns > 0 && self.router.in_flight() > 0 {
                let open = self.router.open();
                self.deadlines
                    .coalesce_reads(self.cfg.read_coalesce_ns, open);
            }
        }
        let (gaps, reads) = self.router.take_counts();
        Ok(SenderReport {
            gaps,
            cpu_ns: thread_cpu_ns() - cpu_start,
            reads,
            turns_cut: self.sessions.turns_cut,
            sessions_dropped: self.sessions.sessions_dropped,
            arrived_late: self.intake.arrived_late,
            queued_late: self.intake.queued_late,
            out_of_descriptors: self.router.out_of_descriptors(),
        })
    }

    /// How long the next poll may sleep.
    fn poll_timeout(&self) -> Duration {
        if self.sessions.holding() {
            Duration::from_nanos(active::HELD_RECHECK_NS)
        } else if !self.intake.done && self.deadlines.len() < self.cfg.lookahead {
            Duration::from_millis(1)
        } else if self.router.open() > 0 {
            Duration::from_nanos(HOUSEKEEPING_NS)
        } else {
            MAX_POLL_WAIT
        }
    }

    /// Opens the spare connections and those for the trace's opening requests, before the
    /// clock starts. Gives up on an endpoint whose connect fails (it backs off as in the run),
    /// and on the rest after [`WARM_UP_LIMIT_NS`] or a stop request.
    fn warm_up(&mut self, events: &mut Events) -> io::Result<()> {
        self.router
            .warm_up(self.cfg.warm_connections, &self.deadlines);
        let give_up = self.deadlines.now() + WARM_UP_LIMIT_NS;
        while self.router.connecting()
            && self.deadlines.now() < give_up
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
            TIMER => self.deadlines.timer_fired(),
            CONNECTED => {
                self.router.take_opened(&self.deadlines);
                self.sessions.take_seams(&mut self.deadlines);
            }
            token => {
                let closed = event.is_read_closed();
                self.router.on_socket_event(token, closed, &self.deadlines);
            }
        }
        self.record_ended();
    }

    /// Moves prepared requests from the channel into the deadline heap.
    fn refill(&mut self) {
        if self.cancel_at.is_some() {
            return;
        }
        // A closed loop takes no more than it has slots for: the rest stays in the shared
        // channel for the other senders' free slots.
        let lookahead = self.deadlines.cap().unwrap_or(self.cfg.lookahead);
        // Held-back turns count too, or the sender would take the whole channel ahead of
        // time; but with nothing to send or in flight, their parents can only be further on
        // in the channel: then it takes until one comes.
        while self.deadlines.len() + self.sessions.parked() < lookahead
            || (self.deadlines.is_empty() && self.router.in_flight() == 0)
        {
            let Some(req) = self.intake.next() else {
                if self.intake.done {
                    self.sessions.no_more_turns();
                }
                break;
            };
            self.cfg.channel_budget.release(req.bytes.capacity());
            if let Some((req, on_time)) = self.sessions.admit(req) {
                // Before the start nothing is late; a closed loop has no send times to keep.
                if on_time && self.deadlines.timed() {
                    let due = self.deadlines.due_at(&req);
                    self.intake.note_lateness(due, self.deadlines.now());
                }
                self.sessions.schedule(req, &mut self.deadlines);
            }
        }
    }

    /// Sends every request that is due (see [`Deadlines::pop_due`]); a session's first turn
    /// waits instead while every session place is taken.
    fn send_due(&mut self) {
        let mut sent = false;
        while let Some(req) = self.deadlines.pop_due(sent, self.router.open()) {
            let Some(mut req) = self.sessions.due(req) else {
                continue;
            };
            sent = true;
            self.deadlines.spin_to(&mut req);
            let now = self.deadlines.now();
            self.router.dispatch(req, now, &self.deadlines);
            self.record_ended();
        }
    }

    /// Records the requests that ended, releasing the turns that waited for them.
    fn record_ended(&mut self) {
        while let Some((ex, target)) = self.router.next_ended() {
            let record = self.sessions.record(ex, target, &mut self.deadlines);
            // The collector outlives the senders; if it is gone the run is being torn down.
            let _ = self.records.send(record);
        }
    }

    fn finished(&mut self) -> bool {
        if self.sessions.counts_pending() && self.cancel_at.is_none() {
            return false; // their turns go once the counts come back
        }
        let idle = (self.intake.done || self.cancel_at.is_some())
            && self.deadlines.is_empty()
            && !self.sessions.holding()
            && self.router.idle();
        // Nothing left that could release turns still parked: their parents never came.
        let now = self.deadlines.run_ns();
        idle && !self.sessions.release_orphans(now, &mut self.deadlines)
    }

    /// On a stop request: requests not yet due are dropped unrecorded (they were never part of
    /// the run), due ones still waiting for a connection are `cancelled`; requests in flight
    /// are cancelled once the drain timeout has passed.
    fn check_stop(&mut self) {
        let Some(at) = self.cfg.stop.requested_at() else {
            return;
        };
        let now = self.deadlines.now();
        if self.cancel_at.is_none() {
            self.cancel_at = Some(at + self.cfg.drain_timeout_ns);
            self.deadlines.clear();
            self.sessions.clear();
            self.router.stop(now);
        }
        if self.router.in_flight() > 0 && now >= self.cancel_at.expect("set above") {
            self.router.cancel_in_flight(&self.deadlines);
        }
        self.record_ended();
    }
}
