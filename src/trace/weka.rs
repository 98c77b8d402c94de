//! WEKA / SemiAnalysis AgentX agentic coding sessions (callanjfox/kv-cache-tester; AIPerf's
//! `weka_trace` loader documents the same shape). One JSON object per coding session:
//! `{id, models, block_size, hash_id_scope, requests: [...]}`, where each request is an API
//! call (`type` `"n"` or `"s"`: `t` in s from the session's start, `model`, `in`, `out`,
//! `hash_ids` of `block_size`-token blocks, optional `api_time` and `think_time` in s) or a
//! sub-agent (`type` `"subagent"`: `t`, `agent_id`, `status`, and its own `requests`, which
//! may hold sub-agents again). A file holds one session or several, one after another (one a
//! line, or each pretty-printed: `cat traces/*.json` works).
//!
//! A session becomes a task graph ([`super::DagIds`]): its calls are one agent's turns in
//! order; a sub-agent's calls are a branch that starts when the call before the marker has
//! ended, and the parent's next call waits for the branch's last call (a join), unless the
//! sub-agent was `async_launched` (it runs on, unwaited). Each turn leaves its wait after
//! the last turn it waits for: the recorded idle time (`t` less the parents' `t + api_time`),
//! else its `think_time`, else the gap between the starts. Every task arrives at 0: it runs
//! closed-loop, as its agent did; `--max-active-sessions` caps how many run at once.
//!
//! Hash ids: `"local"` scope gives every session ids of its own (equal ids in two sessions
//! are different blocks), `"global"` shares them across the file. Sub-agents share their
//! session's ids, so their prompts hit the blocks they share with it. Raw kv-cache-tester
//! files give a sub-agent's `t` from its marker, AgentX files from the session's start: a
//! session whose sub-agent calls start before their marker is read the first way.

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::de::IoRead;

use super::parse::MAX_LENGTH;
use super::{DagIds, Input, Skipped, TraceRecord};
use crate::error::{Error, Result};

/// The block size the corpus uses, and the only one read (`--block-size` does not apply).
pub const BLOCK_TOKENS: u32 = 64;

#[derive(Deserialize)]
struct Session {
    id: String,
    block_size: u32,
    hash_id_scope: String,
    requests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Entry {
    #[serde(rename = "n")]
    Normal(Call),
    #[serde(rename = "s")]
    Streaming(Call),
    #[serde(rename = "subagent")]
    Subagent(Subagent),
}

#[derive(Deserialize)]
struct Call {
    t: f64,
    #[serde(rename = "in")]
    input: u64,
    out: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
    api_time: Option<f64>,
    think_time: Option<f64>,
}

#[derive(Deserialize)]
struct Subagent {
    t: f64,
    agent_id: String,
    #[serde(default)]
    status: Option<String>,
    requests: Vec<Entry>,
}

/// A call placed in its task graph.
struct Node<'a> {
    call: &'a Call,
    /// Its start, s from the session's start.
    at: f64,
    branch: String,
    /// Positions of the nodes it waits for; the first is the one it continues.
    parents: Vec<usize>,
    keeps_parent: bool,
    /// A sub-agent's first call.
    fresh: bool,
    heirs: u32,
}

/// Reads sessions one at a time and hands out their calls as records.
pub struct Weka {
    path: PathBuf,
    sessions: serde_json::StreamDeserializer<'static, IoRead<Box<dyn BufRead + Send>>, Session>,
    queue: VecDeque<TraceRecord>,
    read: u64,
    /// `"global"` scope: trace id → our id, over the whole file.
    global: HashMap<u64, u64>,
    next_block: u64,
    /// Each session id seen, and its session's number: an id is one task.
    seen: HashMap<String, u64>,
}

impl Weka {
    pub fn new(input: Box<dyn BufRead + Send>, path: &Path) -> Weka {
        Weka {
            path: path.to_path_buf(),
            sessions: serde_json::Deserializer::from_reader(input).into_iter(),
            queue: VecDeque::new(),
            read: 0,
            global: HashMap::new(),
            next_block: 0,
            seen: HashMap::new(),
        }
    }

