//! ATIF trajectories (the Agent Trajectory Interchange Format, harbor-framework RFC 0001,
//! v1.0 to v1.7): one JSON object a trajectory (`schema_version`, `session_id` or
//! `trajectory_id`, `agent`, `steps`, `subagent_trajectories`), one after another in the file.
//! A step is the user's, the system's or the agent's (`source`), with its `message`; an
//! agent step holds the agent's `tool_calls` (`tool_call_id`, `function_name`, `arguments`),
//! the `observation` that answered them (`results` of `source_call_id` and `content`, or a
//! `subagent_trajectory_ref` to a trajectory embedded in `subagent_trajectories`), and its
//! `metrics` (`prompt_tokens`, `completion_tokens`).
//!
//! Each agent step that called the model (all but those with `llm_call_count: 0`) becomes a
//! turn, sent with the whole conversation before it as OpenAI chat messages: the system and
//! user messages, every earlier agent step as an assistant message (its tool calls in it),
//! and their observations as tool messages. Live threading ([`crate::carry::messages`])
//! then replaces each recorded answer with the one the server gave. Its answer length is the
//! step's `completion_tokens`. A turn leaves after the agent's previous turn plus the user's
//! time before it (from the steps' timestamps; none where the steps between are tool results).
//! A sub-agent's turns are a branch spawned by the step that called it, and the agent's next
//! turn waits for the branch's last (a join).

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::de::IoRead;
use serde_json::{json, Value};

use super::parse::MAX_LENGTH;
use super::{DagIds, Input, TraceRecord};
use crate::error::{Error, Result};

#[derive(Deserialize)]
struct Trajectory {
    schema_version: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    trajectory_id: Option<String>,
    #[serde(default)]
    agent: Value,
    steps: Vec<Step>,
    #[serde(default)]
    subagent_trajectories: Vec<Trajectory>,
}

#[derive(Deserialize)]
struct Step {
    source: String,
    #[serde(default)]
    message: Value,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    observation: Option<Observation>,
    #[serde(default)]
    metrics: Option<Metrics>,
    #[serde(default)]
    llm_call_count: Option<u64>,
}

#[derive(Deserialize)]
struct ToolCall {
    tool_call_id: String,
    function_name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct Observation {
    #[serde(default)]
    results: Vec<ObservationResult>,
}

#[derive(Deserialize)]
struct ObservationResult {
    #[serde(default)]
    source_call_id: Option<String>,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    subagent_trajectory_ref: Vec<Value>,
}

#[derive(Deserialize)]
struct Metrics {
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// Reads trajectories one at a time and hands out their model calls as records.
pub struct Atif {
    path: PathBuf,
    docs: serde_json::StreamDeserializer<'static, IoRead<Box<dyn BufRead + Send>>, Trajectory>,
    queue: VecDeque<TraceRecord>,
    read: u64,
}

/// A model call placed in its task: its record, and the calls it waits for (positions).
struct Call {
    record: TraceRecord,
    waits: Vec<usize>,
    fresh: bool,
}

impl Atif {
    pub fn new(input: Box<dyn BufRead + Send>, path: &Path) -> Atif {
        Atif {
            path: path.to_path_buf(),
            docs: serde_json::Deserializer::from_reader(input).into_iter(),
            queue: VecDeque::new(),
            read: 0,
        }
    }

