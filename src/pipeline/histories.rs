//! What the producers remember of a task graph's recorded-messages turns for the turns that
//! continue them, in trace order under the reader's lock:
//! - a delta turn (its `messages` the new ones only, as AIPerf's `dag_jsonl` records them)
//!   sent as recorded (`--carry-forward off`) gets its parent's whole recorded messages in
//!   front: the history the trace describes, where the live threading would put the parent's
//!   prompt as sent and its answer;
//! - its expected prefix-cache share continues from where its parent's prompt and answer end
//!   in the model ([`PromptShape::of_messages`]), when the answers are threaded live.
//!
//! Each entry is freed once every turn that continues it has taken it.

use std::collections::HashMap;

use serde_json::Value;

use crate::expected_cache::{ExpectedPrefixHits, PromptShape, BYTES_PER_ANSWER_TOKEN};
use crate::trace::{Input, TraceRecord};

#[derive(Default)]
pub struct MessageHistories {
    /// Turns sent as recorded: their whole messages, and the heirs still to take them.
    recorded: HashMap<u64, (Vec<Value>, u32)>,
    /// Turns threaded live: where their prompt and answer end in the model, and the heirs.
    ends: HashMap<u64, ((u64, u64), u32)>,
}

/// Takes `parent`'s entry for one heir, freeing it after the last.
fn take<T: Clone>(map: &mut HashMap<u64, (T, u32)>, parent: u64) -> Option<T> {
    let (value, heirs) = map.get_mut(&parent)?;
    let value = value.clone();
    *heirs = heirs.saturating_sub(1);
    if *heirs == 0 {
        map.remove(&parent);
    }
    Some(value)
}

/// The turn a task-graph record continues (its first parent), when it continues one.
fn continued(record: &TraceRecord) -> Option<u64> {
    let dag = record.ids.dag.as_deref()?;
    let back = dag
        .parents_back
        .first()
        .filter(|_| dag.keeps_parent && !dag.fresh)?;
    record.index.checked_sub(*back)
}

fn heirs(record: &TraceRecord) -> u32 {
    record.ids.dag.as_deref().map_or(0, |d| d.heirs)
}

impl MessageHistories {
    /// A record sent as recorded (`live` false): a delta turn gets its parent's recorded
    /// messages in front of its own (a turn recorded whole, beginning with them, is left as
    /// it is); a turn with heirs is kept for them.
    pub fn complete(&mut self, record: &mut TraceRecord, live: bool) {
        if live {
            return;
        }
        let parent = continued(record);
        let index = record.index;
        let heirs = heirs(record);
        let Input::Messages { messages, .. } = &mut record.input else {
            return;
        };
        if let Some(history) = parent.and_then(|p| take(&mut self.recorded, p)) {
            if !messages.starts_with(&history) {
                let own = std::mem::take(messages);
                *messages = history;
                messages.extend(own);
            }
        }
        if heirs > 0 {
            self.recorded.insert(index, (messages.clone(), heirs));
        }
    }

    /// The share of a recorded-messages prompt the schedule predicts `endpoint` holds; a
    /// live-threaded turn continues from where its parent's prompt and answer end, and one
    /// with heirs leaves its own end for them.
    pub fn share(
        &mut self,
        model: &mut ExpectedPrefixHits,
        endpoint: u32,
        record: &TraceRecord,
        live: bool,
    ) -> Option<f64> {
        let Input::Messages { messages, tools } = &record.input else {
            return None;
        };
        let after = match live {
            true => continued(record).and_then(|p| take(&mut self.ends, p)),
            false => None,
        };
        let shape = PromptShape::of_messages(messages, tools.as_ref(), after);
        let share = model.planned_share(endpoint, &shape);
        let heirs = heirs(record);
        if live && heirs > 0 {
            let answer = record.output_length.unwrap_or(0) * BYTES_PER_ANSWER_TOKEN;
            let end = model.hold_answer(endpoint, shape.end(), record.index, answer);
            self.ends.insert(record.index, (end, heirs));
        }
        Some(share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DagIds, TraceIds};
    use serde_json::json;

    fn turn(index: u64, back: Option<u64>, heirs: u32, msgs: Value) -> TraceRecord {
        TraceRecord {
            index,
            line: index + 1,
            timestamp_ms: Some(0.0),
            input: Input::Messages {
                messages: msgs.as_array().unwrap().clone(),
                tools: None,
            },
            output_length: Some(50),
            ids: TraceIds {
                session_id: Some("t".into()),
                dag: Some(Box::new(DagIds {
                    parents_back: back.into_iter().collect(),
                    keeps_parent: back.is_some(),
                    heirs,
                    ..DagIds::default()
                })),
                ..TraceIds::default()
            },
            extra: None,
        }
    }

    fn messages(r: &TraceRecord) -> &[Value] {
        match &r.input {
            Input::Messages { messages, .. } => messages,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_delta_turn_sent_as_recorded_gets_its_history_and_a_whole_one_stays() {
        let mut h = MessageHistories::default();
        let sys = json!({"role": "system", "content": "s"});
        let u1 = json!({"role": "user", "content": "one"});
        let u2 = json!({"role": "user", "content": "two"});
        let u3 = json!({"role": "user", "content": "three"});
        let mut a = turn(0, None, 1, json!([sys, u1]));
        let mut b = turn(1, Some(1), 1, json!([u2]));
        let mut c = turn(2, Some(1), 0, json!([sys, u1, u2, u3]));
        for r in [&mut a, &mut b, &mut c] {
            h.complete(r, false);
        }
        assert_eq!(messages(&b), [sys.clone(), u1.clone(), u2.clone()]);
        assert_eq!(messages(&c).len(), 4, "recorded whole: left as it is");
        assert!(h.recorded.is_empty(), "freed after the last heir");
        // Threaded live, nothing is added (the sender puts the live history in front).
        let mut d = turn(3, None, 1, json!([sys]));
        let mut e = turn(4, Some(1), 0, json!([u2]));
        h.complete(&mut d, true);
        h.complete(&mut e, true);
        assert_eq!(messages(&e), [u2]);
    }

    #[test]
    fn a_live_delta_turn_expects_its_parents_prompt_and_answer_held() {
        let mut h = MessageHistories::default();
        let mut model = ExpectedPrefixHits::new(None, 1);
        let long = "x".repeat(600);
        let root = turn(0, None, 1, json!([{"role": "user", "content": long}]));
        let child = turn(1, Some(1), 0, json!([{"role": "user", "content": "next?"}]));
        assert_eq!(h.share(&mut model, 0, &root, true), Some(0.0));
        let share = h.share(&mut model, 0, &child, true).unwrap();
        // 605 bytes of the root and 200 of its answer held, of 605 + 200 + 10.
        assert!((share - 805.0 / 815.0).abs() < 1e-9, "{share}");
        // Sent as recorded, the delta alone is new.
        let mut fresh = ExpectedPrefixHits::new(None, 1);
        let mut h = MessageHistories::default();
        h.share(&mut fresh, 0, &root, false);
        assert_eq!(h.share(&mut fresh, 0, &child, false), Some(0.0));
    }
}
