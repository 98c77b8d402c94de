//! The run's start: every sender first opens the connections the trace's opening needs, then
//! all of them begin at one instant, the `t0` their deadlines count from.
//!
//! A trace that opens with a burst (10,000 streams in its first second, say) would otherwise
//! open with connect delays: the handshakes, not the server, would set the first requests'
//! send times.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Debug)]
pub struct StartGate {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug)]
struct State {
    /// Per sender: the connections it had open when it reported ready.
    ready: Vec<Option<usize>>,
    t0_ns: Option<u64>,
}

impl StartGate {
    pub fn new(senders: usize) -> StartGate {
        StartGate {
            state: Mutex::new(State {
                ready: vec![None; senders],
                t0_ns: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// Sender `id` has its connections open (`open` of them); returns the start once set.
    pub fn ready_then_wait(&self, id: usize, open: usize) -> u64 {
        let mut s = self.state.lock().expect("start gate");
        s.ready[id] = Some(open);
        self.changed.notify_all();
        loop {
            if let Some(t0) = s.t0_ns {
                return t0;
            }
            s = self.changed.wait(s).expect("start gate");
        }
    }

    /// Waits until every sender is ready or `ended(id)` (its thread is gone), or until
    /// `interrupted()`. Returns the connections the ready senders have open.
    pub fn wait_ready(
        &self,
        ended: impl Fn(usize) -> bool,
        interrupted: impl Fn() -> bool,
    ) -> usize {
        let mut s = self.state.lock().expect("start gate");
        loop {
            let all = s
                .ready
                .iter()
                .enumerate()
                .all(|(id, r)| r.is_some() || ended(id));
            if all || interrupted() {
                return s.ready.iter().flatten().sum();
            }
            // Woken by each ready sender; the timeout notices ended threads and signals.
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(20))
                .expect("start gate")
                .0;
        }
    }

    /// Sets the start and releases the senders.
    pub fn start(&self, t0_ns: u64) {
        self.state.lock().expect("start gate").t0_ns = Some(t0_ns);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn senders_wait_for_the_start_and_the_start_waits_for_ready_senders() {
        let gate = Arc::new(StartGate::new(3));
        let waiting: Vec<_> = [5, 7]
            .into_iter()
            .enumerate()
            .map(|(id, open)| {
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || gate.ready_then_wait(id, open))
            })
            .collect();
        // Sender 2 never reports (its thread ended): it must not hold the start.
        let open = gate.wait_ready(|id| id == 2, || false);
        assert_eq!(open, 12);
        assert!(
            waiting.iter().all(|h| !h.is_finished()),
            "no sender starts before t0"
        );
        gate.start(42);
        for h in waiting {
            assert_eq!(h.join().unwrap(), 42);
        }
    }

    #[test]
    fn an_interruption_ends_the_wait() {
        let gate = StartGate::new(1);
        assert_eq!(gate.wait_ready(|_| false, || true), 0);
    }
}
