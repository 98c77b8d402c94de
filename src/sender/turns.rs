//! A sender's sessions: the conversations whose turns wait for their parents
//! ([`Conversations`]), the places and bound of `--max-active-sessions` and `--duration`
//! ([`ActiveSessions`]), and turning each ended request into its record, which releases the
//! turns that wait for it.

use std::sync::Arc;

use crate::pipeline::PreparedRequest;
use crate::record::RequestRecord;

use super::active::ActiveSessions;
use super::conversations::Conversations;
use super::deadlines::Deadlines;
use super::exchange::Exchange;
use super::SenderConfig;

pub(super) struct Sessions {
    cfg: Arc<SenderConfig>,
    /// Turns waiting for their parent's record, and the counts of the answers they carry.
    conversations: Conversations,
    /// Sessions' places and bound.
    active: ActiveSessions,
    /// Turns dropped at the session bound (see [`super::SenderReport::turns_cut`]).
    pub turns_cut: u64,
    /// See [`super::SenderReport::sessions_dropped`].
    pub sessions_dropped: u64,
    /// The run is stopping ([`Self::clear`]): turns are no longer released.
    stopping: bool,
}

impl Sessions {
    pub fn new(cfg: Arc<SenderConfig>, conversations: Conversations) -> Sessions {
        Sessions {
            active: ActiveSessions::new(cfg.session_cap.clone(), cfg.session_bound_ns),
            cfg,
            conversations,
            turns_cut: 0,
            sessions_dropped: 0,
            stopping: false,
        }
    }

    /// A request taken from the channel: back when it may be scheduled (its second value:
    /// it is due at its own time, not waiting for a session place), or kept until its parent
    /// ends.
    pub fn admit(&mut self, req: PreparedRequest) -> Option<(PreparedRequest, bool)> {
        self.active.arrived(&req);
        // A turn parked for its parent is not due yet; one released now is due at its
        // parent's end plus its wait, which admit sets; a first turn that must wait for a
        // session place is due when one frees.
        let admitted = self.conversations.admit(req);
        self.give_spent();
        admitted.map(|req| {
            let on_time = !self.active.would_wait(&req);
            (req, on_time)
        })
    }

    /// Turns held back waiting for their parents (they count against the lookahead).
    pub fn parked(&self) -> usize {
        self.conversations.parked_len()
    }

    /// A due turn: back to be sent now, or held for a session place.
    pub fn due(&mut self, req: PreparedRequest) -> Option<PreparedRequest> {
        self.active.due(req)
    }

    /// First turns are held for a session place.
    pub fn holding(&self) -> bool {
        self.active.holding()
    }

    /// The channel is closed: no more turns will come.
    pub fn no_more_turns(&mut self) {
        self.active.no_more_turns();
    }

    /// Answers are still being counted for turns that carry them.
    pub fn counts_pending(&self) -> bool {
        self.conversations.counts_pending()
    }

    /// With nothing left that could release them (their parents never came), the turns still
    /// parked go now, at run time `now`. False when none was.
    pub fn release_orphans(&mut self, now: u64, deadlines: &mut Deadlines) -> bool {
        if !self.conversations.waiting() {
            return false;
        }
        for orphan in self.conversations.orphans(now) {
            self.schedule(orphan, deadlines);
        }
        true
    }

    /// A stop: parked and held turns are dropped unrecorded, their buffers given back, and
    /// none is released after.
    pub fn clear(&mut self) {
        self.stopping = true;
        let held = self.active.clear_held();
        for turn in self.conversations.clear().into_iter().chain(held) {
            self.cfg.buffers.give(turn.bytes);
        }
    }

    /// Gives back the buffers of turns rebuilt with their parent's history.
    fn give_spent(&mut self) {
        for buffer in self.conversations.spent.drain(..) {
            self.cfg.buffers.give(buffer);
        }
    }

    /// A request ready for the deadline heap; a session turn past the session bound is
    /// dropped instead, with the turns of its session that would follow it.
    pub fn schedule(&mut self, req: PreparedRequest, deadlines: &mut Deadlines) {
        let mut todo = vec![req];
        while let Some(req) = todo.pop() {
            match self.active.past_bound(&req) {
                true => todo.extend(self.drop_turn(req)),
                false => deadlines.push(req),
            }
        }
    }

