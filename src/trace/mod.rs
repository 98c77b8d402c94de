//! Trace formats: reading JSONL traces record by record, in bounded memory.
//!
//! A trace is turned into [`TraceRecord`]s, one per non-blank line, numbered from 0 (`index`).
//! Every parse error names the file, the 1-based line and the field.

mod atif;
mod csv;
mod dag;
mod formats;
pub mod inspect;
mod order;
mod otel;
mod parse;
mod reader;
mod source;
mod tracelab;
mod weka;

pub use formats::{Layout, Spec, FORMATS};
pub use order::{OrderStats, OrderedReader, WINDOW as ORDER_WINDOW};
pub use parse::{parse_record, MAX_WAIT_MS};
pub use reader::{block_size, detect_format, RawLine, ReadOptions, Skipped, TraceReader};
pub use source::{TraceFile, MAX_LINE_BYTES};

use serde_json::{Map, Value};

/// The next JSON document of a stream of them (one after another, one a line or each
/// pretty-printed); a broken one is an error naming the file and its line, as `what`.
fn next_document<R: std::io::Read, T: serde::de::DeserializeOwned>(
    docs: &mut serde_json::StreamDeserializer<'static, serde_json::de::IoRead<R>, T>,
    path: &std::path::Path,
    what: &str,
) -> crate::error::Result<Option<T>> {
    docs.next()
        .transpose()
        .map_err(|e| crate::error::Error::Trace {
            file: path.to_path_buf(),
            line: e.line() as u64,
            message: format!("not {what}: {e}"),
        })
}

crate::choices! {
    /// The trace formats llmreplay understands (CONTRACT §3).
    #[derive(Default)]
    pub enum Format {
        /// Decide from the first record: a CSV header names its format; a JSON object with
        /// `requests` is weka, `turns` dag, `steps` atif, `resourceSpans` otel, `chat_id`
        /// bailian, anything else mooncake.
        #[default]
        Auto = "auto",
        /// Mooncake FAST'25 / AIPerf `mooncake_trace`: timestamps in ms, 512-token blocks.
        Mooncake = "mooncake",
        /// Alibaba Qwen-Bailian: timestamps in seconds, 16-token blocks, chat_id chains.
        Bailian = "bailian",
        /// Azure LLM inference traces (CSV): TIMESTAMP (date-time), ContextTokens,
        /// GeneratedTokens; no hash ids.
        Azure = "azure",
        /// BurstGPT (CSV): Timestamp (s), Request tokens, Response tokens[, Session ID]; no
        /// hash ids.
        Burstgpt = "burstgpt",
        /// TraceLab coding-agent sessions (CSV): session_id (or id), round_idx, prefix_len,
        /// input_len, output_len, tool_wait_after_ms[, arrival_time in ms]; closed-loop rounds.
        Tracelab = "tracelab",
        /// WEKA / AgentX agentic coding sessions (JSON, one object a session): calls with
        /// 64-token hash ids, sub-agents that fork and join, tool waits; closed-loop.
        Weka = "weka",
        /// DAG conversations (AIPerf's dag_jsonl: `session_id`, `turns` of `messages`,
        /// `forks`, `spawns`, `delay`): sub-agents that fork, spawn and join; closed-loop.
        Dag = "dag",
        /// ATIF trajectories (v1.0 to v1.7: `steps` of user, agent and system, tool calls,
        /// observations, embedded sub-agent trajectories): each model call a turn.
        Atif = "atif",
        /// OpenTelemetry agent traces (OTLP JSON, GenAI conventions): model-call spans are
        /// turns, `invoke_agent` spans agents, the time between them waits.
        Otel = "otel",
    }
}

/// What the prompt of a record is made of.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// No text: build `input_length` tokens whose blocks follow `hash_ids`.
    Synthetic {
        input_length: u64,
        hash_ids: Vec<u64>,
    },
    /// `text_input`, sent verbatim.
    Text {
        text: String,
        input_length: Option<u64>,
    },
    /// `messages` (+ `tools`), sent verbatim (chat API only).
    Messages {
        messages: Vec<Value>,
        tools: Option<Value>,
    },
}

