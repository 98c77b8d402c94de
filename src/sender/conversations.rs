//! The turns this sender holds back until their parent's record is in: all turns of a
//! conversation come to the same sender (see [`crate::pipeline::ToSenders`]), so the parent's
//! end is known here without any lock or message. With carry-forward, the parent's prompt
//! and answer wait here too, and a released turn is rebuilt around them ([`crate::carry`]).

use std::collections::{HashMap, VecDeque};

use crate::carry::{self, History, SeamCounter, SeamJob, Seams, Shape};
use crate::pipeline::PreparedRequest;
use crate::session::SessionLink;

/// Bytes of histories a sender keeps for turns still to come; past it the oldest go (their
/// children are sent as built, and say so).
const HISTORY_BUDGET: usize = 256 << 20;

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
    /// Carry-forward: ended turns' prompts and answers, and how many children are still to
    /// take them.
    histories: HashMap<u64, (History, u32)>,
    /// Their order of arrival, oldest first, and their bytes.
    history_order: VecDeque<u64>,
    history_bytes: usize,
    /// Request buffers a rebuilt turn no longer needs, for the sender to give back.
    pub spent: Vec<Vec<u8>>,
    /// Histories whose answer is being counted in place ([`crate::carry::SeamCounter`]),
    /// with the released turns that wait for the count to carry it.
    counting: HashMap<u64, Vec<PreparedRequest>>,
    /// Counts carried answers in place, off the sender thread (with carry-forward).
    counter: Option<SeamCounter>,
}

impl Conversations {
    /// Conversations whose carried answers `counter` counts (None: none is counted).
    pub fn new(counter: Option<SeamCounter>) -> Conversations {
        Conversations {
            counter,
            ..Conversations::default()
        }
    }

    /// Has a finished turn's answer counted where its children put it, off the sender
    /// thread; the children that carry it wait for the count.
    pub fn count_answer(&mut self, index: u64, endpoint: u32, h: &History, seams: &Seams) {
        let Some(counter) = &self.counter else {
            return;
        };
        if matches!(h.shape, Shape::Messages(_)) || seams.of(endpoint).is_none() {
            return;
        }
        if counter.count(SeamJob::of(index, endpoint, h)) {
            self.counting(index);
        }
    }

    /// The turns the counts done since the last look let go.
    pub fn take_counted(&mut self) -> Vec<PreparedRequest> {
        let counted: Vec<(u64, Option<u64>)> = match &self.counter {
            Some(c) => c.counted().collect(),
            None => return Vec::new(),
        };
        counted
            .into_iter()
            .flat_map(|(index, seam)| self.counted(index, seam))
            .collect()
    }

    /// A request entering the deadline heap: returned when it may be scheduled (no parent,
    /// or every turn it waits for ended: the deadline then moves to the release time), or
    /// kept.
    pub fn admit(&mut self, mut req: PreparedRequest) -> Option<PreparedRequest> {
        let Some(turn) = req.session.as_ref() else {
            return Some(req);
        };
        let Some(parent) = turn.link.parent_index.filter(|_| !turn.link.at_own_time) else {
            return Some(req);
        };
        // A join waits under the first of its turns not yet ended.
        let pending = turn.link.waited_for().find(|p| !self.ended.contains_key(p));
        if let Some(pending) = pending {
            self.parked.entry(pending).or_default().push(req);
            self.parked_len += 1;
            return None;
        }
        let carries = req.carry.is_some() && turn.link.keeps_parent && !turn.link.fresh;
        let e = self.latest_end(&req);
        release(&mut req, e);
        // Its parent's answer is still being counted: it waits for the count, then carries it.
        if let Some(waiting) = self.counting.get_mut(&parent).filter(|_| carries) {
            waiting.push(req);
            self.parked_len += 1;
            return None;
        }
        self.carry_into(&mut req, parent);
        Some(req)
    }

    /// Turn `index`'s answer is being counted in place: the turns that carry it wait.
    pub fn counting(&mut self, index: u64) {
        self.counting.entry(index).or_default();
    }

    /// Turn `index`'s answer was counted (`seam`: its tokens in place, None where they could
    /// not be): the turns that waited for it carry it now, released.
    pub fn counted(&mut self, index: u64, seam: Option<u64>) -> Vec<PreparedRequest> {
        let waiting = self.counting.remove(&index).unwrap_or_default();
        if let Some((h, _)) = self.histories.get_mut(&index) {
            h.seam_tokens = seam;
        }
        self.parked_len -= waiting.len();
        let mut released = waiting;
        for req in &mut released {
            self.carry_into(req, index);
        }
        released
    }

