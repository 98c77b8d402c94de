//! Sessions: scheduling conversation turns, dropping those past the bound, and emitting each
//! record (which releases the turns that wait for it).

use crate::pipeline::PreparedRequest;

use super::exchange::Exchange;
use super::SenderLoop;

impl SenderLoop {
    /// Gives back the buffers of turns rebuilt with their parent's history.
    pub(super) fn give_spent(&mut self) {
        for buffer in self.conversations.spent.drain(..) {
            self.cfg.buffers.give(buffer);
        }
    }

    /// A request ready for the deadline heap; a session turn past the session bound is
    /// dropped instead, with the turns of its session that would follow it.
    pub(super) fn schedule(&mut self, req: PreparedRequest) {
        let mut todo = vec![req];
        while let Some(req) = todo.pop() {
            match self.active.past_bound(&req) {
                true => todo.extend(self.drop_turn(req)),
                false => self.heap.push(req),
            }
        }
    }

    /// A turn not sent (past the bound, or its session never started): its session counts
    /// it gone, and the turns after it, now or when they come, are released as after a
    /// failed parent that never ends, so past the bound too.
    pub(super) fn drop_turn(&mut self, req: PreparedRequest) -> Vec<PreparedRequest> {
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
    pub(super) fn take_held(&mut self) {
        if !self.active.holding() {
            return;
        }
        let now = self.clock.now_ns().saturating_sub(self.t0_ns);
        for req in self.active.take_held(now) {
            self.heap.push(req);
        }
        for req in self.active.drop_held_past_bound(now) {
            self.sessions_dropped += 1;
            for follower in self.drop_turn(req) {
                self.schedule(follower);
            }
        }
    }

    /// Answers counted since the last look: the turns that waited for them go.
    pub(super) fn take_seams(&mut self) {
        let released = self.conversations.take_counted();
        self.give_spent();
        if self.cancel_at.is_none() {
            for child in released {
                self.schedule(child);
            }
        }
    }

    pub(super) fn emit(&mut self, mut ex: Exchange, target: usize) {
        self.cfg.load.finished(target);
        self.open_requests = self.open_requests.saturating_sub(1);
        // A request that failed without a response (its endpoint down, the run stopped) ends
        // now: the run's duration must include it.
        if ex.end_ns.is_none() {
            ex.end_ns = Some(self.clock.now_ns());
        }
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
        let mut record = ex.into_record(&self.cfg.targets[target].url, self.t0_ns);
        record.sent_prompt = sent_prompt;
        if let Some(e) = &mut record.error {
            let clean =
                crate::printable::printable(&crate::secrets::redact(&e.message)).into_owned();
            e.message = clean;
        }
        if record.session.is_some() {
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
            let children =
                self.conversations
                    .ended(record.index, end, !record.ok(), history, heirs);
            self.give_spent();
            if self.cancel_at.is_none() {
                for child in children {
                    self.schedule(child);
                }
            }
            if let Some(turn) = &record.session {
                self.active.gone(&turn.root);
            }
        }
        // The collector outlives the senders; if it is gone the run is being torn down.
        let _ = self.records.send(record);
    }
}