    /// A turn not sent (past the bound, or its session never started): its session counts
    /// it gone, and the turns after it, now or when they come, are released as after a
    /// failed parent that never ends, so past the bound too.
    fn drop_turn(&mut self, req: PreparedRequest) -> Vec<PreparedRequest> {
        if let Some(turn) = &req.session {
            self.active.gone(&turn.link.root);
        }
        self.turns_cut += 1;
        let children = self.conversations.ended(req.index, u64::MAX, true, None, 0);
        self.cfg.buffers.give(req.bytes);
        children
    }

    /// Sessions held for a place: those a freed place lets go, to the heap; those the bound
    /// has passed, dropped.
    pub fn take_held(&mut self, deadlines: &mut Deadlines) {
        if !self.active.holding() {
            return;
        }
        let now = deadlines.run_ns();
        for req in self.active.take_held(now) {
            deadlines.push(req);
        }
        for req in self.active.drop_held_past_bound(now) {
            self.sessions_dropped += 1;
            for follower in self.drop_turn(req) {
                self.schedule(follower, deadlines);
            }
        }
    }

    /// Answers counted since the last look: the turns that waited for them go.
    pub fn take_seams(&mut self, deadlines: &mut Deadlines) {
        let released = self.conversations.take_counted();
        self.give_spent();
        self.release(released, deadlines);
    }

    /// Turns whose parents ended go to the heap, unless the run is stopping.
    fn release(&mut self, turns: Vec<PreparedRequest>, deadlines: &mut Deadlines) {
        if self.stopping {
            return;
        }
        for turn in turns {
            self.schedule(turn, deadlines);
        }
    }

    /// The record of `ex`, ended on endpoint `target`; a turn's end releases the turns that
    /// wait for it (into `deadlines`, unless the run is stopping), carrying its prompt and
    /// answer to those that carry them forward.
    pub fn record(
        &mut self,
        mut ex: Exchange,
        target: usize,
        deadlines: &mut Deadlines,
    ) -> RequestRecord {
        // A turn whose children carry its prompt and answer forward kept its bytes.
        let sent_prompt = match (self.cfg.save_prompts, &ex.req.carry) {
            (true, Some(_)) => crate::carry::sent_line(ex.req.index, ex.req.payload()),
            _ => None,
        };
        let carried = ex.req.carry.take().map(|slot| {
            let bytes = std::mem::take(&mut ex.req.bytes);
            let text = ex.answer.take().unwrap_or_default();
            // A recorded-messages turn leaves its whole assistant message, calls and all.
            let answer = match &ex.live_calls {
                Some(calls) => calls.assistant_message(&text),
                None => text,
            };
            (slot, bytes, ex.req.start, answer)
        });
        // A request kept its bytes to be resent, and failed before its answer started.
        if carried.is_none() && ex.req.bytes.capacity() > 0 {
            self.cfg.buffers.give(std::mem::take(&mut ex.req.bytes));
        }
        let heirs = ex.req.session.as_ref().map_or(0, |t| t.link.heirs);
        let mut record = ex.into_record(&self.cfg.targets[target].url, deadlines.t0());
        record.sent_prompt = sent_prompt;
        if let Some(e) = &mut record.error {
            let clean =
                crate::printable::printable(&crate::secrets::redact(&e.message)).into_owned();
            e.message = clean;
        }
        if record.session.is_none() {
            return record;
        }
        let end = record.end_ns.unwrap_or(0);
        // Only a successful turn's prompt and answer are worth carrying.
        let ok = record.ok();
        let history = carried.and_then(|(slot, bytes, start, answer)| {
            // What is pasted is the answer's text: its reasoning is not sent back (as
            // clients do, and templates drop it), so its tokens are not the history's.
            let answered = record.answer_tokens().unwrap_or(0);
            let h = ok.then(|| {
                let mut h = crate::carry::history(&bytes[start..], &slot, answer, answered);
                h.tool_calls = record.tool_calls.unwrap_or(0);
                h
            });
            self.cfg.buffers.give(bytes);
            h
        });
        if let Some(h) = history.as_ref().filter(|_| heirs > 0) {
            let seams = &self.cfg.seams;
            self.conversations
                .count_answer(record.index, target as u32, h, seams);
        }
        let children = self
            .conversations
            .ended(record.index, end, !ok, history, heirs);
        self.give_spent();
        self.release(children, deadlines);
        if let Some(turn) = &record.session {
            self.active.gone(&turn.root);
        }
        record
    }
}
