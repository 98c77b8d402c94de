//! One connection's request and response: writing it, reading and parsing what comes back,
//! completing or failing the exchange, closing the socket.

use std::io;
use std::sync::atomic::Ordering;

use mio::Token;

use crate::http::response::Step;
use crate::record::ErrorKind;

use super::conn::Established;
use super::exchange::Exchange;
use super::exchange::Feed;
use super::{SenderLoop, ACK_MODE_REFRESH_NS, FIRST_WRITE};

impl SenderLoop {
    pub(super) fn start(&mut self, slot: usize, mut ex: Exchange) {
        if ex.waiting_since.is_some() {
            ex.connection_found(self.clock.now_ns());
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
        if self.write_some(slot, FIRST_WRITE) {
            let generation = self.slots[slot].generation;
            self.unfinished_writes.push((slot, generation));
        }
    }

    /// Writes up to `budget` more bytes of the request on `slot` (less if the socket is full:
    /// its WRITABLE event resumes). True when the budget ran out with bytes still to write.
    pub(super) fn write_some(&mut self, slot: usize, budget: usize) -> bool {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let head = &self.cfg.targets[conn.target].request_head;
        let written = conn.write_request(head, budget, &self.clock);
        if written.started {
            self.progress.sent.fetch_add(1, Ordering::Relaxed);
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

    /// Writes the rest of the requests started by `send_due`.
    pub(super) fn finish_writes(&mut self) {
        while let Some((slot, generation)) = self.unfinished_writes.pop() {
            if self.slots[slot].generation == generation && self.slots[slot].conn.is_some() {
                self.write_some(slot, usize::MAX);
            }
        }
    }

    pub(super) fn on_socket_event(&mut self, token: Token, read_closed: bool) {
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
            match pool.next_waiting(true) {
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
    pub(super) fn read_all(&mut self, slot: usize, until_eof: bool) {
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
            if ex.resendable {
                let head = self.cfg.targets[conn.target].request_head.len();
                if let Some(bytes) = ex.answer_started(head) {
                    self.cfg.buffers.give(bytes);
                }
            }
            ex.last_byte_ns = Some(now);
            let mut feed = Feed {
                ex,
                sse: &mut conn.sse,
                body: &mut conn.body,
                scanner: &self.scanners[conn.target],
                gaps: &mut self.gaps,
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

    pub(super) fn on_eof(&mut self, slot: usize, now: u64) {
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
    pub(super) fn complete(&mut self, slot: usize, now: u64, reusable: bool) {
        let conn = self.slots[slot].conn.as_mut().expect("live slot");
        let mut ex = conn.exchange.take().expect("exchange in flight");
        ex.finish_response(&conn.body, &self.scanners[conn.target], now);
        let target = conn.target;
        self.in_flight -= 1;
        self.emit(ex, target);
        if !reusable {
            self.close(slot);
            self.top_up(target);
            return;
        }
        match self.pools[target].next_waiting(false) {
            Some(next) => self.start(slot, next),
            None => {
                let conn = self.slots[slot].conn.as_mut().expect("live slot");
                conn.idle = true;
                self.pools[target].put_idle(slot, conn.seq, true, now);
            }
        }
    }

    pub(super) fn fail_and_close(&mut self, slot: usize, kind: ErrorKind, message: String) {
        let Some(conn) = self.slots[slot].conn.as_mut() else {
            return;
        };
        let target = conn.target;
        if let Some(mut ex) = conn.exchange.take() {
            if kind == ErrorKind::Reset && ex.resendable && self.cancel_at.is_none() {
                // A keep-alive connection the server closed as the request went out (it
                // read none of it): the request goes again, once, on a fresh connection
                // (not once the run is stopping: no connection is opened then).
                self.in_flight -= 1;
                self.close(slot);
                ex.resend(self.clock.now_ns());
                self.pools[target].waiting.push_front(ex);
                self.pools[target].connecting += 1;
                self.connector.request(target);
                return;
            }
            ex.fail(kind, message);
            ex.end_ns = Some(self.clock.now_ns());
            self.in_flight -= 1;
            self.emit(ex, target);
        }
        self.close(slot);
        self.top_up(target);
    }

    /// Closes an idle connection its pool already gave up (taken out of the idle queue).
    pub(super) fn close_taken_idle(&mut self, slot: usize) {
        if let Some(conn) = self.slots[slot].conn.as_mut() {
            conn.idle = false; // already out of the queue
        }
        self.close(slot);
    }

    pub(super) fn close(&mut self, slot: usize) {
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

    /// The slots with a request in flight, and that request.
    pub(super) fn in_flight_exchanges(&self) -> impl Iterator<Item = (usize, &Exchange)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| Some((slot, s.conn.as_ref()?.exchange.as_ref()?)))
    }
}
