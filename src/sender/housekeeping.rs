//! Housekeeping every few milliseconds: timeouts, stalled and silent endpoints, idle
//! connections, and requests that waited too long for a connection.

use crate::record::ErrorKind;

use super::{SenderLoop, HOUSEKEEPING_NS, IDLE_CHECK_NS};

impl SenderLoop {
    /// Request timeouts, and reconnecting endpoints after their backoff.
    pub(super) fn housekeeping(&mut self) {
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
            let since = ex.sent_ns.unwrap_or(t0 + ex.req.due_ns);
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
                    self.close_taken_idle(slot);
                }
            }
        }
        for target in 0..self.pools.len() {
            while let Some(ex) = self.pools[target].waiting.front() {
                if now.saturating_sub(t0 + ex.req.due_ns) <= timeout {
                    break;
                }
                let mut ex = self.pools[target].waiting.pop_front().expect("front");
                let mut why =
                    "no connection became available within the request timeout".to_string();
                if let Some(descriptors) = &self.pools[target].out_of_descriptors {
                    why = format!("{why}: {descriptors}");
                }
                ex.fail(ErrorKind::Timeout, why);
                self.emit(ex, target);
            }
            self.top_up(target);
        }
    }
}
