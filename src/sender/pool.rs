//! One endpoint's connections as a sender sees them: idle ones, ones being opened, requests
//! waiting for one, and the backoff after a failed connect.
//!
//! Which idle connection a request takes matters to servers with a fixed pool of HTTP
//! workers (llama.cpp's llama-server), where a worker holds one keep-alive connection until
//! it closes or idles out and later connections wait unread in the accept queue: the most
//! recently used connection is surely being served, and among unused ones the oldest was the
//! first the server accepted. Idle connections are closed before a server would time them
//! out ([`MAX_IDLE_NS`]), so none holds a worker for nothing and none races the server's close.

use std::collections::VecDeque;

use super::exchange::Exchange;
use crate::record::ErrorKind;

/// An idle connection is closed after this long: below the keep-alive timeout of common
/// servers (5 s for llama.cpp, uvicorn and Node), so it is the client that closes it.
pub const MAX_IDLE_NS: u64 = 4_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Idle {
    slot: usize,
    /// Opening order: the order a server accepted the connections in.
    seq: u64,
    since: u64,
}

/// Per-endpoint pool state.
#[derive(Default)]
pub struct Pool {
    /// Never-used connections first, newest to oldest, then used ones, least to most
    /// recently used: the back is the one to take.
    idle: VecDeque<Idle>,
    /// How many of `idle` were never used (they lead the queue).
    fresh: usize,
    pub connecting: usize,
    /// Due requests waiting for a connection.
    pub waiting: VecDeque<Exchange>,
    /// After a failed connect, no new connection before this time.
    pub down_until: u64,
    /// Why the last connect failed: what requests due while the endpoint is down are told.
    pub down_because: Option<(ErrorKind, String)>,
    pub backoff_ns: u64,
    first_backoff_ns: u64,
    /// The client ran out of file descriptors: no new connection is asked before this time
    /// (the endpoint is not blamed), and why, for the requests that then time out waiting.
    pub open_paused_until: u64,
    pub out_of_descriptors: Option<String>,
    /// Requests due soon: connections are opened for them before their deadlines, so a
    /// rising load does not wait for connects.
    pub upcoming: usize,
    /// A probe of the endpoint is under way (see [`super::connector`]).
    pub probing: bool,
    /// When the last probe was asked: at most one each `--stall-timeout`.
    pub probed_ns: Option<u64>,
}

impl Pool {
    pub fn new(backoff_ns: u64) -> Pool {
        Pool {
            backoff_ns,
            first_backoff_ns: backoff_ns,
            ..Pool::default()
        }
    }

    /// A connection came up: the endpoint is reachable again.
    pub fn connected(&mut self) {
        self.connecting -= 1;
        self.backoff_ns = self.first_backoff_ns;
        self.down_until = 0;
        self.down_because = None;
        self.out_of_descriptors = None;
    }

    pub fn idle_len(&self) -> usize {
        self.idle.len()
    }

    /// The idle connection a request should take at `now`: the most recently used one, else
    /// the oldest never used; never one idle past [`MAX_IDLE_NS`] (the periodic check may not
    /// have closed it yet, and a server may close it under the request): those go to `stale`,
    /// to be closed.
    pub fn take_idle(&mut self, now: u64, stale: &mut Vec<usize>) -> Option<usize> {
        loop {
            let idle = self.idle.pop_back()?;
            if self.idle.len() < self.fresh {
                self.fresh -= 1; // it was the oldest fresh one: no used one was left
            }
            if now.saturating_sub(idle.since) <= MAX_IDLE_NS {
                return Some(idle.slot);
            }
            stale.push(idle.slot);
        }
    }

    /// A connection is idle: `used` once it has carried a request, `seq` its opening order.
    pub fn put_idle(&mut self, slot: usize, seq: u64, used: bool, now: u64) {
        let idle = Idle {
            slot,
            seq,
            since: now,
        };
        if used {
            self.idle.push_back(idle);
        } else {
            // Fresh ones are kept newest first; connections come up nearly in order, so the
            // place is found within a step or two from the front.
            let at = (0..self.fresh)
                .find(|&i| self.idle[i].seq < seq)
                .unwrap_or(self.fresh);
            self.idle.insert(at, idle);
            self.fresh += 1;
        }
    }

