//! One connection's I/O for the router: writing a request, reading what comes back into the
//! connection's [`super::wire::Wire`] and acting on its outcome (complete, reuse or close,
//! fail, resend), closing the socket.

use std::io;
use std::sync::atomic::Ordering;

use mio::Token;

use crate::record::ErrorKind;

use super::super::conn::Established;
use super::super::deadlines::Deadlines;
use super::super::exchange::Exchange;
use super::super::wire::{Ending, Outcome, Reading};
use super::super::{ACK_MODE_REFRESH_NS, FIRST_WRITE};
use super::Router;

impl Router {
    /// Starts `ex` on the idle connection in `slot`.
    pub(super) fn start(&mut self, slot: usize, mut ex: Exchange, soon: &Deadlines) {
        if ex.waiting_since.is_some() {
            ex.connection_found(soon.now());
        }
        let conn = self.slots[slot]
            .conn
            .as_mut()
            .expect("idle slot has a connection");
        ex.resendable = conn.used && ex.resent_ns.is_none();
        conn.begin(ex);
        self.in_flight += 1;
        // Only the start now: the rest waits until every request due at this moment has
        // started, so a burst of large prompts does not delay the last one's first byte.
        if self.write_some(slot, FIRST_WRITE, soon) {
            let generation = self.slots[slot].generation;
            self.unfinished_writes.push((slot, generation));
        }
    }

