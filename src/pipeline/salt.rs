//! Fresh prompts: what makes a replay's prompts new to a server's prefix cache, so that a
//! cache warmed by an earlier run (or an earlier `--loop` pass) cannot pass for the trace's
//! own reuse.
//!
//! Two salts, applied to each record before it is routed, modelled and built:
//! - the run's (`--fresh-prompts`): synthetic prompts take it in their seed
//!   ([`crate::plan`]); recorded `messages` get a marker at the start of the conversation;
//! - each `--loop` pass after the first (unless `--loop-prompts repeat`): a synthetic record's
//!   hash ids are mixed with the pass, so pass k shares blocks within itself as the trace says
//!   and none with another pass; `messages` get the pass's marker.
//!
//! The marker, `[llmreplay SALT]` and a newline, goes at the start of the first message of a
//! record that starts a context (a task's first turn, a spawned sub-agent's, a conversation's
//! first record, or any record without one) and of every later record whose first message is
//! one such a record began with (the whole-history form, where every turn repeats the
//! conversation's opening): the turns of a conversation share their prefix as recorded, and
//! a delta turn's new messages are sent as recorded. Text prompts (`text_input`) are sent
//! verbatim on every pass: their lengths are the trace's.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::rng::SplitMix64;
use crate::trace::{Input, TraceRecord};

crate::choices! {
    /// `--loop-prompts`: what each pass after the first sends.
    #[derive(Default)]
    pub enum LoopPrompts {
        /// Each pass its own prompts (a pass's hash ids mixed with the pass; recorded
        /// messages marked): a pass meets no block an earlier one left in the cache.
        #[default]
        Fresh = "fresh",
        /// Every pass the first pass's prompts: from the second pass on, the servers' caches
        /// hold them (a soak of a warm cache, not the trace's traffic: the expected hits are
        /// each pass's own reuse, so the verdict says `warm-cache`).
        Repeat = "repeat",
    }
}

/// The salts of a run, and what they need to remember to mark conversations alike.
#[derive(Debug, Default)]
pub struct Salts {
    /// `--fresh-prompts`: the run's salt.
    run: Option<u64>,
    loop_prompts: LoopPrompts,
    /// The pass being read.
    pass: u64,
    /// Conversations (session ids, hashed) that have started in this pass.
    sessions: HashSet<u64>,
    /// The first messages (hashed, unmarked) that records starting a context began with.
    openings: HashSet<u64>,
}

impl Salts {
    pub fn new(run: Option<u64>, loop_prompts: LoopPrompts) -> Salts {
        Salts {
            run,
            loop_prompts,
            ..Salts::default()
        }
    }

    /// The next `--loop` pass begins.
    pub fn new_pass(&mut self) {
        self.pass += 1;
        self.sessions.clear();
        self.openings.clear();
    }

    /// Whether each pass repeats the first's prompts (`--loop-prompts repeat`).
    pub fn repeats(&self) -> bool {
        self.loop_prompts == LoopPrompts::Repeat
    }

    /// This pass's own salt, when it has one (every pass after the first, unless repeated).
    fn pass_salt(&self) -> Option<u64> {
        (self.pass > 0 && self.loop_prompts == LoopPrompts::Fresh)
            .then(|| SplitMix64(self.pass ^ 0x6c6c_6d72_6570_6c61).next_u64())
    }

    /// The marker recorded `messages` get in this pass, when they get one.
    pub fn marker(&self) -> Option<String> {
        let salt = match (self.run, self.pass_salt()) {
            (None, None) => return None,
            (run, pass) => run.unwrap_or(0) ^ pass.unwrap_or(0),
        };
        Some(format!("[llmreplay {salt:016x}]\n"))
    }

    /// Salts `record` for this pass (before it is routed and modelled).
    pub fn apply(&mut self, record: &mut TraceRecord) {
        match &mut record.input {
            Input::Synthetic { hash_ids, .. } => {
                if let Some(salt) = self.pass_salt() {
                    for h in hash_ids.iter_mut() {
                        *h = SplitMix64(*h ^ salt).next_u64();
                    }
                }
            }
            Input::Messages { messages, .. } => {
                let Some(marker) = self.marker() else { return };
                let Some(first) = messages.first_mut() else {
                    return;
                };
                let opening = hash_of(first);
                if self.starts_context(record_start(&record.ids)) {
                    self.openings.insert(opening);
                } else if !self.openings.contains(&opening) {
                    return; // a delta turn: its new messages go as recorded
                }
                mark(first, &marker);
            }
            Input::Text { .. } => {}
        }
    }

    /// Whether a record begins a context: see [`Start`].
    fn starts_context(&mut self, start: Start) -> bool {
        match start {
            Start::Yes => true,
            Start::No => false,
            Start::IfNew(session) => self.sessions.insert(session),
        }
    }
}

/// Whether a record begins a context, as far as its own ids tell.
enum Start {
    Yes,
    No,
    /// The first record of its session does.
    IfNew(u64),
}

fn record_start(ids: &crate::trace::TraceIds) -> Start {
    match (&ids.dag, &ids.session_id) {
        (Some(dag), _) => match dag.parents_back.is_empty() || dag.fresh {
            true => Start::Yes,
            false => Start::No,
        },
        (None, Some(session)) => Start::IfNew(hash_of(session)),
        (None, None) => Start::Yes,
    }
}

