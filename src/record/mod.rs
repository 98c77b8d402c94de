//! The per-request record (CONTRACT §5): what the sender measured, derived metrics with the
//! definitions of CONTRACT §7, and the JSONL writer that flushes records as they arrive.

use std::fmt;
use std::io::{self, Write};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::server_timing::ServerPhases;
use crate::trace::TraceIds;

pub mod captured;
pub mod line;
pub mod trace_replayer;

crate::choices! {
    /// The field names records are written with (`--record-format`).
    #[derive(Default)]
    pub enum RecordFormat {
        /// CONTRACT §5 (requests.jsonl always).
        #[default]
        Llmreplay = "llmreplay",
        /// trace-replayer's names, for scripts written against its output (see
        /// [`trace_replayer`]).
        TraceReplayer = "trace-replayer",
    }
}

impl RecordFormat {
    /// Reads a record line of either format (`line_index`: its index when it names none).
    pub fn read_any(v: &Value, line_index: u64) -> Result<RequestRecord, String> {
        if trace_replayer::is_trace_replayer(v) {
            trace_replayer::from_json(v, line_index)
        } else if captured::is_captured(v) {
            captured::from_json(v)
        } else {
            RequestRecord::from_json(v)
        }
    }
}

/// Why a request failed (CONTRACT §5 `error.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// Could not connect to the endpoint.
    Connect,
    /// No complete response within `--request-timeout`.
    Timeout,
    /// The connection was reset or closed in the middle of the exchange.
    Reset,
    /// The server answered with a non-success status, or an error event.
    Http,
    /// The response broke HTTP, chunked or SSE framing.
    Protocol,
    /// The TLS handshake or a TLS record failed.
    Tls,
    /// The run was stopped (a signal) before the request finished.
    Cancelled,
    /// A success status whose answer held no output token, though tokens were asked for.
    Empty,
    /// The endpoint went away (it refuses new connections) while this request waited for its
    /// answer, silent for `--stall-timeout`.
    EndpointDown,
    /// Another I/O error.
    Io,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Http => "http",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Tls => "tls",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Empty => "empty",
            ErrorKind::EndpointDown => "endpoint-down",
            ErrorKind::Io => "io",
        }
    }

    pub fn from_io(e: &io::Error) -> ErrorKind {
        use io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::AddrNotAvailable => ErrorKind::Connect,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                ErrorKind::Reset
            }
            K::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::Io,
        }
    }
}