    /// The next model call as record `index`; `Ok(None)` at the end.
    pub fn next(&mut self, index: u64) -> Result<Option<TraceRecord>> {
        while self.queue.is_empty() {
            let Some(t) = super::next_document(&mut self.docs, &self.path, "an ATIF trajectory")?
            else {
                return Ok(None);
            };
            self.read += 1;
            let fail = |message: String| Error::Trace {
                file: self.path.clone(),
                line: self.read,
                message: format!("trajectory {}: {message}", self.read),
            };
            if !t.schema_version.starts_with("ATIF-v1.") {
                return Err(fail(format!(
                    "field `schema_version`: {:?}; ATIF-v1.0 to ATIF-v1.7 are read",
                    t.schema_version
                )));
            }
            let task = t
                .session_id
                .clone()
                .or_else(|| t.trajectory_id.clone())
                .unwrap_or_else(|| format!("trajectory-{}", self.read));
            let mut calls = Vec::new();
            agent(&t, &task, &task, None, self.read, &mut calls).map_err(fail)?;
            let n = calls.len();
            for (i, c) in calls.into_iter().enumerate() {
                let mut record = c.record;
                record.index = index + i as u64;
                if let Some(d) = record.ids.dag.as_mut() {
                    d.parents_back = c.waits.iter().map(|&w| (i - w) as u64).collect();
                    d.fresh = c.fresh;
                }
                self.queue.push_back(record);
            }
            if n == 0 {
                return Err(fail("no agent step called the model".into()));
            }
        }
        Ok(self.queue.pop_front())
    }
}

/// Places one trajectory's model calls (spawned by call `spawner`); returns its last.
fn agent(
    t: &Trajectory,
    task: &str,
    branch: &str,
    spawner: Option<usize>,
    line: u64,
    calls: &mut Vec<Call>,
) -> std::result::Result<Option<usize>, String> {
    let embedded: HashMap<&str, &Trajectory> = t
        .subagent_trajectories
        .iter()
        .filter_map(|s| s.trajectory_id.as_deref().map(|id| (id, s)))
        .collect();
    let tools = t.agent.get("tool_definitions").cloned();
    let mut messages: Vec<Value> = Vec::new();
    let mut prev: Option<usize> = None;
    let mut prev_at: Option<f64> = None;
    let mut user_at: Option<f64> = None;
    let mut joins: Vec<usize> = Vec::new();
    // Each embedded sub-agent runs once, at its first reference.
    let mut referenced: HashMap<&str, usize> = HashMap::new();
    for (i, step) in t.steps.iter().enumerate() {
        let at = step.timestamp.as_deref().and_then(seconds);
        match step.source.as_str() {
            "system" | "user" => {
                messages.push(json!({"role": step.source, "content": text(&step.message)}));
                user_at = at.or(user_at);
            }
            "agent" => {
                if step.llm_call_count != Some(0) {
                    let out = step.metrics.as_ref().and_then(|m| m.completion_tokens);
                    if out.is_some_and(|o| o == 0 || o > MAX_LENGTH) {
                        return Err(format!(
                            "step {}: field `metrics.completion_tokens`: must be 1 to {MAX_LENGTH}",
                            i + 1
                        ));
                    }
                    if messages.is_empty() {
                        return Err(format!(
                            "step {}: an agent step with nothing before it to answer",
                            i + 1
                        ));
                    }
                    let wait_ms = match (prev_at, user_at) {
                        (Some(p), Some(u)) if u > p => (u - p) * 1000.0,
                        _ => 0.0,
                    };
                    let waits: Vec<usize> = prev
                        .or(spawner)
                        .into_iter()
                        .chain(joins.drain(..))
                        .collect();
                    // The agent's previous call is continued by this one.
                    if let Some(d) = prev.and_then(|p| calls[p].record.ids.dag.as_mut()) {
                        d.heirs += 1;
                    }
                    calls.push(Call {
                        record: TraceRecord::task_turn(
                            line,
                            task,
                            Input::Messages {
                                messages: messages.clone(),
                                tools: tools.clone(),
                            },
                            out,
                            DagIds {
                                branch: branch.to_string(),
                                wait_ms,
                                keeps_parent: prev.is_some(),
                                ..DagIds::default()
                            },
                        ),
                        waits,
                        fresh: prev.is_none() && spawner.is_some(),
                    });
                    prev = Some(calls.len() - 1);
                    prev_at = at;
                    user_at = None;
                }
                messages.push(assistant(step));
                for r in step.observation.iter().flat_map(|o| &o.results) {
                    for reference in &r.subagent_trajectory_ref {
                        let id = reference["trajectory_id"].as_str().unwrap_or_default();
                        let sub = embedded.get(id).ok_or_else(|| {
                            format!("step {}: subagent_trajectory_ref {id:?} is not among its subagent_trajectories", i + 1)
                        })?;
                        if let Some(first) = referenced.insert(id, i + 1) {
                            return Err(format!(
                                "step {}: subagent_trajectory_ref {id:?} again (first at step \
                                 {first}): a sub-agent's trajectory runs once",
                                i + 1
                            ));
                        }
                        let name = format!("{branch}::sa:{id}");
                        joins.extend(agent(sub, task, &name, prev, line, calls)?);
                    }
                    messages.push(json!({"role": "tool",
                        "tool_call_id": r.source_call_id.clone().unwrap_or_default(),
                        "content": text(&r.content)}));
                }
            }
            other => {
                return Err(format!(
                    "step {}: field `source`: {other:?}; expected user, agent or system",
                    i + 1
                ))
            }
        }
    }
    Ok(prev)
}

/// An agent step as the assistant message a client sends back.
fn assistant(step: &Step) -> Value {
    let mut m = json!({"role": "assistant", "content": text(&step.message)});
    if !step.tool_calls.is_empty() {
        m["tool_calls"] = step
            .tool_calls
            .iter()
            .map(|c| {
                let arguments = match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({"id": c.tool_call_id, "type": "function",
                       "function": {"name": c.function_name, "arguments": arguments}})
            })
            .collect();
    }
    m
}

/// A message's text (a string, or content parts whose texts are joined).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An ISO 8601 time (`2026-10-05T12:00:00.250Z`, or with an offset) as Unix seconds. Laxer
/// than RFC 3339 ([`crate::sys::wall_start`]): a zone or the seconds may be left out, as
/// trajectories write them.
fn seconds(iso: &str) -> Option<f64> {
    let (date, time) = iso.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let end = time.find(['Z', '+', '-']).unwrap_or(time.len());
    let offset = match &time[end..] {
        "" | "Z" => 0.0,
        o => {
            let sign = if o.starts_with('-') { -1.0 } else { 1.0 };
            let mut hm = o[1..].split(':').map(|p| p.parse::<f64>().ok());
            sign * (hm.next()?? * 3600.0 + hm.next().flatten().unwrap_or(0.0) * 60.0)
        }
    };
    let mut t = time[..end].split(':').map(|p| p.parse::<f64>().ok());
    let (h, mi, s) = (t.next()??, t.next()??, t.next().flatten().unwrap_or(0.0));
    let days = crate::sys::wall_start::days_from_civil(y, mo, da);
    Some(days as f64 * 86_400.0 + h * 3600.0 + mi * 60.0 + s - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Vec<TraceRecord>> {
        let input: Box<dyn BufRead + Send> =
            Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let mut a = Atif::new(input, Path::new("a.json"));
        let mut out = Vec::new();
        while let Some(r) = a.next(out.len() as u64)? {
            out.push(r);
        }
        Ok(out)
    }

    #[test]
    fn agent_steps_become_turns_with_the_conversation_before_them() {
        let r = load(include_str!("../../tests/data/agentic/atif_sample.json")).unwrap();
        let dag = |i: usize| r[i].ids.dag.as_deref().unwrap();
        let messages = |i: usize| match &r[i].input {
            Input::Messages { messages, .. } => messages.clone(),
            _ => unreachable!(),
        };
        let branches: Vec<&str> = (0..r.len()).map(|i| dag(i).branch.as_str()).collect();
        assert_eq!(
            branches,
            [
                "fix-42",
                "fix-42::sa:explore-1",
                "fix-42::sa:explore-1",
                "fix-42"
            ]
        );
        // The first call answers the system and user messages.
        assert_eq!(messages(0).len(), 2);
        assert_eq!(r[0].output_length, Some(12));
        // The sub-agent starts fresh after the call that delegated to it, and is joined.
        assert_eq!((dag(1).parents_back.clone(), dag(1).fresh), (vec![1], true));
        assert_eq!(dag(3).parents_back, [3, 1]);
        // Each call is continued by its agent's next one: its history is kept for one heir.
        let heirs: Vec<u32> = (0..r.len()).map(|i| dag(i).heirs).collect();
        assert_eq!(heirs, [1, 1, 0, 0]);
        // The main agent's second call: its first answer (a tool call) and both results.
        let m = messages(3);
        assert_eq!(m[2]["role"], "assistant");
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "run_tests");
        assert_eq!(m[3]["tool_call_id"], "call_1");
        assert_eq!(m[4]["tool_call_id"], "call_2");
        // The user's 3 s after the agent's last step.
        assert_eq!(dag(3).wait_ms, 3000.0);
        assert_eq!(
            seconds("2026-10-05T12:00:01.5+01:00"),
            seconds("2026-10-05T11:00:01.5Z")
        );
        let e = load(r#"{"schema_version":"ATIF-v1.7","steps":[{"step_id":1,"source":"robot"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("trajectory 1: step 1: field `source`: \"robot\""),
            "{e}"
        );
    }

    /// A sub-agent referenced twice would replay twice as one branch: an error naming both
    /// steps.
    #[test]
    fn a_sub_agent_referenced_twice_is_an_error() {
        let sample = include_str!("../../tests/data/agentic/atif_sample.json");
        let one = r#"[{"trajectory_id": "explore-1"}]"#;
        let twice = sample.replacen(
            one,
            r#"[{"trajectory_id": "explore-1"}, {"trajectory_id": "explore-1"}]"#,
            1,
        );
        assert_ne!(twice, sample);
        let e = load(&twice).unwrap_err().to_string();
        assert!(
            e.contains("subagent_trajectory_ref \"explore-1\" again (first at step 3)"),
            "{e}"
        );
    }
}
