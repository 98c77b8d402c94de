//! OpenTelemetry traces of agent runs, as OTLP JSON exports (`resourceSpans[].scopeSpans[]
//! .spans[]`, one export after another in the file) whose spans follow the GenAI semantic
//! conventions: `gen_ai.operation.name` (`chat`, `text_completion`, `generate_content` for a
//! model call; `invoke_agent` for an agent; `execute_tool` for a tool), and on a model call
//! `gen_ai.usage.input_tokens` and `gen_ai.usage.output_tokens`. Times are
//! `startTimeUnixNano` and `endTimeUnixNano`; `parentSpanId` nests the spans.
//!
//! Replayable as far as the spans say: one OTel trace (`traceId`) is a task; its model calls
//! are its turns, of the recorded lengths, built from hash ids made here (64-token blocks):
//! a call that is at least its agent's previous call and answer long continues it, the rest
//! is new. A call belongs to the agent of its nearest `invoke_agent` ancestor. Within an
//! agent the calls follow each other; a sub-agent (an `invoke_agent` span inside another
//! agent's) starts after the latest call of its parent agent that ended before it began,
//! and the parent's first call after the sub-agent's span ended waits for its last call (a
//! join). A call's wait is its start less the latest end of what it waits for: the tools'
//! run and the user's time, as recorded. No text is recorded: the prompts are synthetic.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::parse::MAX_LENGTH;
use super::{DagIds, Input, TraceRecord};
use crate::error::{Error, Result};

/// Tokens a made-up hash id stands for.
pub const BLOCK_TOKENS: u64 = 64;

const MODEL_CALLS: [&str; 3] = ["chat", "text_completion", "generate_content"];

/// One span, as far as replay needs it.
#[derive(Clone, Debug)]
struct Span {
    id: String,
    parent: Option<String>,
    operation: String,
    start: u64,
    end: u64,
    input: Option<u64>,
    output: Option<u64>,
}

/// Reads the whole file, then hands out each task's model calls as records.
pub struct Otel {
    path: PathBuf,
    input: Option<Box<dyn BufRead + Send>>,
    queue: VecDeque<TraceRecord>,
}

impl Otel {
    pub fn new(input: Box<dyn BufRead + Send>, path: &Path) -> Otel {
        Otel {
            path: path.to_path_buf(),
            input: Some(input),
            queue: VecDeque::new(),
        }
    }

    pub fn next(&mut self, index: u64) -> Result<Option<TraceRecord>> {
        if let Some(input) = self.input.take() {
            let fail = |line: u64, message: String| Error::Trace {
                file: self.path.clone(),
                line,
                message,
            };
            let mut traces: BTreeMap<String, Vec<Span>> = BTreeMap::new();
            let mut docs = serde_json::Deserializer::from_reader(input).into_iter::<Value>();
            let mut n = 0;
            while let Some(doc) =
                super::next_document(&mut docs, &self.path, "an OTLP JSON export")?
            {
                n += 1;
                spans(&doc, &mut traces).map_err(|m| fail(n, format!("export {n}: {m}")))?;
            }
            let mut next_block = 0;
            for (trace, spans) in &traces {
                let records = task(trace, spans, &mut next_block)
                    .map_err(|m| fail(1, format!("trace {trace}: {m}")))?;
                self.queue.extend(records);
            }
            for (i, r) in self.queue.iter_mut().enumerate() {
                r.index = index + i as u64;
            }
        }
        Ok(self.queue.pop_front())
    }
}

