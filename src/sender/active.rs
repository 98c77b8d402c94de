//! Sessions as a whole on one sender: `--max-active-sessions` places, and the bound of a
//! session run (`--duration`, `--time-in-secs`).
//!
//! All turns of a session come to the same sender, so it counts each session's turns that
//! are here and not yet recorded; a session ends when that count falls to 0 after its last
//! turn ([`crate::session::SessionLink::last`]) came, or once no more turns can come. The
//! places are shared by all senders (one atomic count): a first turn due while every place
//! is taken waits here, first come first served, and goes when any sender frees a place
//! (this one at once, another's within [`HELD_RECHECK_NS`]).
//!
//! The bound: no turn is sent after it. A released turn (its parent's end plus the think
//! time) or a held first turn due after the bound is dropped, unrecorded like every request
//! past a cut, and so are the turns that would follow it; its session counts as cut.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::pipeline::PreparedRequest;

/// How soon a sender with held first turns looks again for a place another sender freed.
pub const HELD_RECHECK_NS: u64 = 500_000;

/// `--max-active-sessions`: the places, shared by every sender.
#[derive(Debug)]
pub struct SessionCap {
    limit: usize,
    taken: AtomicUsize,
}

impl SessionCap {
    pub fn new(limit: usize) -> SessionCap {
        SessionCap {
            limit,
            taken: AtomicUsize::new(0),
        }
    }

    fn try_take(&self) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn full(&self) -> bool {
        self.taken.load(Ordering::Acquire) >= self.limit
    }

