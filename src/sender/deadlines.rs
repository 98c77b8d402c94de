//! A sender's deadlines: the heap of requests taken from the channel, ordered by when each is
//! due, the run's clock and start, and the timer that wakes the loop for the next one. A
//! request is due at `t0 + due_ns`; a closed loop (`--concurrency`) sends as slots free.

use std::collections::BinaryHeap;
use std::time::Duration;

use mio::{Registry, Token};

use crate::pipeline::PreparedRequest;
use crate::sys::clock::{DeadlineTimer, RunClock};

use super::{CONNECT_COST_NS, MIN_COALESCE_NS};

pub(super) struct Deadlines {
    heap: BinaryHeap<PreparedRequest>,
    clock: RunClock,
    /// The run start (see [`super::StartGate`]), known once the connections are warm.
    t0_ns: u64,
    timer: DeadlineTimer,
    armed_for: Option<u64>,
    /// The final stretch before a deadline that is spun rather than slept.
    spin_ns: u64,
    /// Closed loop: the most requests open at once (None: sent at their times).
    cap: Option<usize>,
}

impl Deadlines {
    pub fn new(
        clock: RunClock,
        registry: &Registry,
        timer: Token,
        spin_ns: u64,
        cap: Option<usize>,
    ) -> std::io::Result<Deadlines> {
        Ok(Deadlines {
            heap: BinaryHeap::new(),
            clock,
            t0_ns: 0,
            timer: DeadlineTimer::new(registry, timer)?,
            armed_for: None,
            spin_ns,
            cap,
        })
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    pub fn clock(&self) -> &RunClock {
        &self.clock
    }

    /// Nanoseconds since the run start (0 before it).
    pub fn run_ns(&self) -> u64 {
        self.now().saturating_sub(self.t0_ns)
    }

    pub fn t0(&self) -> u64 {
        self.t0_ns
    }

    pub fn start_at(&mut self, t0_ns: u64) {
        self.t0_ns = t0_ns;
    }

    /// Sent at their times (not a closed loop), and the clock started.
    pub fn timed(&self) -> bool {
        self.t0_ns > 0 && self.cap.is_none()
    }

    pub fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// When `req` is due, on the clock.
    pub fn due_at(&self, req: &PreparedRequest) -> u64 {
        self.t0_ns + req.due_ns
    }

    pub fn push(&mut self, req: PreparedRequest) {
        self.heap.push(req);
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// A stop: requests not yet due are dropped (they were never part of the run).
    pub fn clear(&mut self) {
        self.heap.clear();
    }

    /// Closed loop: every slot has a request (`open` of them dispatched and not ended).
    pub fn slots_full(&self, open: usize) -> bool {
        self.cap.is_some_and(|cap| open >= cap)
    }

    /// The next request to send, if it is due (or within the spin window: then spun to),
    /// `sent` already this round or not: once one is sent, a later deadline is left to the
    /// next round (under a dense schedule, spinning from send to send would leave the
    /// sockets unread, and every token's time late, for as long as the schedule stays dense).
    /// A closed loop's request is due when a slot is free: sent now, its wait is its queue.
    pub fn pop_due(&mut self, sent: bool, open: usize) -> Option<PreparedRequest> {
        if self.slots_full(open) {
            return None;
        }
        let due = self.due_at(self.heap.peek()?);
        let now = self.now();
        if due > now + self.spin_ns || (sent && due > now) {
            return None;
        }
        let req = self.heap.pop().expect("peeked");
        Some(req)
    }

    /// Spins to the deadline of `req`, just taken by [`Self::pop_due`]. A closed loop's
    /// request was due at the start and waited for its slot: its send time is now, and
    /// drift is measured from it.
    pub fn spin_to(&self, req: &mut PreparedRequest) {
        self.clock.spin_until(self.due_at(req));
        if self.cap.is_some() {
            let now = self.run_ns();
            req.queue_ns = Some(now.saturating_sub(req.due_ns));
            req.due_ns = now;
        }
    }

    /// When the loop must be awake for the next deadline: the start of its spin window
    /// (none while a closed loop's slots are full: a record's end frees one).
    pub fn next_wake(&self, open: usize) -> Option<u64> {
        if self.slots_full(open) {
            return None;
        }
        let top = self.heap.peek()?;
        Some(self.due_at(top).saturating_sub(self.spin_ns))
    }

    pub fn arm_timer(&mut self, open: usize) {
        let Some(wake) = self.next_wake(open) else {
            return;
        };
        if self.armed_for != Some(wake) {
            let now = self.now();
            if self.timer.arm_in(wake.saturating_sub(now)).is_ok() {
                self.armed_for = Some(wake);
            }
        }
    }

    /// The timer fired.
    pub fn timer_fired(&mut self) {
        self.timer.drain();
        self.armed_for = None;
    }

    /// A deadline falls within the spin window (plus the cost of one connect).
    pub fn send_is_near(&self, now: u64) -> bool {
        self.heap
            .peek()
            .is_some_and(|top| self.due_at(top) <= now + self.spin_ns + CONNECT_COST_NS)
    }

    /// The endpoints of the requests due by `horizon`, one entry each.
    pub fn due_before(&self, horizon: u64) -> impl Iterator<Item = u32> + '_ {
        self.heap
            .iter()
            .filter(move |req| self.due_at(req) <= horizon)
            .map(|req| req.endpoint)
    }

    /// `--read-coalesce-us`: after a round of socket events, lets the next tokens gather for a
    /// moment (never past the next deadline) so that one poll and one read collect several:
    /// fewer wake-ups per token, each token timestamped at most that much late.
    pub fn coalesce_reads(&self, coalesce_ns: u64, open: usize) {
        let now = self.now();
        let until = self
            .next_wake(open)
            .unwrap_or(u64::MAX)
            .min(now + coalesce_ns);
        if until > now + MIN_COALESCE_NS {
            std::thread::sleep(Duration::from_nanos(until - now));
        }
    }
}