/// An attribute's value (OTLP JSON writes integers as strings).
fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn int(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// Collects an export's spans by trace.
fn spans(doc: &Value, traces: &mut BTreeMap<String, Vec<Span>>) -> std::result::Result<(), String> {
    let resources = doc["resourceSpans"]
        .as_array()
        .ok_or("missing field `resourceSpans`")?;
    for scope in resources
        .iter()
        .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
    {
        for s in scope["spans"].as_array().into_iter().flatten() {
            let id = |k: &str| s[k].as_str().filter(|v| !v.is_empty()).map(str::to_string);
            let (Some(trace), Some(span)) = (id("traceId"), id("spanId")) else {
                return Err("a span without `traceId` or `spanId`".into());
            };
            let time = |k: &str| {
                int(&s[k]).ok_or_else(|| format!("span {span}: field `{k}`: not a time in ns"))
            };
            let operation = attribute(s, "gen_ai.operation.name")
                .and_then(|v| v["stringValue"].as_str())
                .unwrap_or_default()
                .to_string();
            let usage = |k: &str| attribute(s, k).and_then(|v| int(&v["intValue"]));
            traces.entry(trace).or_default().push(Span {
                parent: id("parentSpanId"),
                start: time("startTimeUnixNano")?,
                end: time("endTimeUnixNano")?,
                input: usage("gen_ai.usage.input_tokens"),
                output: usage("gen_ai.usage.output_tokens"),
                id: span,
                operation,
            });
        }
    }
    Ok(())
}

/// The agents of one trace: who each span belongs to.
struct Agents<'a> {
    by_id: HashMap<&'a str, &'a Span>,
    /// At most this many steps up (a cycle of parents ends there).
    depth: usize,
}

impl<'a> Agents<'a> {
    fn new(spans: &'a [Span]) -> Self {
        let by_id = spans.iter().map(|s| (s.id.as_str(), s)).collect();
        Agents {
            by_id,
            depth: spans.len(),
        }
    }

    /// The nearest agent above a span (None: the trace's own).
    fn of(&self, s: &Span) -> Option<&'a Span> {
        let parent = |s: &Span| s.parent.as_deref().and_then(|p| self.by_id.get(p).copied());
        let mut at = parent(s);
        for _ in 0..self.depth {
            let a = at?;
            if a.operation == "invoke_agent" {
                return Some(a);
            }
            at = parent(a);
        }
        None
    }

    fn key(&self, s: &Span) -> Option<&'a str> {
        self.of(s).map(|a| a.id.as_str())
    }
}

/// One trace's model calls as a task graph.
fn task(
    trace: &str,
    spans: &[Span],
    next_block: &mut u64,
) -> std::result::Result<Vec<TraceRecord>, String> {
    let agents = Agents::new(spans);
    let calls = model_calls(spans)?;
    let agent_name = |a: Option<&Span>| match a {
        None => trace.to_string(),
        Some(a) => format!("{trace}::sa:{}", a.id),
    };
    // Per agent: its calls so far (positions in `calls`).
    let mut done: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
    let mut joined: HashSet<&str> = HashSet::new();
    let mut out: Vec<TraceRecord> = Vec::new();
    let mut blocks: Vec<Vec<u64>> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let (input, output) = usage(call)?;
        let agent = agents.of(call);
        let key = agent.map(|a| a.id.as_str());
        let prev = done.get(&key).and_then(|d| d.last().copied());
        // A sub-agent's first call: after its parent agent's latest call ended before it.
        let spawner = match (prev, agent) {
            (None, Some(a)) => done
                .get(&agents.key(a))
                .and_then(|d| d.iter().rev().find(|&&j| calls[j].end <= a.start).copied()),
            _ => None,
        };
        // Joins: sub-agents of this agent whose span ended before this call began.
        let mut waits: Vec<usize> = prev.or(spawner).into_iter().collect();
        for s in spans
            .iter()
            .filter(|s| s.operation == "invoke_agent" && s.end <= call.start)
            .filter(|s| agents.key(s) == key)
        {
            let last = done.get(&Some(s.id.as_str())).and_then(|d| d.last());
            if let Some(&last) = last.filter(|_| !joined.contains(s.id.as_str())) {
                waits.push(last);
                joined.insert(&s.id);
            }
        }
        let waited_for = waits.iter().map(|&w| calls[w].end).max();
        let wait_ns = call.start.saturating_sub(waited_for.unwrap_or(call.start));
        // The previous call's prompt and answer, when this one's prompt holds them.
        let context = prev.map(|p| calls[p].input.unwrap_or(0) + calls[p].output.unwrap_or(0));
        let kept = prev.filter(|_| context.is_some_and(|c| input >= c));
        let ids = prompt_blocks(input, kept.map(|p| &blocks[p][..]), next_block);
        if let Some(d) = kept.and_then(|p| out[p].ids.dag.as_mut()) {
            d.heirs += 1;
        }
        let mut record = TraceRecord::task_turn(
            1,
            trace,
            Input::Synthetic {
                input_length: input,
                hash_ids: ids.clone(),
            },
            Some(output),
            DagIds {
                branch: agent_name(agent),
                parents_back: waits.iter().map(|&w| (i - w) as u64).collect(),
                wait_ms: wait_ns as f64 / 1e6,
                keeps_parent: kept.is_some(),
                fresh: prev.is_none() && spawner.is_some(),
                heirs: 0,
            },
        );
        record.ids.prefix_tokens = context.map(|c| if kept.is_some() { c } else { 0 });
        out.push(record);
        blocks.push(ids);
        done.entry(key).or_default().push(i);
    }
    Ok(out)
}

