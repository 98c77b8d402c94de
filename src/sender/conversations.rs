//! The turns this sender holds back until their parent's record is in: all turns of a
//! conversation come to the same sender (see [`crate::pipeline::ToSenders`]), so the parent's
//! end is known here without any lock or message.

use std::collections::HashMap;

use crate::pipeline::PreparedRequest;

/// How a parent ended: when (run ns) and whether it failed.
#[derive(Clone, Copy)]
struct Ended {
    end_ns: u64,
    failed: bool,
}

#[derive(Default)]
pub struct Conversations {
    /// Parent index → its turns waiting for it.
    parked: HashMap<u64, Vec<PreparedRequest>>,
    /// Turns in `parked`: they count against the sender's lookahead, or it would take the
    /// whole channel ahead of time.
    parked_len: usize,
    /// Turns recorded on this sender (any may be a parent of a later one).
    ended: HashMap<u64, Ended>,
}

impl Conversations {
    /// A request entering the deadline heap: returned when it may be scheduled (no parent,
    /// or its parent ended: the deadline then moves to the release time), or kept.
    pub fn admit(&mut self, mut req: PreparedRequest) -> Option<PreparedRequest> {
        let Some(parent) = req.session.as_ref().and_then(|t| t.link.parent_index) else {
            return Some(req);
        };
        match self.ended.get(&parent) {
            Some(&e) => {
                release(&mut req, e);
                Some(req)
            }
            None => {
                self.parked.entry(parent).or_default().push(req);
                self.parked_len += 1;
                None
            }
        }
    }

    /// A turn's record is in (end in run ns): its waiting children, released.
    pub fn ended(&mut self, index: u64, end_ns: u64, failed: bool) -> Vec<PreparedRequest> {
        let e = Ended { end_ns, failed };
        self.ended.insert(index, e);
        let mut children = self.parked.remove(&index).unwrap_or_default();
        self.parked_len -= children.len();
        for child in &mut children {
            release(child, e);
        }
        children
    }

    /// Turns whose parent never came to this sender (it was not part of the replay, or
    /// failed before it was built): sent now, marked as if the parent had failed.
    pub fn orphans(&mut self, now_ns: u64) -> Vec<PreparedRequest> {
        self.parked_len = 0;
        let mut orphans: Vec<PreparedRequest> = self.parked.drain().flat_map(|(_, v)| v).collect();
        for o in &mut orphans {
            release(
                o,
                Ended {
                    end_ns: now_ns,
                    failed: true,
                },
            );
        }
        orphans
    }

    pub fn waiting(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Turns held back.
    pub fn parked_len(&self) -> usize {
        self.parked_len
    }

    /// A stop: turns not yet released are dropped unrecorded, like requests not yet due.
    pub fn clear(&mut self) -> Vec<PreparedRequest> {
        self.parked_len = 0;
        self.parked.drain().flat_map(|(_, v)| v).collect()
    }
}

/// The turn leaves at the later of its trace time and the parent's end plus the think time.
fn release(req: &mut PreparedRequest, parent: Ended) {
    let Some(turn) = req.session.as_mut() else {
        return;
    };
    turn.released_ns = Some(parent.end_ns);
    turn.parent_failed = parent.failed;
    req.scheduled_ns = req
        .scheduled_ns
        .max(parent.end_ns.saturating_add(turn.link.think_ns));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{SessionLink, SessionTurn};
    use crate::trace::TraceIds;

    fn turn(index: u64, parent: Option<u64>, at: u64, think: u64) -> PreparedRequest {
        PreparedRequest {
            index,
            endpoint: 0,
            scheduled_ns: at,
            bytes: Vec::new(),
            start: 0,
            input_tokens: None,
            output_tokens_target: None,
            ids: TraceIds::default(),
            session: Some(Box::new(SessionTurn {
                link: SessionLink {
                    root: "r".into(),
                    turn: u32::from(parent.is_some()),
                    parent_index: parent,
                    think_ns: think,
                },
                trace_scheduled_ns: at,
                released_ns: None,
                parent_failed: false,
            })),
            queue_ns: None,
            warmup: false,
            expected_cached_tokens: None,
            cache_shape: None,
        }
    }

    #[test]
    fn a_turn_waits_for_its_parent_then_the_think_time() {
        let mut c = Conversations::default();
        assert!(
            c.admit(turn(0, None, 0, 0)).is_some(),
            "a root goes at once"
        );
        assert!(c.admit(turn(1, Some(0), 100, 100)).is_none(), "parked");
        assert!(c.waiting() && c.parked_len() == 1);
        // The parent ended at 500: the child leaves at 500 + 100, not at its trace time.
        let released = c.ended(0, 500, false);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].scheduled_ns, 600);
        assert_eq!(c.parked_len(), 0);
        let t = released[0].session.as_ref().unwrap();
        assert_eq!(
            (t.released_ns, t.parent_failed, t.trace_scheduled_ns),
            (Some(500), false, 100)
        );
        assert!(!c.waiting());
        // A turn whose parent already ended (and failed) is released on arrival; a late
        // parent end does not hold back a child whose own time is later.
        c.ended(1, 700, true);
        let r = c.admit(turn(2, Some(1), 10_000, 5)).unwrap();
        assert_eq!(r.scheduled_ns, 10_000);
        assert!(r.session.as_ref().unwrap().parent_failed);
        // A parent that never comes: released as an orphan, marked.
        assert!(c.admit(turn(3, Some(42), 0, 0)).is_none());
        let o = c.orphans(900);
        assert_eq!((o.len(), o[0].scheduled_ns), (1, 900));
        assert!(o[0].session.as_ref().unwrap().parent_failed);
    }
}