    /// The next call as record `index`; `Ok(None)` at the end. A session that fails its
    /// checks is an error naming it; with `skip_invalid`, it is left out whole (and counted
    /// in `skipped`).
    pub fn next(
        &mut self,
        index: u64,
        skip_invalid: bool,
        skipped: &mut Skipped,
    ) -> Result<Option<TraceRecord>> {
        while self.queue.is_empty() {
            // A broken document cannot be skipped: where the next one starts is lost.
            let Some(session) =
                super::next_document(&mut self.sessions, &self.path, "a WEKA session")?
            else {
                return Ok(None);
            };
            self.read += 1;
            match self.expand(&session, index) {
                Ok(()) => {}
                Err(message) => {
                    let e = Error::Trace {
                        file: self.path.clone(),
                        line: self.read,
                        message: format!("session {} ({:?}): {message}", self.read, session.id),
                    };
                    if !skip_invalid {
                        return Err(e);
                    }
                    skipped.lines += 1;
                    skipped.first.get_or_insert_with(|| e.to_string());
                }
            }
        }
        Ok(self.queue.pop_front())
    }

    /// Places a session's calls in its graph and queues them, numbered from `base`.
    fn expand(&mut self, s: &Session, base: u64) -> std::result::Result<(), String> {
        if let Some(first) = self.seen.get(&s.id) {
            return Err(format!(
                "field `id`: {:?} is also session {first}'s: two sessions would run as one task",
                s.id
            ));
        }
        self.seen.insert(s.id.clone(), self.read);
        if s.block_size != BLOCK_TOKENS {
            return Err(format!(
                "field `block_size`: {} tokens; llmreplay reads WEKA sessions of {BLOCK_TOKENS}-token blocks",
                s.block_size
            ));
        }
        let local = match s.hash_id_scope.as_str() {
            "local" => true,
            "global" => false,
            other => {
                return Err(format!(
                    "field `hash_id_scope`: {other:?}; expected \"local\" or \"global\""
                ))
            }
        };
        let relative = starts_before_marker(&s.requests);
        let mut nodes = Vec::new();
        walk(&s.requests, &s.id, 0.0, None, relative, &mut nodes);
        if nodes.is_empty() {
            return Err("field `requests`: no calls".into());
        }
        let mut ids = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let c = n.call;
            let blocks = c.input.div_ceil(u64::from(BLOCK_TOKENS));
            if c.input == 0 || c.out == 0 || c.input > MAX_LENGTH || c.out > MAX_LENGTH {
                return Err(format!(
                    "call {} of {:?}: `in` {} and `out` {} must be 1 to {MAX_LENGTH}",
                    i + 1,
                    n.branch,
                    c.input,
                    c.out
                ));
            }
            if c.hash_ids.len() as u64 > blocks {
                return Err(format!(
                    "call {} of {:?}: {} hash ids for {} tokens (at most {blocks} blocks of {BLOCK_TOKENS})",
                    i + 1,
                    n.branch,
                    c.hash_ids.len(),
                    c.input
                ));
            }
        }
        let scope = if local { &mut ids } else { &mut self.global };
        let next_block = &mut self.next_block;
        let mut fresh = || {
            *next_block += 1;
            *next_block - 1
        };
        let mut records = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let c = n.call;
            let mut hash_ids: Vec<u64> = c
                .hash_ids
                .iter()
                .map(|&h| *scope.entry(h).or_insert_with(&mut fresh))
                .collect();
            // A call whose ids stop short of its length gets fresh blocks for the rest.
            let blocks = c.input.div_ceil(u64::from(BLOCK_TOKENS)) as usize;
            hash_ids.resize_with(blocks.max(hash_ids.len()), &mut fresh);
            let parent_ends = n
                .parents
                .iter()
                .map(|&p| (nodes[p].at, nodes[p].call.api_time));
            let wait_s = wait(n.at, c.think_time, parent_ends);
            let prefix = n.parents.first().map(|&p| {
                let parent = nodes[p].call;
                match n.keeps_parent {
                    true => parent.input + parent.out,
                    false => shared_blocks(&parent.hash_ids, &c.hash_ids) * u64::from(BLOCK_TOKENS),
                }
                .min(c.input)
            });
            let mut record = TraceRecord::task_turn(
                self.read,
                &s.id,
                Input::Synthetic {
                    input_length: c.input,
                    hash_ids,
                },
                Some(c.out),
                DagIds {
                    branch: n.branch.clone(),
                    parents_back: n.parents.iter().map(|&p| (i - p) as u64).collect(),
                    wait_ms: wait_s * 1000.0,
                    keeps_parent: n.keeps_parent,
                    heirs: n.heirs,
                    fresh: n.fresh,
                },
            );
            record.index = base + i as u64;
            record.ids.prefix_tokens = prefix;
            records.push(record);
        }
        self.queue.extend(records);
        Ok(())
    }
}