impl ErrorKind {
    /// The kind named in a record; unknown names read as `io`.
    pub fn parse(name: &str) -> ErrorKind {
        [
            ErrorKind::Connect,
            ErrorKind::Timeout,
            ErrorKind::Reset,
            ErrorKind::Http,
            ErrorKind::Protocol,
            ErrorKind::Tls,
            ErrorKind::Cancelled,
            ErrorKind::Empty,
            ErrorKind::EndpointDown,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
        .unwrap_or(ErrorKind::Io)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RequestError {
    pub kind: ErrorKind,
    pub message: String,
}

/// One request, as measured. Times are nanoseconds since the run start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestRecord {
    pub index: u64,
    pub endpoint: String,
    pub status: Option<u16>,
    pub error: Option<RequestError>,
    pub scheduled_ns: u64,
    pub sent_ns: Option<u64>,
    pub first_token_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub input_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    /// The server's `usage.prompt_tokens_details.cached_tokens`: prompt tokens its prefix
    /// cache served.
    pub cached_tokens: Option<u64>,
    /// The hits its hash ids predict at its endpoint (the schedule's model,
    /// [`crate::expected_cache`]); for a turn that carried its parent, at least its plan.
    pub expected_cached_tokens: Option<u64>,
    pub output_tokens_target: Option<u64>,
    /// Server usage, else the number of content chunks.
    pub output_tokens: Option<u64>,
    pub chunks: u64,
    /// With `--record-itl`: the arrival time of each content chunk and its token count.
    pub chunk_times_ns: Option<Vec<u64>>,
    pub chunk_tokens: Option<Vec<u32>>,
    pub ids: TraceIds,
    /// A turn of a conversation (`--session-mode after-parent`).
    pub session: Option<TurnRecord>,
    /// Closed loop (`--concurrency`): its wait for a free slot.
    pub queue_ns: Option<u64>,
    /// Due with no idle connection to its endpoint: how long it waited for one (part of its
    /// drift). None: it went on a connection at once.
    pub connection_wait_ns: Option<u64>,
    /// Sent again, at this time, on a fresh connection: the keep-alive connection it went on
    /// first closed before a byte of answer. Its times still count from the first send.
    pub resent_ns: Option<u64>,
    /// For an answer that reasoned, when its first answer token (not reasoning) arrived
    /// (`first_token_ns` is the first of any kind).
    pub first_answer_ns: Option<u64>,
    /// The answer's reasoning tokens: the server's `reasoning_tokens`, else the reasoning
    /// chunks' tokens. None: it did not reason.
    pub reasoning_tokens: Option<u64>,
    /// Tool calls the answer made (None: none).
    pub tool_calls: Option<u64>,
    /// The W3C trace id its `traceparent` carried (32 hex digits; None: none was sent).
    pub trace_id: Option<String>,
    /// What the server says it spent on it, by phase ([`crate::server_timing`]).
    pub server: Option<ServerPhases>,
    /// Sent before the measured run (`--warmup-requests`): in no statistic.
    pub warmup: bool,
    /// `--save-prompts`, a turn the sender rebuilt around its parent's answer: its
    /// prompts.jsonl line as sent, for the collector to write (not part of requests.jsonl).
    pub sent_prompt: Option<Vec<u8>>,
}

/// A conversation turn's place, and how long waiting for its parent delayed it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnRecord {
    /// The conversation (written as `session_id`).
    pub root: String,
    /// Its number in the conversation, counted from 1 as traces count it (Bailian's `turn`).
    pub turn: u32,
    pub parent_index: Option<u64>,
    /// More turns it waited for (a join of sub-agents; empty in a chain).
    pub joins: Vec<u64>,
    /// Its agent in a task graph (None in a plain conversation).
    pub branch: Option<String>,
    /// When the parent's end released it (run ns).
    pub released_ns: Option<u64>,
    /// Its send deadline minus its trace time: the wait the parent's end added.
    pub delay_ns: u64,
    pub parent_failed: bool,
    /// The parent's prompt and answer carried into this prompt: their tokens.
    pub carried_tokens: Option<u64>,
    /// Why they were not, with carry-forward on.
    pub carry_note: Option<String>,
    /// The prefix-cache hits production's server had for it (its planned prefix, less the
    /// last token, rounded down to `--server-block-size`).
    pub planned_cached_tokens: Option<u64>,
    /// A first turn held by `--max-active-sessions`: its wait for a place.
    pub session_wait_ns: Option<u64>,
    /// Its conversation's last turn in the trace (None in a run that predates the field).
    pub last: Option<bool>,
}

impl TurnRecord {
    /// Planned hits over its input length.
    pub fn planned_hit_share(&self, input_tokens: Option<u64>) -> Option<f64> {
        share(self.planned_cached_tokens?, input_tokens?)
    }
}

/// `part / whole`, None for an empty whole.
pub fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl RequestRecord {
    /// The server's cached tokens over its prompt count (the input length where it gives
    /// none).
    pub fn observed_hit_share(&self) -> Option<f64> {
        share(
            self.cached_tokens?,
            self.prompt_tokens.or(self.input_tokens)?,
        )
    }

    pub fn ok(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// Sent, then its connection reset or closed before a status line came back: how a TLS
    /// server answers a plain-HTTP request, among other causes.
    pub fn closed_unanswered(&self) -> bool {
        self.sent_ns.is_some()
            && self.status.is_none()
            && self
                .error
                .as_ref()
                .is_some_and(|e| e.kind == ErrorKind::Reset)
    }

    pub fn drift_ms(&self) -> Option<f64> {
        self.sent_ns
            .map(|s| (s as f64 - self.scheduled_ns as f64) / 1e6)
    }

    pub fn ttft_ms(&self) -> Option<f64> {
        Some(ms(self.first_token_ns?.checked_sub(self.sent_ns?)?))
    }

    /// The server's own time to first token (its phases before the first token).
    pub fn server_ttft_ms(&self) -> Option<f64> {
        self.server.as_ref()?.ttft_ms()
    }

    /// The TTFT the server does not account for: the network, HTTP, the client, and what
    /// the server does not time (llama.cpp's queue).
    pub fn ttft_outside_server_ms(&self) -> Option<f64> {
        Some(self.ttft_ms()? - self.server_ttft_ms()?)
    }

    /// Time to first output: from the send to the first answer token after the reasoning,
    /// for answers that reasoned (for the others it is the TTFT).
    pub fn ttfo_ms(&self) -> Option<f64> {
        self.reasoning_tokens?;
        Some(ms(self.first_answer_ns?.checked_sub(self.sent_ns?)?))
    }

    /// A success whose answer ended inside its reasoning: a TTFT and no TTFO.
    pub fn ended_in_thinking(&self) -> bool {
        self.ok() && self.reasoning_tokens.is_some() && self.first_answer_ns.is_none()
    }

    pub fn ttft_from_schedule_ms(&self) -> Option<f64> {
        Some(ms(self.first_token_ns?.saturating_sub(self.scheduled_ns)))
    }

    pub fn e2el_ms(&self) -> Option<f64> {
        Some(ms(self.end_ns?.checked_sub(self.sent_ns?)?))
    }

    pub fn connection_wait_ms(&self) -> Option<f64> {
        self.connection_wait_ns.map(ms)
    }

    /// End-to-end from the planned send: what the trace's user waited, the client's lateness
    /// included.
    pub fn e2el_from_schedule_ms(&self) -> Option<f64> {
        Some(ms(self.end_ns?.saturating_sub(self.scheduled_ns)))
    }

    /// (E2EL - TTFT) / (output_tokens - 1), for streamed requests with more than one token.
    pub fn tpot_ms(&self) -> Option<f64> {
        let out = self.output_tokens?;
        if out <= 1 || self.chunks == 0 {
            return None;
        }
        Some((self.e2el_ms()? - self.ttft_ms()?) / (out - 1) as f64)
    }

    /// Output tokens that were not reasoning: those of the answer (and its tool calls).
    pub fn answer_tokens(&self) -> Option<u64> {
        Some(
            self.output_tokens?
                .saturating_sub(self.reasoning_tokens.unwrap_or(0)),
        )
    }

    /// TPOT of the reasoning, for an answer that reasoned: from its first token to its first
    /// answer token (or its end, when it ended in its thinking) over the gaps between.
    pub fn tpot_reasoning_ms(&self) -> Option<f64> {
        let reasoning = self.reasoning_tokens?;
        let first = self.first_token_ns?;
        if self.chunks == 0 {
            return None;
        }
        let (end, gaps) = match self.first_answer_ns {
            Some(answer) => (answer, reasoning),
            None => (self.end_ns?, reasoning.saturating_sub(1)),
        };
        (gaps > 0).then(|| ms(end.saturating_sub(first)) / gaps as f64)
    }

    /// TPOT of the answer after the reasoning, for an answer that reasoned: from its first
    /// answer token to its end over the gaps between its answer tokens.
    pub fn tpot_answer_ms(&self) -> Option<f64> {
        self.reasoning_tokens?;
        let answer = self.answer_tokens()?;
        if self.chunks == 0 || answer <= 1 {
            return None;
        }
        Some(ms(self.end_ns?.saturating_sub(self.first_answer_ns?)) / (answer - 1) as f64)
    }

    /// The record as one JSON object (CONTRACT §5).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a record serialises")
    }

    /// Reads a record back from its JSON line (the inverse of [`RequestRecord::to_json`]:
    /// milliseconds print as the shortest exact f64, so nanoseconds come back unchanged).
    pub fn from_json(v: &Value) -> Result<RequestRecord, String> {
        if !v.is_object() {
            return Err("not a JSON object".into());
        }
        RequestRecord::deserialize(v).map_err(|e| e.to_string())
    }
}

/// A record is written and read in its line's shape, [`line::Line`]: borrowed from the record
/// on the way out, so no JSON tree is built per record.
impl Serialize for RequestRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        line::Line::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RequestRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RequestRecord, D::Error> {
        line::Line::deserialize(d).map(RequestRecord::from)
    }
}