fn hash_of<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// Puts `marker` before a message's text: its string content, or its first text part (a
/// text part of its own in front where it has none).
fn mark(message: &mut Value, marker: &str) {
    match &mut message["content"] {
        Value::String(text) => text.insert_str(0, marker),
        Value::Array(parts) => {
            let text = parts
                .iter_mut()
                .find(|p| p["type"] == "text" && p["text"].is_string());
            match text {
                Some(p) => {
                    let t = p["text"].as_str().unwrap_or_default();
                    p["text"] = Value::String(format!("{marker}{t}"));
                }
                None => parts.insert(0, serde_json::json!({"type": "text", "text": marker})),
            }
        }
        other => *other = Value::String(marker.trim_end().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DagIds, TraceIds};
    use serde_json::json;

    fn synthetic(hash_ids: Vec<u64>) -> TraceRecord {
        TraceRecord {
            input: Input::Synthetic {
                input_length: 64,
                hash_ids,
            },
            ..TraceRecord::for_test(0, TraceIds::default())
        }
    }

    fn messages(session: &str, msgs: Value, dag: Option<DagIds>) -> TraceRecord {
        TraceRecord {
            input: Input::Messages {
                messages: msgs.as_array().unwrap().clone(),
                tools: None,
            },
            ids: TraceIds {
                session_id: Some(session.into()),
                dag: dag.map(Box::new),
                ..TraceIds::default()
            },
            ..TraceRecord::for_test(0, TraceIds::default())
        }
    }

    fn first_text(r: &TraceRecord) -> String {
        match &r.input {
            Input::Messages { messages, .. } => messages[0]["content"].to_string(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn each_pass_after_the_first_has_its_own_blocks_shared_within_it() {
        let mut s = Salts::new(None, LoopPrompts::Fresh);
        let mut a = synthetic(vec![1, 2]);
        s.apply(&mut a);
        assert_eq!(a.hash_ids(), [1, 2], "the first pass is the trace's own");
        s.new_pass();
        let (mut b, mut c) = (synthetic(vec![1, 2]), synthetic(vec![1, 3]));
        s.apply(&mut b);
        s.apply(&mut c);
        assert_ne!(b.hash_ids()[0], 1);
        assert_eq!(b.hash_ids()[0], c.hash_ids()[0], "shared within the pass");
        assert_ne!(b.hash_ids()[1], c.hash_ids()[1]);
        s.new_pass();
        let mut d = synthetic(vec![1, 2]);
        s.apply(&mut d);
        assert_ne!(d.hash_ids(), b.hash_ids(), "and none with another pass");
        let mut repeat = Salts::new(None, LoopPrompts::Repeat);
        repeat.new_pass();
        let mut e = synthetic(vec![1, 2]);
        repeat.apply(&mut e);
        assert_eq!(e.hash_ids(), [1, 2]);
    }

    #[test]
    fn a_conversation_is_marked_where_it_starts_and_a_delta_turn_is_not() {
        let mut s = Salts::new(Some(42), LoopPrompts::Fresh);
        let marker = s.marker().unwrap();
        assert!(marker.starts_with("[llmreplay ") && marker.ends_with("]\n"));
        let sys = json!({"role": "system", "content": "be brief"});
        let u1 = json!({"role": "user", "content": "hi"});
        // Whole-history turns: every record repeats the opening; each is marked alike.
        let mut t1 = messages("a", json!([sys, u1]), None);
        let mut t2 = messages(
            "a",
            json!([sys, u1, {"role": "assistant", "content": "yo"}]),
            None,
        );
        s.apply(&mut t1);
        s.apply(&mut t2);
        assert_eq!(first_text(&t1), first_text(&t2));
        assert!(first_text(&t1).contains("[llmreplay"));
        // A DAG: the root is marked, its delta child (new messages only) is sent as recorded,
        // a spawned sub-agent starts a context of its own.
        let root = DagIds::default();
        let child = DagIds {
            parents_back: vec![1],
            ..DagIds::default()
        };
        let spawn = DagIds {
            parents_back: vec![2],
            fresh: true,
            ..DagIds::default()
        };
        let mut r = messages(
            "t",
            json!([{"role": "user", "content": [{"type": "image_url"}]}]),
            Some(root),
        );
        let mut c = messages("t", json!([{"role": "tool", "content": "42"}]), Some(child));
        let mut p = messages(
            "t",
            json!([{"role": "user", "content": "sub"}]),
            Some(spawn),
        );
        for rec in [&mut r, &mut c, &mut p] {
            s.apply(rec);
        }
        match &r.input {
            Input::Messages { messages, .. } => {
                assert_eq!(messages[0]["content"][0]["text"], marker.as_str());
            }
            _ => unreachable!(),
        }
        assert_eq!(first_text(&c), "\"42\"");
        assert!(first_text(&p).starts_with("\"[llmreplay"));
        // No salt at all: verbatim.
        let mut plain = Salts::new(None, LoopPrompts::Fresh);
        let mut t = messages("b", json!([u1]), None);
        plain.apply(&mut t);
        assert_eq!(first_text(&t), "\"hi\"");
    }
}