/// The trace's model calls, in the order they started; an error when it has none.
fn model_calls(spans: &[Span]) -> std::result::Result<Vec<&Span>, String> {
    let mut calls: Vec<&Span> = spans
        .iter()
        .filter(|s| MODEL_CALLS.contains(&s.operation.as_str()))
        .collect();
    if calls.is_empty() {
        return Err(
            "no model call span (gen_ai.operation.name chat, text_completion or generate_content)"
                .into(),
        );
    }
    calls.sort_by_key(|s| (s.start, s.end));
    Ok(calls)
}

/// A model call's input and output tokens, both present and in range.
fn usage(call: &Span) -> std::result::Result<(u64, u64), String> {
    let (Some(input), Some(output)) = (call.input, call.output) else {
        return Err(format!(
            "span {}: a model call without gen_ai.usage.input_tokens and \
             gen_ai.usage.output_tokens",
            call.id
        ));
    };
    if !(1..=MAX_LENGTH).contains(&input) || !(1..=MAX_LENGTH).contains(&output) {
        return Err(format!(
            "span {}: token counts must be 1 to {MAX_LENGTH}",
            call.id
        ));
    }
    Ok((input, output))
}

/// A prompt's hash ids: the kept call's blocks first, then new ones.
fn prompt_blocks(input: u64, kept: Option<&[u64]>, next_block: &mut u64) -> Vec<u64> {
    let count = input.div_ceil(BLOCK_TOKENS) as usize;
    let mut ids: Vec<u64> = kept
        .unwrap_or_default()
        .iter()
        .copied()
        .take(count)
        .collect();
    while ids.len() < count {
        ids.push(*next_block);
        *next_block += 1;
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_calls_become_turns_and_sub_agents_branch_and_join() {
        let text = include_str!("../../tests/data/agentic/otel_sample.json");
        let input: Box<dyn BufRead + Send> =
            Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let mut o = Otel::new(input, Path::new("o.json"));
        let mut r = Vec::new();
        while let Some(x) = o.next(r.len() as u64).unwrap() {
            r.push(x);
        }
        let dag = |i: usize| r[i].ids.dag.as_deref().unwrap();
        let branches: Vec<&str> = (0..r.len()).map(|i| dag(i).branch.as_str()).collect();
        let t = "5b8efff798038103d269b633813fc60c";
        let sub = format!("{t}::sa:00f067aa0ba90203");
        assert_eq!(
            branches,
            [
                format!("{t}::sa:00f067aa0ba90201"),
                sub.clone(),
                sub,
                format!("{t}::sa:00f067aa0ba90201")
            ]
        );
        assert_eq!(r[0].input_length(), Some(1200));
        // The sub-agent starts after the planner's first call, fresh; the planner's second
        // call joins it, 500 ms (the tool's run) after the sub-agent's last call ended.
        assert_eq!((dag(1).parents_back.clone(), dag(1).fresh), (vec![1], true));
        assert_eq!(dag(2).parents_back, [1]);
        assert!(dag(2).keeps_parent, "the explorer continues its context");
        assert_eq!(dag(3).parents_back, [3, 1]);
        assert_eq!(dag(3).wait_ms, 500.0);
        assert_eq!(
            r[3].hash_ids()[..19],
            r[0].hash_ids()[..19],
            "the planner continues its context"
        );
    }
}