/// Identifiers carried through to the per-request records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceIds {
    pub session_id: Option<String>,
    pub chat_id: Option<i64>,
    pub parent_chat_id: Option<i64>,
    /// Mooncake / AIPerf `delay`: the think time (ms) before this turn, after its parent's end.
    pub delay_ms: Option<f64>,
    /// The trace's own count of this turn's tokens that an earlier turn left in the cache
    /// (TraceLab's `prefix_len`).
    pub prefix_tokens: Option<u64>,
    /// TraceLab's `tool_wait_after_ms`: the wait after this turn's answer before its
    /// session's next turn (ms).
    pub wait_after_ms: Option<f64>,
    /// A turn of an agentic task graph (sub-agents, joins): its links, as its loader made
    /// them. `session_id` is then the task.
    pub dag: Option<Box<DagIds>>,
    /// AIPerf's `message_mode: delta`: the record's `messages` are its turn's new ones, and
    /// the live answers thread them (its default history mode sends each verbatim).
    pub delta: bool,
}

/// A turn's place in a task graph ([`crate::session`] links it from these alone).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DagIds {
    /// The agent (branch) the turn belongs to: the task's own, or a sub-agent's.
    pub branch: String,
    /// The turns it waits for, as record counts back from it (a distance, so the links hold
    /// in every `--loop` pass). The first is the turn whose context it continues; more are
    /// a join. Empty for the task's first turn.
    pub parents_back: Vec<u64>,
    /// The wait after the last of its parents ends (a tool's run, a user's think time), ms.
    pub wait_ms: f64,
    /// Its prompt begins with its first parent's whole prompt and answer.
    pub keeps_parent: bool,
    /// It starts an agent's context of its own (a spawned sub-agent's first turn): nothing
    /// is carried into it, and nothing needs saying.
    pub fresh: bool,
    /// Turns that continue this one's context (children that carry its answer).
    pub heirs: u32,
}

/// One request of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    /// Record number in the trace, 0-based, blank lines not counted.
    pub index: u64,
    /// 1-based line number in the file, for messages.
    pub line: u64,
    /// Arrival time in milliseconds, as in the trace (not yet made relative).
    pub timestamp_ms: Option<f64>,
    pub input: Input,
    pub output_length: Option<u64>,
    pub ids: TraceIds,
    /// Shallow-merged into the top level of this request's body.
    pub extra: Option<Map<String, Value>>,
}

impl TraceRecord {
    /// The input token count the trace asks for, when it states one.
    pub fn input_length(&self) -> Option<u64> {
        match &self.input {
            Input::Synthetic { input_length, .. } => Some(*input_length),
            Input::Text { input_length, .. } => *input_length,
            Input::Messages { .. } => None,
        }
    }

    pub fn hash_ids(&self) -> &[u64] {
        match &self.input {
            Input::Synthetic { hash_ids, .. } => hash_ids,
            _ => &[],
        }
    }

    /// A turn of a task graph read from line `line` (numbered later): every task arrives at
    /// 0, and its links say when the turn leaves.
    pub fn task_turn(
        line: u64,
        task: &str,
        input: Input,
        output_length: Option<u64>,
        dag: DagIds,
    ) -> TraceRecord {
        TraceRecord {
            index: 0,
            line,
            timestamp_ms: Some(0.0),
            input,
            output_length,
            ids: TraceIds {
                session_id: Some(task.to_string()),
                dag: Some(Box::new(dag)),
                ..TraceIds::default()
            },
            extra: None,
        }
    }

    /// Record `index` at `index` ms with one 16-token block, for unit tests of what is
    /// decided from ids.
    #[cfg(test)]
    pub fn for_test(index: u64, ids: TraceIds) -> TraceRecord {
        TraceRecord {
            index,
            line: index + 1,
            timestamp_ms: Some(index as f64),
            input: Input::Synthetic {
                input_length: 16,
                hash_ids: vec![index],
            },
            output_length: Some(1),
            ids,
            extra: None,
        }
    }
}