/// Places one agent's entries (`origin`: what its `t` counts from, with `relative`; `anchor`:
/// the call that spawned it). Returns its last call.
fn walk<'a>(
    entries: &'a [Entry],
    branch: &str,
    origin: f64,
    anchor: Option<usize>,
    relative: bool,
    nodes: &mut Vec<Node<'a>>,
) -> Option<usize> {
    let mut prev: Option<usize> = None;
    let mut joins: Vec<usize> = Vec::new();
    for entry in entries {
        match entry {
            Entry::Normal(call) | Entry::Streaming(call) => {
                let at = if relative { origin + call.t } else { call.t };
                let first = prev.or(anchor);
                // It continues its own agent's previous call when it starts with that
                // call's whole prompt (its blocks) and is long enough to hold the answer.
                let keeps_parent = prev.is_some_and(|p| {
                    let before = nodes[p].call;
                    let whole = (before.input / u64::from(BLOCK_TOKENS)) as usize;
                    shared_blocks(&before.hash_ids, &call.hash_ids) as usize
                        >= whole.min(before.hash_ids.len())
                        && call.input >= before.input + before.out
                });
                if let (true, Some(p)) = (keeps_parent, prev) {
                    nodes[p].heirs += 1;
                }
                let parents = first.into_iter().chain(joins.drain(..)).collect();
                nodes.push(Node {
                    call,
                    at,
                    branch: branch.to_string(),
                    parents,
                    keeps_parent,
                    fresh: prev.is_none() && anchor.is_some(),
                    heirs: 0,
                });
                prev = Some(nodes.len() - 1);
            }
            Entry::Subagent(sub) => {
                let spawned_at = if relative { origin + sub.t } else { 0.0 };
                let name = format!("{branch}::sa:{}", sub.agent_id);
                let last = walk(
                    &sub.requests,
                    &name,
                    spawned_at,
                    prev.or(anchor),
                    relative,
                    nodes,
                );
                if sub.status.as_deref() != Some("async_launched") {
                    joins.extend(last);
                }
            }
        }
    }
    // Sub-agents after the agent's last call: nothing waits for them.
    prev
}

/// Whether some sub-agent's first call has a `t` before its marker's: then `t` counts from
/// the marker (kv-cache-tester), else from the session's start (AgentX).
fn starts_before_marker(entries: &[Entry]) -> bool {
    entries.iter().any(|e| match e {
        Entry::Subagent(sub) => {
            sub.requests.iter().any(|inner| match inner {
                Entry::Normal(c) | Entry::Streaming(c) => c.t < sub.t,
                Entry::Subagent(_) => false,
            }) || starts_before_marker(&sub.requests)
        }
        _ => false,
    })
}

/// The wait before a call after the last of its parents (s): its start less the parents'
/// recorded ends when every parent has an `api_time`, else its `think_time`, else the gap
/// from the last parent's start. Never negative.
fn wait(at: f64, think: Option<f64>, parents: impl Iterator<Item = (f64, Option<f64>)>) -> f64 {
    let mut ends = Some(f64::MIN);
    let mut starts = f64::MIN;
    let mut any = false;
    for (t, api) in parents {
        any = true;
        starts = starts.max(t);
        ends = ends.zip(api).map(|(e, api)| e.max(t + api));
    }
    if !any {
        return 0.0;
    }
    match (ends, think) {
        (Some(end), _) => at - end,
        (None, Some(think)) => think,
        (None, None) => at - starts,
    }
    .max(0.0)
}