    /// Writes up to `budget` more bytes of the request on `slot` (less if the socket is full:
    /// its WRITABLE event resumes). True when the budget ran out with bytes still to write.
    fn write_some(&mut self, slot: usize, budget: usize, soon: &Deadlines) -> bool {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let head = &self.cfg.targets[conn.target].request_head;
        let written = conn.write_request(head, budget, soon.clock());
        if written.started {
            self.progress.sent.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(buffer) = written.spent {
            self.cfg.buffers.give(buffer);
        }
        if let Some((kind, message)) = written.failed {
            self.fail_and_close(slot, kind, message, soon);
            return false;
        }
        written.out_of_budget
    }

    /// Writes the rest of the requests started by the last sends.
    pub fn finish_writes(&mut self, soon: &Deadlines) {
        while let Some((slot, generation)) = self.unfinished_writes.pop() {
            if self.slots[slot].generation == generation && self.slots[slot].conn.is_some() {
                self.write_some(slot, usize::MAX, soon);
            }
        }
    }

    pub fn on_socket_event(&mut self, token: Token, read_closed: bool, soon: &Deadlines) {
        let slot = token.0 & 0xffff_ffff;
        let generation = (token.0 >> 32) as u32;
        match self.slots.get(slot) {
            Some(s) if s.generation == generation && s.conn.is_some() => {}
            _ => return, // stale event for a closed connection
        }
        let conn = self.slots[slot].conn.as_mut().expect("checked");
        if !conn.connected {
            self.on_connect_event(slot, soon);
            return;
        }
        if let Err(e) = conn.stream.flush() {
            let kind = conn.error_kind(&e);
            self.fail_and_close(slot, kind, format!("write: {e}"), soon);
            return;
        }
        self.write_some(slot, usize::MAX, soon);
        self.read_all(slot, read_closed, soon);
    }

    /// An event on a connection being opened: it is established (and takes a waiting
    /// request, or waits idle), still pending, or failed (its endpoint backs off).
    fn on_connect_event(&mut self, slot: usize, soon: &Deadlines) {
        let conn = self.slots[slot].conn.as_mut().expect("checked");
        let target = conn.target;
        match conn.establish() {
            Established::Pending => return,
            Established::Failed(kind, e) => {
                self.close(slot);
                self.connect_failed(target, kind, &e, soon.now());
                return;
            }
            Established::Ready => {}
        }
        let seq = conn.seq;
        let pool = &mut self.pools[target];
        pool.connected();
        match pool.next_waiting(true) {
            Some(ex) => self.start(slot, ex, soon),
            None => {
                pool.put_idle(slot, seq, false, soon.now());
                conn.idle = true;
            }
        }
    }

    /// Reads what the socket holds, feeding the connection's wire, and acts on its outcome.
    ///
    /// A read shorter than the buffer took everything queued, and data that arrives later
    /// raises a new edge-triggered event, so the loop stops there instead of paying for one
    /// more read(2) that would only say "would block" (a third of all reads when tokens arrive
    /// one segment at a time). The exception is a pending end of stream (`until_eof`): it
    /// raised its event already, so it must be read now.
    fn read_all(&mut self, slot: usize, until_eof: bool, soon: &Deadlines) {
        let mut buf = std::mem::take(&mut self.reader.buf);
        while let Some(conn) = self.slots[slot].conn.as_mut() {
            let n = match conn.stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let kind = conn.error_kind(&e);
                    self.fail_and_close(slot, kind, format!("read: {e}"), soon);
                    break;
                }
            };
            let drained = n < buf.len() && conn.stream.short_read_drains();
            let now = soon.now();
            self.reader.reads += 1;
            if now.saturating_sub(conn.acks_delayed_ns) >= ACK_MODE_REFRESH_NS {
                conn.delay_acks(now);
            }
            let outcome = if n == 0 {
                conn.wire.on_eof(now, &self.reader.scanners[conn.target])
            } else {
                let mut reading = Reading {
                    scanner: &self.reader.scanners[conn.target],
                    gaps: &mut self.reader.gaps,
                    stream: self.cfg.stream,
                    head_len: self.cfg.targets[conn.target].request_head.len(),
                };
                let (outcome, spent) = conn.wire.on_readable(now, &buf[..n], &mut reading);
                if let Some(bytes) = spent {
                    self.cfg.buffers.give(bytes);
                }
                outcome
            };
            self.act(slot, outcome, now, soon);
            if n == 0 || (drained && !until_eof) {
                break;
            }
        }
        self.reader.buf = buf;
    }

    /// Does what the wire decided for the connection in `slot`.
    fn act(&mut self, slot: usize, outcome: Outcome, now: u64, soon: &Deadlines) {
        match outcome {
            Outcome::NeedMore => {}
            Outcome::Stray => self.close(slot),
            Outcome::Fail(kind, message) => self.fail_and_close(slot, kind, message, soon),
            Outcome::Complete { reusable } => self.complete(slot, now, reusable, soon),
        }
    }

    /// The response is complete: it ends; the connection is kept if it can be reused.
    fn complete(&mut self, slot: usize, now: u64, reusable: bool, soon: &Deadlines) {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let ex = conn.wire.take_exchange().expect("exchange in flight");
        let target = conn.target;
        self.in_flight -= 1;
        self.end(ex, target, now);
        if !reusable {
            self.close(slot);
            self.top_up(target, soon);
            return;
        }
        match self.pools[target].next_waiting(false) {
            Some(next) => self.start(slot, next, soon),
            None => {
                let conn = self.slots[slot].conn.as_mut().expect("live slot");
                conn.idle = true;
                self.pools[target].put_idle(slot, conn.seq, true, now);
            }
        }
    }

    /// Fails the request on `slot` (or sends it again, see [`super::super::wire::Wire::fail`]) and
    /// closes the connection.
    pub(super) fn fail_and_close(
        &mut self,
        slot: usize,
        kind: ErrorKind,
        message: String,
        soon: &Deadlines,
    ) {
        let Some(conn) = self.slots[slot].conn.as_mut() else {
            return;
        };
        let target = conn.target;
        let now = soon.now();
        let ending = conn.wire.fail(kind, message, now, self.stopping);
        if ending.is_some() {
            self.in_flight -= 1;
        }
        self.close(slot);
        match ending {
            Some(Ending::Resend(ex)) => {
                self.pools[target].waiting.push_front(ex);
                self.ask_connection(target);
            }
            Some(Ending::Failed(ex)) => {
                self.end(ex, target, now);
                self.top_up(target, soon);
            }
            None => self.top_up(target, soon),
        }
    }
}