    /// The waiting request a connection takes: the first in line on a fresh connection; on
    /// a reused one, the first that is not being resent (those go on fresh ones only).
    pub fn next_waiting(&mut self, fresh: bool) -> Option<Exchange> {
        let at = match fresh {
            true => 0,
            false => self.waiting.iter().position(|ex| ex.resent_ns.is_none())?,
        };
        self.waiting.remove(at)
    }

    /// The connection in `slot` closed (it may have been idle).
    pub fn forget(&mut self, slot: usize) {
        if let Some(at) = self.idle.iter().position(|i| i.slot == slot) {
            self.idle.remove(at);
            if at < self.fresh {
                self.fresh -= 1;
            }
        }
    }

    /// Takes out the idle connections that have waited longer than [`MAX_IDLE_NS`] (to be
    /// closed), in one pass: closing thousands at once must not scan the queue for each.
    pub fn take_expired(&mut self, now: u64) -> Vec<usize> {
        let mut expired = Vec::new();
        let mut fresh_left = self.fresh;
        let mut fresh = self.fresh;
        self.idle.retain(|i| {
            let was_fresh = fresh_left > 0;
            fresh_left = fresh_left.saturating_sub(1);
            let keep = now.saturating_sub(i.since) <= MAX_IDLE_NS;
            if !keep {
                expired.push(i.slot);
                fresh -= usize::from(was_fresh);
            }
            keep
        });
        self.fresh = fresh;
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_the_last_used_connection_then_the_oldest_unused() {
        let mut pool = Pool::new(1);
        // Opened 1, 2, 3, but came up 2, 1, 3.
        pool.put_idle(20, 2, false, 0);
        pool.put_idle(10, 1, false, 0);
        pool.put_idle(30, 3, false, 0);
        assert_eq!(
            pool.take_idle(8, &mut Vec::new()),
            Some(10),
            "the first the server accepted"
        );
        pool.put_idle(10, 1, true, 5);
        assert_eq!(
            pool.take_idle(8, &mut Vec::new()),
            Some(10),
            "the connection just used"
        );
        assert_eq!(pool.take_idle(8, &mut Vec::new()), Some(20));
        pool.put_idle(10, 1, true, 6);
        pool.put_idle(20, 2, true, 7);
        assert_eq!(
            pool.take_idle(8, &mut Vec::new()),
            Some(20),
            "most recently used first"
        );
        assert_eq!(pool.take_idle(8, &mut Vec::new()), Some(10));
        assert_eq!(pool.take_idle(8, &mut Vec::new()), Some(30));
        assert_eq!(pool.take_idle(8, &mut Vec::new()), None);
        assert_eq!(pool.fresh, 0);
    }

    #[test]
    fn idle_connections_expire_before_a_server_would_close_them() {
        let mut pool = Pool::new(1);
        pool.put_idle(1, 1, false, 0);
        pool.put_idle(3, 3, false, MAX_IDLE_NS / 2);
        pool.put_idle(2, 2, true, MAX_IDLE_NS / 2);
        assert!(pool.take_expired(MAX_IDLE_NS).is_empty());
        assert_eq!(pool.take_expired(MAX_IDLE_NS + 1), vec![1]);
        assert_eq!((pool.idle_len(), pool.fresh), (2, 1));
        pool.forget(3);
        assert_eq!((pool.idle_len(), pool.fresh), (1, 0));
        assert_eq!(pool.take_expired(2 * MAX_IDLE_NS), vec![2]);
        assert_eq!(pool.take_idle(8, &mut Vec::new()), None);
    }

    #[test]
    fn a_request_never_takes_a_connection_idle_past_its_safe_age() {
        // Between two periodic checks: the most recently used is past the age (so are the
        // used before it), a fresh one opened later is not.
        let mut pool = Pool::new(1);
        pool.put_idle(1, 1, false, MAX_IDLE_NS / 2);
        pool.put_idle(2, 2, true, 0);
        pool.put_idle(3, 3, true, 10);
        let mut stale = Vec::new();
        assert_eq!(pool.take_idle(MAX_IDLE_NS + 11, &mut stale), Some(1));
        assert_eq!(stale, vec![3, 2], "to be closed");
        assert_eq!((pool.idle_len(), pool.fresh), (0, 0));
        pool.put_idle(4, 4, true, 0);
        stale.clear();
        assert_eq!(pool.take_idle(MAX_IDLE_NS + 1, &mut stale), None);
        assert_eq!(stale, vec![4]);
    }
}