/// Leading hash ids two calls share.
fn shared_blocks(a: &[u64], b: &[u64]) -> u64 {
    a.iter().zip(b).take_while(|(x, y)| x == y).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<TraceRecord>> {
        let input: Box<dyn BufRead + Send> =
            Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let mut w = Weka::new(input, Path::new("w.json"));
        let mut out = Vec::new();
        while let Some(r) = w.next(out.len() as u64, false, &mut Skipped::default())? {
            out.push(r);
        }
        Ok(out)
    }

    fn dag(r: &TraceRecord) -> &DagIds {
        r.ids.dag.as_deref().unwrap()
    }

    #[test]
    fn a_session_with_a_sub_agent_is_a_spawn_and_a_join() {
        // Main call 0 (blocks 1,2), a sub-agent of two calls (relative t: 0.5 < marker 3),
        // then the main agent continues (blocks 1,2 + more) after the sub-agent's end.
        let text = r#"{"id":"w1","models":["m"],"block_size":64,"hash_id_scope":"local","requests":[
          {"t":0,"type":"s","model":"m","in":128,"out":10,"hash_ids":[1,2],"api_time":2},
          {"t":3,"type":"subagent","agent_id":"a1","status":"completed","requests":[
             {"t":0.5,"type":"n","model":"h","in":64,"out":5,"hash_ids":[1],"api_time":1},
             {"t":2,"type":"n","model":"h","in":140,"out":5,"hash_ids":[1,9,10],"api_time":1}]},
          {"t":9,"type":"s","model":"m","in":200,"out":10,"hash_ids":[1,2,3,4],"api_time":1}]}
        {"id":"w2","block_size":64,"hash_id_scope":"local","requests":[
          {"t":0,"type":"n","model":"m","in":64,"out":1,"hash_ids":[1]}]}"#;
        let r = read(text).unwrap();
        assert_eq!(r.len(), 5);
        let branches: Vec<&str> = r.iter().map(|r| dag(r).branch.as_str()).collect();
        assert_eq!(branches, ["w1", "w1::sa:a1", "w1::sa:a1", "w1", "w2"]);
        // The sub-agent's first call waits for the main call (ended at 2; starts at 3.5).
        assert_eq!(dag(&r[1]).parents_back, [1]);
        assert!((dag(&r[1]).wait_ms - 1500.0).abs() < 1e-6);
        assert!(
            !dag(&r[1]).keeps_parent,
            "a sub-agent starts a context of its own"
        );
        assert_eq!(dag(&r[2]).parents_back, [1]);
        // The join: the main call before (3 back) and the sub-agent's last (1 back), the
        // wait after the later end (the sub-agent's: 3 + 2 + 1 = 6, then 9).
        assert_eq!(dag(&r[3]).parents_back, [3, 1]);
        assert!((dag(&r[3]).wait_ms - 3000.0).abs() < 1e-6);
        assert!(dag(&r[3]).keeps_parent && dag(&r[0]).heirs == 1);
        assert_eq!(r[3].ids.prefix_tokens, Some(138));
        // Local scope: w2's id 1 is not w1's.
        assert_eq!(
            r[0].hash_ids()[0],
            r[1].hash_ids()[0],
            "one session shares its ids"
        );
        assert_ne!(r[4].hash_ids()[0], r[0].hash_ids()[0]);
        assert_eq!(r[4].ids.session_id.as_deref(), Some("w2"));
        assert!(r.iter().all(|r| r.timestamp_ms == Some(0.0)));
    }

    #[test]
    fn async_sub_agents_are_not_waited_for_and_bad_sessions_are_named() {
        let text = r#"{"id":"x","block_size":64,"hash_id_scope":"global","requests":[
          {"t":0,"type":"n","in":64,"out":1,"hash_ids":[1]},
          {"t":1,"type":"subagent","agent_id":"bg","status":"async_launched","requests":[
             {"t":1.5,"type":"n","in":64,"out":1,"hash_ids":[7]}]},
          {"t":2,"type":"n","in":128,"out":1,"hash_ids":[1,2]}]}"#;
        let r = read(text).unwrap();
        assert_eq!(
            dag(&r[2]).parents_back,
            [2],
            "no join on a background sub-agent"
        );
        assert!(r[1].ids.dag.as_ref().unwrap().branch.ends_with("::sa:bg"));
        let cases = [
            (
                r#"{"id":"b","block_size":16,"hash_id_scope":"local","requests":[]}"#,
                "session 1 (\"b\"): field `block_size`: 16 tokens",
            ),
            (
                r#"{"id":"b","block_size":64,"hash_id_scope":"x","requests":[]}"#,
                "field `hash_id_scope`: \"x\"",
            ),
            (
                r#"{"id":"b","block_size":64,"hash_id_scope":"local","requests":[{"t":0,"type":"n","in":10,"out":1,"hash_ids":[1,2]}]}"#,
                "2 hash ids for 10 tokens",
            ),
            (
                "{\"id\":\"b\",\n\"requests\":[{\"t\":0,\"type\":\"q\"}]}",
                "w.json:2: not a WEKA session: unknown variant `q`",
            ),
            (
                &format!("{text}\n{text}"),
                "session 2 (\"x\"): field `id`: \"x\" is also session 1's",
            ),
        ];
        for (text, expected) in cases {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{e} (expected {expected:?})");
        }
    }
}