/// Writes records as JSON lines. Lines are gathered in memory and handed to the file whole:
/// the caller flushes after each batch, so a crash or a forced exit loses nothing already
/// flushed and never leaves half a line.
pub struct RecordWriter {
    out: std::fs::File,
    lines: Vec<u8>,
    format: RecordFormat,
    /// Bytes of whole lines in the file: a failed write is cut back to here.
    committed: u64,
}

/// Gathered lines are written out once they pass this size, even before a flush.
const WRITE_CHUNK: usize = 1 << 20;

impl RecordWriter {
    pub fn new(out: std::fs::File, format: RecordFormat) -> Self {
        RecordWriter {
            out,
            lines: Vec::with_capacity(WRITE_CHUNK),
            format,
            committed: 0,
        }
    }

    pub fn write(&mut self, record: &RequestRecord) -> io::Result<()> {
        match self.format {
            RecordFormat::Llmreplay => serde_json::to_writer(&mut self.lines, record)?,
            RecordFormat::TraceReplayer => {
                serde_json::to_writer(&mut self.lines, &trace_replayer::to_json(record))?
            }
        }
        self.lines.push(b'\n');
        if self.lines.len() >= WRITE_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the gathered lines; each is in the file whole or not at all (a write that
    /// fails part-way, the disk full, is cut back to the last whole line).
    pub fn flush(&mut self) -> io::Result<()> {
        if let Err(e) = self.out.write_all(&self.lines) {
            use io::Seek;
            let _ = self.out.set_len(self.committed);
            let _ = self.out.seek(io::SeekFrom::Start(self.committed));
            self.lines.clear();
            return Err(e);
        }
        self.committed += self.lines.len() as u64;
        self.lines.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_metrics_follow_contract_definitions() {
        let r = RequestRecord {
            status: Some(200),
            scheduled_ns: 1_000_000,
            sent_ns: Some(1_500_000),
            first_token_ns: Some(11_500_000),
            end_ns: Some(31_500_000),
            output_tokens: Some(5),
            chunks: 5,
            ..RequestRecord::default()
        };
        assert!(r.ok());
        assert_eq!(r.drift_ms(), Some(0.5));
        assert_eq!(r.ttft_ms(), Some(10.0));
        assert_eq!(r.ttft_from_schedule_ms(), Some(10.5));
        assert_eq!(r.e2el_ms(), Some(30.0));
        assert_eq!(r.e2el_from_schedule_ms(), Some(30.5));
        assert_eq!(r.tpot_ms(), Some(5.0));
        let one = RequestRecord {
            output_tokens: Some(1),
            ..r.clone()
        };
        assert_eq!(one.tpot_ms(), None);
        let v = r.to_json();
        let back = RequestRecord::from_json(&v).unwrap();
        assert_eq!(back, r, "a record reads back as it was written");
        for key in [
            "index",
            "endpoint",
            "status",
            "error",
            "scheduled_ms",
            "sent_ms",
            "drift_ms",
            "first_token_ms",
            "end_ms",
            "ttft_ms",
            "ttft_from_schedule_ms",
            "e2el_ms",
            "tpot_ms",
            "input_tokens",
            "prompt_tokens",
            "output_tokens_target",
            "output_tokens",
            "chunks",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
    }
}
