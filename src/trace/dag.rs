//! DAG conversations (AIPerf's `dag_jsonl`, `docs/benchmark-modes/dag.md`): one JSON object a
//! line, a conversation `{session_id, turns: [...]}`, whose turns are `{messages, max_tokens,
//! tools, extra, delay, forks, spawns}` (`messages` the turn's new ones; `delay` in ms).
//! A turn may branch:
//! - `forks: ["c"]`: conversation `c` continues this turn's whole history (its prompt and its
//!   live answer are carried into `c`'s first turn). A bare name ends the parent there;
//!   `{"child": "c", "background": true}` lets it run on.
//! - `spawns: ["c"]`: sub-agent `c` starts a context of its own once this turn has ended, and
//!   the parent's next turn waits for `c`'s last (a join); `{"children": [...], "join_at": N}`
//!   lets the parent run its turns up to N first.
//! - `pre_session_spawns: [...]` on a conversation: sub-agents sent with its first turn,
//!   waited for by nobody.
//!
//! A conversation that no other names is a task; the task is all it reaches. Its turns
//! become records of one task graph ([`super::DagIds`]), written depth first so that every
//! turn comes after all it waits for. Every task arrives at 0 (`--max-active-sessions` caps
//! how many run at once). Orchestrator conversations (turns made up by the loader) are not
//! read.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::parse::{MAX_LENGTH, MAX_WAIT_MS};
use super::{DagIds, Input, TraceRecord};
use crate::error::{Error, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conversation {
    session_id: String,
    #[serde(default)]
    turns: Vec<Turn>,
    #[serde(default)]
    pre_session_spawns: Vec<String>,
    #[serde(default)]
    orchestrator: bool,
    #[serde(default)]
    context_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    messages: Vec<Value>,
    /// Not sent: `--model` decides what the server sees.
    #[serde(default, rename = "model")]
    _model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    extra: Option<Map<String, Value>>,
    #[serde(default)]
    forks: Vec<Fork>,
    #[serde(default)]
    spawns: Vec<Spawn>,
    /// ms before this turn leaves, after what it waits for.
    #[serde(default)]
    delay: f64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Fork {
    Ends(String),
    Runs { child: String, background: bool },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Spawn {
    Next(String),
    Until {
        children: Vec<String>,
        join_at: usize,
    },
}

/// A conversation and the line it is on.
struct Read {
    line: u64,
    c: Conversation,
}

/// Reads the whole file, then hands out its tasks' turns as records.
pub struct Dag {
    path: PathBuf,
    input: Option<Box<dyn BufRead + Send>>,
    queue: std::collections::VecDeque<TraceRecord>,
}

impl Dag {
    pub fn new(input: Box<dyn BufRead + Send>, path: &Path) -> Dag {
        Dag {
            path: path.to_path_buf(),
            input: Some(input),
            queue: Default::default(),
        }
    }

    /// The next turn as record `index` (the whole file is read and checked at the first).
    pub fn next(&mut self, index: u64) -> Result<Option<TraceRecord>> {
        if let Some(input) = self.input.take() {
            let read = self.read(input)?;
            self.queue = expand(&read, index).map_err(|(line, message)| Error::Trace {
                file: self.path.clone(),
                line,
                message,
            })?;
        }
        Ok(self.queue.pop_front())
    }

    fn read(&self, input: Box<dyn BufRead + Send>) -> Result<Vec<Read>> {
        let mut out = Vec::new();
        for (n, line) in input.lines().enumerate() {
            let line = line.map_err(|e| Error::io(&self.path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let fail = |message: String| Error::Trace {
                file: self.path.clone(),
                line: n as u64 + 1,
                message,
            };
            let c: Conversation = serde_json::from_str(&line)
                .map_err(|e| fail(format!("not a DAG conversation: {e}")))?;
            if c.orchestrator {
                return Err(fail(format!(
                    "conversation {:?}: orchestrator conversations (request-less drivers) are not read; give its spawns as a turn's",
                    c.session_id
                )));
            }
            if c.turns.is_empty() {
                return Err(fail(format!(
                    "conversation {:?}: field `turns`: empty",
                    c.session_id
                )));
            }
            if let Some(mode) = c
                .context_mode
                .as_deref()
                .filter(|m| *m != "deltas_without_responses")
            {
                return Err(fail(format!(
                    "conversation {:?}: field `context_mode`: {mode:?} is not read (only the default, deltas_without_responses)",
                    c.session_id
                )));
            }
            out.push(Read {
                line: n as u64 + 1,
                c,
            });
        }
        Ok(out)
    }
}

type Fail = (u64, String);

/// How deep conversations may start within each other (a spawn in a fork in a spawn...):
/// far beyond any agent's, and a bound on the walk that places them (5,000 levels
/// overflowed its stack).
const MAX_NESTING: u32 = 128;

/// Every task's turns, depth first, numbered from `base`.
fn expand(
    read: &[Read],
    base: u64,
) -> std::result::Result<std::collections::VecDeque<TraceRecord>, Fail> {
    let by_id: HashMap<&str, &Read> = read.iter().map(|r| (r.c.session_id.as_str(), r)).collect();
    if by_id.len() != read.len() {
        let mut seen = HashMap::new();
        for r in read {
            if let Some(first) = seen.insert(r.c.session_id.as_str(), r.line) {
                return Err((
                    r.line,
                    format!("session_id {:?} is also on line {first}", r.c.session_id),
                ));
            }
        }
    }
    // The conversations reached from a turn (each from one at most), and whether they keep
    // its history (a fork).
    let mut reached: HashMap<&str, bool> = HashMap::new();
    let mut joins: HashMap<(&str, usize), Vec<&str>> = HashMap::new();
    for r in read {
        let id = r.c.session_id.as_str();
        let n = r.c.turns.len();
        let mut reach = |child: &str, keeps: bool| -> std::result::Result<(), Fail> {
            let Some((&name, _)) = by_id.get_key_value(child) else {
                return Err((
                    r.line,
                    format!("conversation {id:?} names {child:?}, which no line defines"),
                ));
            };
            match reached.insert(name, keeps) {
                Some(_) => Err((
                    r.line,
                    format!("conversation {child:?} is reached from more than one turn"),
                )),
                None => Ok(()),
            }
        };
        for child in &r.c.pre_session_spawns {
            reach(child, false)?;
        }
        for (k, turn) in r.c.turns.iter().enumerate() {
            for fork in &turn.forks {
                let child = match fork {
                    Fork::Ends(c)
                    | Fork::Runs {
                        child: c,
                        background: false,
                    } if k + 1 < n => {
                        return Err((r.line, format!("conversation {id:?} turn {k}: a bare fork {c:?} ends the conversation, but turns follow (use {{\"child\": {c:?}, \"background\": true}})")));
                    }
                    Fork::Ends(c) | Fork::Runs { child: c, .. } => c,
                };
                reach(child, true)?;
            }
            for spawn in &turn.spawns {
                let (children, join_at) = match spawn {
                    Spawn::Next(c) => (std::slice::from_ref(c), k + 1),
                    Spawn::Until { children, join_at } => (children.as_slice(), *join_at),
                };
                if join_at <= k || (join_at >= n && !matches!(spawn, Spawn::Next(_))) {
                    return Err((r.line, format!("conversation {id:?} turn {k}: field `join_at`: {join_at} must be after {k} and below its {n} turns")));
                }
                for child in children {
                    reach(child, false)?;
                    // A spawn on the last turn has no turn after it to join it.
                    if join_at < n {
                        joins.entry((id, join_at)).or_default().push(child.as_str());
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    // Where each conversation's turns landed (positions in `out`).
    let mut placed: HashMap<&str, Vec<usize>> = HashMap::new();
    for r in read
        .iter()
        .filter(|r| !reached.contains_key(r.c.session_id.as_str()))
    {
        let task = r.c.session_id.as_str();
        place(
            (task, 0),
            task,
            None,
            &by_id,
            &reached,
            &joins,
            &mut placed,
            &mut out,
        )?;
    }
    if let Some(lost) = read
        .iter()
        .find(|r| !placed.contains_key(r.c.session_id.as_str()))
    {
        return Err((
            lost.line,
            format!(
                "conversation {:?} is only reached from itself (a cycle)",
                lost.c.session_id
            ),
        ));
    }
    Ok(out
        .into_iter()
        .enumerate()
        .map(|(i, mut rec)| {
            rec.index = base + i as u64;
            rec
        })
        .collect())
}

/// Writes conversation `id` of `task` (reached from `parent`, a position in `out`, at
/// `depth` levels below the task's own), then each child after the turn that branches to it.
#[allow(clippy::too_many_arguments)]
fn place<'a>(
    (task, depth): (&str, u32),
    id: &'a str,
    parent: Option<usize>,
    by_id: &HashMap<&'a str, &'a Read>,
    reached: &HashMap<&'a str, bool>,
    joins: &HashMap<(&'a str, usize), Vec<&'a str>>,
    placed: &mut HashMap<&'a str, Vec<usize>>,
    out: &mut Vec<TraceRecord>,
) -> std::result::Result<(), Fail> {
    let r = by_id[id];
    if placed.insert(id, Vec::new()).is_some() {
        return Ok(());
    }
    if depth > MAX_NESTING {
        return Err((
            r.line,
            format!("conversation {id:?} starts more than {MAX_NESTING} levels below its task's (spawns and forks within each other)"),
        ));
    }
    let below = (task, depth + 1);
    let keeps = reached.get(id).copied().unwrap_or(false);
    for child in &r.c.pre_session_spawns {
        place(below, child, None, by_id, reached, joins, placed, out)?;
    }
    for (k, turn) in r.c.turns.iter().enumerate() {
        let before = match k {
            0 => parent,
            _ => placed[id].last().copied(),
        };
        let mut waits: Vec<usize> = before.into_iter().collect();
        for child in joins.get(&(id, k)).into_iter().flatten() {
            let Some(&last) = placed.get(child).and_then(|t| t.last()) else {
                return Err((
                    r.line,
                    format!(
                        "conversation {id:?} turn {k} joins {child:?}, which has not run by then"
                    ),
                ));
            };
            waits.push(last);
        }
        let here = out.len();
        if turn.delay.is_nan() || turn.delay > MAX_WAIT_MS {
            return Err((
                r.line,
                format!(
                    "conversation {id:?} turn {k}: field `delay`: {:e} ms, more than {MAX_WAIT_MS:e}",
                    turn.delay
                ),
            ));
        }
        let length = turn.max_tokens.filter(|&m| (1..=MAX_LENGTH).contains(&m));
        if turn.max_tokens.is_some() && length.is_none() {
            return Err((
                r.line,
                format!(
                    "conversation {id:?} turn {k}: field `max_tokens`: must be 1 to {MAX_LENGTH}"
                ),
            ));
        }
        if turn.messages.is_empty() || !turn.messages.iter().all(|m| m["role"].is_string()) {
            return Err((r.line, format!("conversation {id:?} turn {k}: field `messages`: a non-empty array of objects with a string `role`")));
        }
        let mut record = TraceRecord::task_turn(
            r.line,
            task,
            Input::Messages {
                messages: turn.messages.clone(),
                tools: turn.tools.clone(),
            },
            length,
            DagIds {
                branch: id.to_string(),
                parents_back: waits.iter().map(|&w| (here - w) as u64).collect(),
                wait_ms: turn.delay.max(0.0),
                keeps_parent: k > 0 || keeps,
                fresh: k == 0 && parent.is_some() && !keeps,
                heirs: 0,
            },
        );
        record.extra = turn.extra.clone();
        out.push(record);
        // Its heirs: the turn after it, and the conversations forked from it.
        let mut heirs = u32::from(k + 1 < r.c.turns.len());
        placed.get_mut(id).expect("inserted above").push(here);
        for fork in &turn.forks {
            let (Fork::Ends(c) | Fork::Runs { child: c, .. }) = fork;
            heirs += 1;
            place(below, c, Some(here), by_id, reached, joins, placed, out)?;
        }
        for spawn in &turn.spawns {
            let children = match spawn {
                Spawn::Next(c) => std::slice::from_ref(c),
                Spawn::Until { children, .. } => children.as_slice(),
            };
            for c in children {
                place(below, c, Some(here), by_id, reached, joins, placed, out)?;
            }
        }
        if let Some(d) = out[here].ids.dag.as_mut() {
            d.heirs = heirs;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Vec<TraceRecord>> {
        let input: Box<dyn BufRead + Send> =
            Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let mut d = Dag::new(input, Path::new("d.jsonl"));
        let mut out = Vec::new();
        while let Some(r) = d.next(out.len() as u64)? {
            out.push(r);
        }
        Ok(out)
    }

    fn dag(r: &TraceRecord) -> &DagIds {
        r.ids.dag.as_deref().unwrap()
    }

    const U: &str = r#"[{"role":"user","content":"x"}]"#;

    #[test]
    fn forks_continue_spawns_start_fresh_and_joins_wait_for_every_branch() {
        let text = format!(
            r#"{{"session_id":"root","turns":[{{"messages":{U},"max_tokens":8,"spawns":[{{"children":["a","b"],"join_at":2}}]}},{{"messages":{U}}},{{"messages":{U},"forks":["f"]}}]}}
{{"session_id":"a","turns":[{{"messages":{U}}},{{"messages":{U},"delay":5}}]}}
{{"session_id":"b","turns":[{{"messages":{U}}}]}}
{{"session_id":"f","turns":[{{"messages":{U}}}]}}
{{"session_id":"other","turns":[{{"messages":{U}}}]}}"#
        );
        let r = load(&text).unwrap();
        let names: Vec<&str> = r.iter().map(|r| dag(r).branch.as_str()).collect();
        assert_eq!(names, ["root", "a", "a", "b", "root", "root", "f", "other"]);
        assert!(r[..7]
            .iter()
            .all(|r| r.ids.session_id.as_deref() == Some("root")));
        assert_eq!(r[0].output_length, Some(8));
        // The sub-agents start after the spawning turn, fresh; a's second turn continues a.
        assert_eq!(
            (dag(&r[1]).parents_back.clone(), dag(&r[1]).keeps_parent),
            (vec![1], false)
        );
        assert_eq!(
            (dag(&r[2]).parents_back.clone(), dag(&r[2]).keeps_parent),
            (vec![1], true)
        );
        assert_eq!(dag(&r[2]).wait_ms, 5.0);
        assert_eq!(dag(&r[3]).parents_back, [3]);
        // root's turn 1 runs beside them; turn 2 joins both.
        assert_eq!(dag(&r[4]).parents_back, [4]);
        assert_eq!(dag(&r[5]).parents_back, [1, 3, 2]);
        // The fork continues root's last turn, which it inherits.
        assert_eq!(
            (dag(&r[6]).parents_back.clone(), dag(&r[6]).keeps_parent),
            (vec![1], true)
        );
        assert_eq!(dag(&r[5]).heirs, 1);
        assert!(dag(&r[1]).fresh && dag(&r[3]).fresh && !dag(&r[6]).fresh);
        assert_eq!(dag(&r[0]).heirs, 1, "its next turn; the spawns start fresh");
        assert!(dag(&r[7]).parents_back.is_empty());
    }

    #[test]
    fn what_cannot_hold_is_named_by_line_and_field() {
        let c = |id: &str, extra: &str| {
            format!(
                r#"{{"session_id":"{id}","turns":[{{"messages":{U}{extra}}},{{"messages":{U}}}]}}"#
            )
        };
        let cases = [
            (
                c("r", r#","forks":["x"]"#) + "\n" + &c("x", ""),
                "d.jsonl:1: conversation \"r\" turn 0: a bare fork \"x\" ends the conversation",
            ),
            (
                c("r", r#","spawns":["nope"]"#),
                "names \"nope\", which no line defines",
            ),
            (
                c("r", r#","spawns":["x"]"#)
                    + "\n"
                    + &c("x", "")
                    + "\n"
                    + &c("q", r#","spawns":["x"]"#),
                "\"x\" is reached from more than one turn",
            ),
            (
                c("r", "") + "\n" + &c("r", ""),
                "d.jsonl:2: session_id \"r\" is also on line 1",
            ),
            (
                r#"{"session_id":"o","orchestrator":true,"spawns":["a"]}"#.to_string(),
                "d.jsonl:1: not a DAG conversation",
            ),
            (
                c("r", r#","spawns":[{"children":["x"],"join_at":0}]"#) + "\n" + &c("x", ""),
                "field `join_at`: 0 must be after 0",
            ),
            (c("r", r#","wat":1"#), "unknown field `wat`"),
            (
                c("r", r#","delay":1e300"#),
                "field `delay`: 1e300 ms, more than 1e10",
            ),
            // A chain of spawns 5,000 deep (each conversation spawning the next).
            (
                (0..5000)
                    .map(|i| c(&format!("s{i}"), &format!(r#","spawns":["s{}"]"#, i + 1)))
                    .chain([c("s5000", "")])
                    .collect::<Vec<_>>()
                    .join("\n"),
                "conversation \"s129\" starts more than 128 levels below its task's",
            ),
        ];
        for (text, expected) in cases {
            let e = load(&text).unwrap_err().to_string();
            assert!(e.contains(expected), "{e} (expected {expected:?})");
        }
    }
}
