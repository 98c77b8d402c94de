//! The deadline side of the sender loop: taking requests from the channel into the heap,
//! sending those due, and arming the timer for the next one.

use std::time::Duration;

use crossbeam_channel::TryRecvError;

use crate::pipeline::PreparedRequest;

use super::{SenderLoop, CONNECT_AHEAD_NS, MIN_COALESCE_NS};

impl SenderLoop {
    /// `--read-coalesce-us`: after a round of socket events, lets the next tokens gather for a
    /// moment (never past the next deadline) so that one poll and one read collect several:
    /// fewer wake-ups per token, each token timestamped at most that much late.
    pub(super) fn coalesce_reads(&self) {
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

    /// Moves prepared requests from the channel into the deadline heap.
    pub(super) fn refill(&mut self) {
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
                    // A turn parked for its parent is not due yet; one released now is due
                    // at its parent's end plus its wait, which admit sets; a first turn
                    // that must wait for a session place is due when one frees.
                    if let Some(req) = self.conversations.admit(req) {
                        if !self.active.would_wait(&req) {
                            self.note_lateness(&req);
                        }
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

    /// Counts a request that reached this sender after its send time. With requests still
    /// behind it in the channel it was built in time and waited there, the senders' heaps full
    /// of earlier ones (a burst larger than their lookahead): `queued_late`. With none, the
    /// producers had only just built it: `arrived_late`, the producers behind. Before the
    /// start (t0 not set yet) nothing is late; a closed loop has no send times to keep.
    fn note_lateness(&mut self, req: &PreparedRequest) {
        let due = self.t0_ns + req.due_ns + super::LATE_ARRIVAL_NS;
        let timed = self.t0_ns > 0 && self.in_flight_cap.is_none();
        if !timed || self.clock.now_ns() <= due {
            return;
        }
        if self.rx.backlog() > 0 {
            self.late.queued += 1;
            return;
        }
        self.late.arrived += 1;
        self.progress
            .arrived_late
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends every request that is due, spinning up to a deadline within the spin window; but
    /// once one is sent, a later deadline is left to the next round: under a dense schedule
    /// (deadlines closer than the spin window) spinning from send to send would leave the
    /// sockets unread, and every token's time late, for as long as the schedule stays dense.
    pub(super) fn send_due(&mut self) {
        let mut sent = false;
        loop {
            if self.slots_full() {
                return;
            }
            let Some(top) = self.heap.peek() else { return };
            let due = self.t0_ns + top.due_ns;
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
                req.queue_ns = Some(now.saturating_sub(req.due_ns));
                req.due_ns = now;
            }
            self.dispatch(req);
        }
    }

    /// Closed loop: every slot has a request in flight.
    pub(super) fn slots_full(&self) -> bool {
        self.in_flight_cap
            .is_some_and(|cap| self.open_requests >= cap)
    }

    /// When the loop must be awake for the next deadline: the start of its spin window
    /// (none while a closed loop's slots are full: a record's end frees one).
    pub(super) fn next_wake(&self) -> Option<u64> {
        if self.slots_full() {
            return None;
        }
        let top = self.heap.peek()?;
        Some((self.t0_ns + top.due_ns).saturating_sub(self.cfg.spin_ns))
    }

    pub(super) fn arm_timer(&mut self) {
        let Some(wake) = self.next_wake() else { return };
        if self.armed_for != Some(wake) {
            let now = self.clock.now_ns();
            if self.timer.arm_in(wake.saturating_sub(now)).is_ok() {
                self.armed_for = Some(wake);
            }
        }
    }

    /// Counts, per endpoint, the requests due soon (the pools are topped up below).
    pub(super) fn count_upcoming(&mut self, now: u64) {
        for pool in &mut self.pools {
            pool.upcoming = 0;
        }
        let horizon = now + CONNECT_AHEAD_NS;
        for req in self.heap.iter() {
            if self.t0_ns + req.due_ns <= horizon {
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
}
