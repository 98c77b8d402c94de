//! `mock --http-workers N`: thread-per-connection semantics, as llama.cpp's llama-server and
//! other servers with a fixed pool of HTTP worker threads behave. A connection holds a worker
//! from the moment it is taken from the accept queue until it closes or has been idle for the
//! keep-alive timeout; connections beyond the pool wait, unread, for a worker to free up.
//! This is what makes idle connections a client holds open starve its own requests.

use std::collections::VecDeque;

/// The pool of workers: which connections hold one, which wait.
pub struct Workers {
    limit: usize,
    /// (slot, generation) of the connections holding a worker.
    attached: Vec<(usize, u32)>,
    /// Connections accepted while every worker was busy, oldest first.
    parked: VecDeque<(usize, u32)>,
}

impl Workers {
    pub fn new(limit: usize) -> Workers {
        Workers {
            limit: limit.max(1),
            attached: Vec::new(),
            parked: VecDeque::new(),
        }
    }

    /// A new connection: true when it gets a worker now, false when it waits.
    pub fn admit(&mut self, conn: (usize, u32)) -> bool {
        if self.attached.len() < self.limit {
            self.attached.push(conn);
            true
        } else {
            self.parked.push_back(conn);
            false
        }
    }

    /// A connection closed. When it held a worker, the worker takes the oldest waiting
    /// connection that `alive` still knows, which is returned.
    pub fn release(
        &mut self,
        conn: (usize, u32),
        alive: impl Fn((usize, u32)) -> bool,
    ) -> Option<(usize, u32)> {
        let Some(at) = self.attached.iter().position(|c| *c == conn) else {
            self.parked.retain(|c| *c != conn);
            return None;
        };
        self.attached.swap_remove(at);
        while let Some(next) = self.parked.pop_front() {
            if alive(next) {
                self.attached.push(next);
                return Some(next);
            }
        }
        None
    }

    /// The connections holding a worker.
    pub fn attached(&self) -> &[(usize, u32)] {
        &self.attached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_beyond_the_pool_wait_for_a_worker_in_order() {
        let mut w = Workers::new(2);
        assert!(w.admit((0, 0)) && w.admit((1, 0)));
        assert!(!w.admit((2, 0)) && !w.admit((3, 0)) && !w.admit((4, 0)));
        // A waiting connection that closed is skipped; the oldest live one is taken.
        assert_eq!(w.release((2, 0), |_| true), None, "it held no worker");
        assert_eq!(w.release((0, 0), |c| c != (3, 0)), Some((4, 0)));
        assert_eq!(w.attached(), &[(1, 0), (4, 0)]);
        assert_eq!(w.release((1, 0), |_| true), None, "nobody waits");
    }
}