    fn give(&self) {
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Open {
    /// Its turns on this sender not yet recorded (parked, due, or in flight).
    turns: u32,
    /// Its last turn has come.
    last_seen: bool,
    /// It holds a place.
    place: bool,
}

#[derive(Default)]
pub struct ActiveSessions {
    cap: Option<Arc<SessionCap>>,
    /// No turn is sent after this (run ns).
    bound_ns: Option<u64>,
    open: HashMap<String, Open>,
    /// First turns due while every place was taken, in the order they came due.
    held: VecDeque<PreparedRequest>,
    /// No more turns will come: a session with none left here has ended.
    no_more: bool,
}

impl ActiveSessions {
    pub fn new(cap: Option<Arc<SessionCap>>, bound_ns: Option<u64>) -> ActiveSessions {
        ActiveSessions {
            cap,
            bound_ns,
            ..ActiveSessions::default()
        }
    }

    fn root(req: &PreparedRequest) -> Option<&str> {
        req.session.as_ref().map(|t| t.link.root.as_str())
    }

    /// A turn taken from the channel (counted only where there are places to free).
    pub fn arrived(&mut self, req: &PreparedRequest) {
        let (Some(_), Some(turn)) = (&self.cap, &req.session) else {
            return;
        };
        let root = &turn.link.root;
        if !self.open.contains_key(root) {
            self.open.insert(root.clone(), Open::default());
        }
        let open = self.open.get_mut(root).expect("inserted above");
        open.turns += 1;
        open.last_seen |= turn.link.last;
    }

    /// A first turn that would wait for a place now (every place taken, or others waiting
    /// already): it is not due before one frees, so it cannot reach this sender late.
    pub fn would_wait(&self, req: &PreparedRequest) -> bool {
        let Some(cap) = &self.cap else {
            return false;
        };
        let placed = Self::root(req)
            .and_then(|r| self.open.get(r))
            .is_none_or(|o| o.place);
        !placed && (!self.held.is_empty() || cap.full())
    }

    /// A turn past the bound: it is not sent.
    pub fn past_bound(&self, req: &PreparedRequest) -> bool {
        req.session.is_some() && self.bound_ns.is_some_and(|b| req.due_ns > b)
    }

    /// A due turn: back to be sent now, or held (its session needs a place and none is
    /// free, or others wait for one already).
    pub fn due(&mut self, req: PreparedRequest) -> Option<PreparedRequest> {
        let Some(cap) = &self.cap else {
            return Some(req);
        };
        let Some(open) = Self::root(&req).and_then(|r| self.open.get_mut(r)) else {
            return Some(req);
        };
        if open.place {
            return Some(req);
        }
        if self.held.is_empty() && cap.try_take() {
            open.place = true;
            return Some(req);
        }
        self.held.push_back(req);
        None
    }

    /// Held first turns that may go now (`now` in run ns): each takes a place, records its
    /// wait, and is due now.
    pub fn take_held(&mut self, now: u64) -> Vec<PreparedRequest> {
        let mut out = Vec::new();
        let Some(cap) = &self.cap else {
            return out;
        };
        while !self.held.is_empty() && cap.try_take() {
            let mut req = self.held.pop_front().expect("not empty");
            if let Some(open) = Self::root(&req).and_then(|r| self.open.get_mut(r)) {
                open.place = true;
            }
            if let Some(turn) = req.session.as_mut() {
                turn.session_wait_ns = Some(now.saturating_sub(req.due_ns));
            }
            req.due_ns = req.due_ns.max(now);
            out.push(req);
        }
        out
    }

    /// Held first turns that would start their session after the bound: dropped.
    pub fn drop_held_past_bound(&mut self, now: u64) -> Vec<PreparedRequest> {
        match self.bound_ns {
            Some(b) if now > b => self.clear_held(),
            _ => Vec::new(),
        }
    }

    /// A stop: held first turns are dropped unrecorded, like requests not yet due.
    pub fn clear_held(&mut self) -> Vec<PreparedRequest> {
        self.held.drain(..).collect()
    }

    /// First turns waiting for a place.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// A turn of `root` is recorded, or dropped: at its session's end the place is freed.
    pub fn gone(&mut self, root: &str) {
        let Some(open) = self.open.get_mut(root) else {
            return;
        };
        open.turns = open.turns.saturating_sub(1);
        if open.turns == 0 && (open.last_seen || self.no_more) {
            self.end(root);
        }
    }

    fn end(&mut self, root: &str) {
        if let Some(open) = self.open.remove(root) {
            if let (true, Some(cap)) = (open.place, &self.cap) {
                cap.give();
            }
        }
    }

    /// No more turns will come: sessions with none left here end (their last turns were
    /// cut from the schedule).
    pub fn no_more_turns(&mut self) {
        self.no_more = true;
        let done: Vec<String> = self
            .open
            .iter()
            .filter(|(_, o)| o.turns == 0)
            .map(|(root, _)| root.clone())
            .collect();
        for root in done {
            self.end(&root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionLink;

    fn turn(root: &str, at: u64, last: bool) -> PreparedRequest {
        PreparedRequest::turn_for_test(
            0,
            at,
            SessionLink {
                root: root.into(),
                turn: 0,
                parent_index: None,
                joins: Vec::new(),
                branch: None,
                heirs: 1,
                fresh: false,
                think_ns: 0,
                planned_prefix: None,
                keeps_parent: true,
                last,
                at_own_time: false,
            },
        )
    }

    #[test]
    fn places_are_shared_and_freed_at_the_last_turn() {
        let cap = Arc::new(SessionCap::new(1));
        let mut a = ActiveSessions::new(Some(Arc::clone(&cap)), None);
        let mut b = ActiveSessions::new(Some(Arc::clone(&cap)), None);
        let (first, last) = (turn("s", 0, false), turn("s", 0, true));
        a.arrived(&first);
        a.arrived(&last);
        assert!(a.due(first).is_some(), "a free place");
        let other = turn("t", 10, true);
        b.arrived(&other);
        assert!(b.due(other).is_none(), "held on another sender");
        assert!(b.holding() && b.take_held(20).is_empty());
        assert!(
            a.due(last).is_some(),
            "a running session's turn is never held"
        );
        a.gone("s");
        assert!(b.take_held(30).is_empty(), "one turn of s still open");
        a.gone("s");
        let went = b.take_held(40);
        assert_eq!(went.len(), 1);
        assert_eq!(went[0].due_ns, 40);
        assert_eq!(went[0].session.as_ref().unwrap().session_wait_ns, Some(30));
        // t ends at its last turn; u's last turn was cut from the schedule: u ends when no
        // more turns can come.
        b.gone("t");
        let u = turn("u", 50, false);
        b.arrived(&u);
        assert!(b.due(u).is_some(), "t's place was freed");
        b.gone("u");
        assert!(
            !cap.try_take(),
            "u holds the place: its last turn may still come"
        );
        b.no_more_turns();
        assert!(cap.try_take());
    }

    #[test]
    fn the_bound_drops_late_turns_and_late_sessions() {
        let cap = Arc::new(SessionCap::new(1));
        let mut a = ActiveSessions::new(Some(cap), Some(100));
        assert!(!a.past_bound(&turn("s", 100, false)));
        assert!(a.past_bound(&turn("s", 101, false)));
        let (s, t) = (turn("s", 0, true), turn("t", 0, true));
        a.arrived(&s);
        a.arrived(&t);
        assert!(a.due(s).is_some());
        assert!(a.due(t).is_none());
        assert!(a.drop_held_past_bound(100).is_empty());
        assert_eq!(a.drop_held_past_bound(101).len(), 1);
        assert!(!a.holding());
    }
}