    /// Answers still being counted (the sender must not end before their turns go).
    pub fn counts_pending(&self) -> bool {
        !self.counting.is_empty()
    }

    /// The last to end of the turns a released request waited for (failed if any failed).
    fn latest_end(&self, req: &PreparedRequest) -> Ended {
        let link = req.session.as_ref().map(|t| &t.link);
        let ends = link
            .into_iter()
            .flat_map(SessionLink::waited_for)
            .filter_map(|p| self.ended.get(&p));
        ends.fold(
            Ended {
                end_ns: 0,
                failed: false,
            },
            |a, e| Ended {
                end_ns: a.end_ns.max(e.end_ns),
                failed: a.failed || e.failed,
            },
        )
    }

    /// A turn's record is in (end in run ns), with what its children carry forward (for as
    /// many of them as continue it): its waiting children, released (a join's once the last
    /// turn it waits for is in).
    pub fn ended(
        &mut self,
        index: u64,
        end_ns: u64,
        failed: bool,
        history: Option<History>,
        heirs: u32,
    ) -> Vec<PreparedRequest> {
        self.ended.insert(index, Ended { end_ns, failed });
        if let Some(h) = history.filter(|_| !failed && heirs > 0) {
            self.keep_history(index, h, heirs);
        }
        let waiting = self.parked.remove(&index).unwrap_or_default();
        self.parked_len -= waiting.len();
        waiting
            .into_iter()
            .filter_map(|child| self.admit(child))
            .collect()
    }

    fn keep_history(&mut self, index: u64, h: History, heirs: u32) {
        self.history_bytes += h.bytes();
        self.histories.insert(index, (h, heirs));
        self.history_order.push_back(index);
        while self.history_bytes > HISTORY_BUDGET {
            let Some(oldest) = self.history_order.pop_front() else {
                break;
            };
            if let Some((h, _)) = self.histories.remove(&oldest) {
                self.history_bytes -= h.bytes();
            }
        }
    }

    /// Puts the parent's prompt and answer in front of a released turn's own tokens; the
    /// turn's record says how many, or why not.
    fn carry_into(&mut self, req: &mut PreparedRequest, parent: u64) {
        let (Some(slot), Some(turn)) = (req.carry.as_deref_mut(), req.session.as_deref_mut())
        else {
            return;
        };
        if turn.link.fresh {
            return;
        }
        // Each heir takes the history once (one in a chain; each forked branch in a graph);
        // the last one frees it. A turn that does not continue its parent takes nothing.
        let history = match self.histories.get_mut(&parent) {
            Some(_) if !turn.link.keeps_parent => None,
            Some((h, heirs)) if *heirs > 1 => {
                *heirs -= 1;
                Some(h.clone())
            }
            Some(_) => self.histories.remove(&parent).map(|(h, _)| {
                self.history_bytes -= h.bytes();
                h
            }),
            None => None,
        };
        let outcome = match &history {
            _ if !turn.link.keeps_parent && turn.link.branch.is_some() => Err(
                "its trace prompt does not begin with its parent's prompt and answer (a compacted context)",
            ),
            _ if !turn.link.keeps_parent => {
                Err("the trace's prefix keeps less than the parent's prompt and answer")
            }
            None if turn.parent_failed => Err("the parent failed"),
            None => Err("the parent's prompt and answer are not kept (a carried token-id or verbatim prompt, or past the history budget)"),
            Some(h) => carry::splice(&req.bytes[req.start..], slot, h),
        };
        match outcome {
            Ok((bytes, new_slot, tokens, note)) => {
                *slot = new_slot;
                turn.carried_tokens = tokens;
                turn.not_carried = note;
                self.spent.push(std::mem::replace(&mut req.bytes, bytes));
                req.start = 0;
            }
            Err(why) => turn.not_carried = Some(why),
        }
    }

    /// Turns whose parent never came to this sender (it was not part of the replay, or
    /// failed before it was built): sent now, marked as if the parent had failed.
    pub fn orphans(&mut self, now_ns: u64) -> Vec<PreparedRequest> {
        self.parked_len -= self.parked.values().map(Vec::len).sum::<usize>();
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
        let counting = self.counting.drain().flat_map(|(_, v)| v);
        self.parked
            .drain()
            .flat_map(|(_, v)| v)
            .chain(counting)
            .collect()
    }
}

/// The turn leaves at the later of its trace time and the parent's end plus the think time.
fn release(req: &mut PreparedRequest, parent: Ended) {
    let Some(turn) = req.session.as_mut() else {
        return;
    };
    turn.released_ns = Some(parent.end_ns);
    turn.parent_failed = parent.failed;
    req.due_ns = req
        .scheduled_ns
        .max(parent.end_ns.saturating_add(turn.link.think_ns));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(index: u64, parent: Option<u64>, at: u64, think: u64) -> PreparedRequest {
        PreparedRequest::turn_for_test(
            index,
            at,
            SessionLink {
                root: "r".into(),
                turn: u32::from(parent.is_some()),
                parent_index: parent,
                joins: Vec::new(),
                branch: None,
                heirs: 1,
                fresh: false,
                think_ns: think,
                planned_prefix: None,
                keeps_parent: true,
                last: false,
                at_own_time: false,
            },
        )
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
        let released = c.ended(0, 500, false, None, 1);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].due_ns, 600);
        assert_eq!(c.parked_len(), 0);
        let t = released[0].session.as_ref().unwrap();
        assert_eq!(
            (t.released_ns, t.parent_failed, released[0].scheduled_ns),
            (Some(500), false, 100)
        );
        assert!(!c.waiting());
        // A turn whose parent already ended (and failed) is released on arrival; a late
        // parent end does not hold back a child whose own time is later.
        c.ended(1, 700, true, None, 1);
        let r = c.admit(turn(2, Some(1), 10_000, 5)).unwrap();
        assert_eq!(r.due_ns, 10_000);
        assert!(r.session.as_ref().unwrap().parent_failed);
        // A parent dropped at a session bound never ends: a turn after it, even one that
        // comes later, is due past any bound (and so dropped too).
        c.ended(5, u64::MAX, true, None, 1);
        assert_eq!(c.admit(turn(6, Some(5), 10, 5)).unwrap().due_ns, u64::MAX);
        // A parent that never comes: released as an orphan, marked.
        assert!(c.admit(turn(3, Some(42), 0, 0)).is_none());
        let o = c.orphans(900);
        assert_eq!((o.len(), o[0].due_ns), (1, 900));
        assert!(o[0].session.as_ref().unwrap().parent_failed);
    }

    /// A turn that carries its parent's answer waits for the answer's count (done off the
    /// sender thread), then goes; one that does not carry it goes at once.
    #[test]
    fn a_carrying_turn_waits_for_its_parents_answer_to_be_counted() {
        let mut c = Conversations::default();
        let mut child = turn(1, Some(0), 0, 0);
        child.carry = Some(Box::new(crate::carry::CarrySlot {
            shape: crate::carry::Shape::Completion,
            prompt: 0..0,
            content: 0..0,
            content_tokens: 10,
            turn_overhead: 0,
            recorded: None,
        }));
        assert!(c.admit(child).is_none(), "parked behind its parent");
        let history = crate::carry::History {
            shape: crate::carry::Shape::Completion,
            prompt: b" a".to_vec(),
            own: Vec::new(),
            content_tokens: 1,
            answer: b"x".to_vec(),
            answer_tokens: 1,
            seam_tokens: None,
            tool_calls: 0,
        };
        c.counting(0);
        assert!(c.counts_pending());
        assert!(
            c.ended(0, 100, false, Some(history), 1).is_empty(),
            "waits for the count"
        );
        assert_eq!(c.parked_len(), 1);
        let released = c.counted(0, Some(3));
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].due_ns, 100);
        assert!(!c.counts_pending() && c.parked_len() == 0);
        // Without a carry slot, nothing waits for a count.
        c.counting(5);
        c.ended(5, 200, false, None, 1);
        assert!(c.admit(turn(6, Some(5), 0, 0)).is_some());
    }

    #[test]
    fn a_join_waits_for_every_branch_and_leaves_after_the_last() {
        let mut c = Conversations::default();
        let mut join = turn(3, Some(0), 0, 10);
        join.session.as_mut().unwrap().link.joins = vec![1, 2];
        assert!(c.admit(join).is_none());
        assert!(
            c.ended(1, 900, false, None, 1).is_empty(),
            "0 and 2 still run"
        );
        assert!(c.ended(0, 400, false, None, 1).is_empty(), "2 still runs");
        let released = c.ended(2, 700, true, None, 1);
        assert_eq!(released.len(), 1);
        // The latest end of the three (900), then the wait; a failed branch marks it.
        assert_eq!(released[0].due_ns, 910);
        let t = released[0].session.as_ref().unwrap();
        assert_eq!((t.released_ns, t.parent_failed), (Some(900), true));
        assert_eq!(c.parked_len(), 0);
        // Every branch already over: released on arrival.
        let mut late = turn(4, Some(0), 0, 0);
        late.session.as_mut().unwrap().link.joins = vec![1];
        assert_eq!(c.admit(late).unwrap().due_ns, 900);
    }
}
