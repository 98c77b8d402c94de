//! One request on the wire: what has been written, and everything measured about its response.

use crate::api::{excerpt, EventScanner, StreamEvent, EXCERPT};
use crate::carry::messages::LiveCalls;
use crate::carry::Shape;
use crate::http::response::{ResponseHead, ResponseSink};
use crate::http::sse::SseScanner;
use crate::pipeline::PreparedRequest;
use crate::record::{ErrorKind, RequestError, RequestRecord, TurnRecord};
use crate::server_timing::ServerPhases;
use crate::stats::Gaps;

/// Largest non-streamed body kept for parsing; larger ones are a protocol error.
const MAX_BODY: usize = 16 << 20;

pub struct Exchange {
    pub req: PreparedRequest,
    /// Bytes of request head + payload written so far.
    pub written: usize,
    pub sent_ns: Option<u64>,
    pub status: Option<u16>,
    /// The body is an event stream (decided when the head arrives).
    sse: bool,
    pub first_token_ns: Option<u64>,
    /// The first chunk of answer (not reasoning).
    first_answer_ns: Option<u64>,
    last_chunk_ns: Option<u64>,
    /// When the last bytes of the response arrived (a started response is judged stalled
    /// from it).
    pub last_byte_ns: Option<u64>,
    pub end_ns: Option<u64>,
    chunks: u64,
    /// Stream events the dialect could read (content or not).
    events: u64,
    counted_tokens: u64,
    /// Chunks of reasoning only, and their tokens.
    reasoning_chunks: u64,
    reasoning_counted: u64,
    /// The server's own count of reasoning tokens (usage).
    reasoning_tokens: Option<u64>,
    tool_calls: u64,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    /// The server's own timing of it ([`crate::server_timing`]).
    server: Option<Box<ServerPhases>>,
    /// The server's prompt count is only an estimate: it is not recorded.
    approximate_prompt_count: bool,
    completion_tokens: Option<u64>,
    pub error: Option<RequestError>,
    chunk_times: Option<Vec<u64>>,
    chunk_tokens: Option<Vec<u32>>,
    /// A turn whose children carry its answer forward: the answer, JSON-escaped as sent.
    pub answer: Option<Vec<u8>>,
    /// A recorded-messages turn threaded live: its tool calls, from their deltas.
    pub live_calls: Option<LiveCalls>,
    /// Since when it waits for a connection (due with none idle), then how long it waited.
    pub waiting_since: Option<u64>,
    connection_wait_ns: Option<u64>,
    /// It went on a keep-alive connection that had answered before and has heard nothing
    /// back yet: if that connection closes now, the request is sent again on a fresh one
    /// (once), so it keeps its bytes until the answer starts.
    pub resendable: bool,
    /// When it was sent again on a fresh connection.
    pub resent_ns: Option<u64>,
}

impl Exchange {
    pub fn new(req: PreparedRequest, record_itl: bool) -> Self {
        Exchange {
            answer: req.carry.as_ref().map(|_| Vec::new()),
            live_calls: req.carry.as_ref().and_then(|c| match c.shape {
                Shape::Messages(form) => Some(LiveCalls::new(form)),
                _ => None,
            }),
            req,
            written: 0,
            sent_ns: None,
            status: None,
            sse: false,
            first_token_ns: None,
            first_answer_ns: None,
            last_chunk_ns: None,
            last_byte_ns: None,
            end_ns: None,
            chunks: 0,
            events: 0,
            counted_tokens: 0,
            reasoning_chunks: 0,
            reasoning_counted: 0,
            reasoning_tokens: None,
            tool_calls: 0,
            prompt_tokens: None,
            cached_tokens: None,
            server: None,
            approximate_prompt_count: false,
            completion_tokens: None,
            error: None,
            chunk_times: record_itl.then(Vec::new),
            chunk_tokens: record_itl.then(Vec::new),
            waiting_since: None,
            connection_wait_ns: None,
            resendable: false,
            resent_ns: None,
        }
    }

    /// Its answer started: it can no longer be resent, and the bytes kept for that (unless
    /// its children carry them) are given back once all of them are written.
    pub fn answer_started(&mut self, head_len: usize) -> Option<Vec<u8>> {
        if !std::mem::take(&mut self.resendable) || self.req.carry.is_some() {
            return None;
        }
        (self.written == head_len + self.req.payload().len()).then(|| {
            self.req.start = 0;
            std::mem::take(&mut self.req.bytes)
        })
    }

    /// Makes it ready to go again on a fresh connection at `now`, its old one having closed
    /// before a byte of answer: it keeps its send time (the user's request left then).
    pub fn resend(&mut self, now: u64) {
        self.resendable = false;
        self.resent_ns = Some(now);
        self.written = 0;
    }

    /// It goes on a connection at `now`: if it waited for one, for how long.
    pub fn connection_found(&mut self, now: u64) {
        if let Some(since) = self.waiting_since.take() {
            self.connection_wait_ns = Some(now.saturating_sub(since));
        }
    }

    pub fn fail(&mut self, kind: ErrorKind, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(RequestError {
                kind,
                message: message.into(),
            });
        }
    }

    fn on_event(&mut self, ev: StreamEvent, now: u64, gaps: &mut Gaps) {
        if ev.malformed {
            self.fail(
                ErrorKind::Protocol,
                "an SSE event's data is not a JSON object",
            );
            return;
        }
        if let Some(message) = ev.error {
            self.fail(ErrorKind::Http, message);
            return;
        }
        self.events += 1;
        if ev.server.is_some() {
            self.server = ev.server;
        }
        if ev.prompt_tokens.is_some() {
            self.prompt_tokens = ev.prompt_tokens;
            self.cached_tokens = ev.cached_tokens;
        }
        let mut tokens = 1;
        if let Some(total) = ev.completion_tokens {
            if ev.content {
                tokens = total
                    .saturating_sub(self.completion_tokens.unwrap_or(0))
                    .max(1);
            }
            self.completion_tokens = Some(total);
        }
        self.reasoning_tokens = ev.reasoning_tokens.or(self.reasoning_tokens);
        self.tool_calls += u64::from(ev.tool_calls);
        if !ev.content {
            return;
        }
        self.chunks += 1;
        self.counted_tokens += tokens;
        if ev.reasoning {
            self.reasoning_chunks += 1;
            self.reasoning_counted += tokens;
        } else if self.first_answer_ns.is_none() {
            self.first_answer_ns = Some(now);
        }
        match self.last_chunk_ns {
            None => self.first_token_ns = Some(now),
            // Warmup requests are in no statistic.
            Some(_) if self.req.warmup => {}
            Some(prev) => gaps.record(now.saturating_sub(prev), tokens, ev.reasoning),
        }
        self.last_chunk_ns = Some(now);
        if let (Some(times), Some(counts)) = (&mut self.chunk_times, &mut self.chunk_tokens) {
            times.push(now);
            counts.push(tokens.min(u64::from(u32::MAX)) as u32);
        }
    }

    /// While its answer has not started (no first token of a stream, no byte of a whole
    /// body): how long the request has heard nothing, from its send or its last byte.
    pub fn waiting_for_answer(&self, now: u64) -> Option<u64> {
        let started = self.first_token_ns.is_some() || (!self.sse && self.status.is_some());
        let since = self.last_byte_ns.or(self.sent_ns)?;
        (!started).then(|| now.saturating_sub(since))
    }

    /// Completes the exchange at `now`: reads a whole body, judges the status, and a success
    /// status by its answer. `body` holds a whole non-streamed body, or a stream's first bytes.
    pub fn finish_response(&mut self, body: &[u8], scanner: &EventScanner, now: u64) {
        self.end_ns = Some(now);
        let status = self.status.unwrap_or(0);
        if !(200..300).contains(&status) {
            self.fail(ErrorKind::Http, format!("HTTP {status}: {}", excerpt(body)));
            return;
        }
        let mut content = self.chunks > 0;
        if !self.sse {
            let full = scanner.parse_body(body);
            if full.not_json {
                let api = scanner.api().name();
                self.fail(
                    ErrorKind::Protocol,
                    format!(
                        "HTTP {status} whose body is not {api} JSON: {}",
                        excerpt(body)
                    ),
                );
            } else if let Some(message) = full.error {
                self.fail(ErrorKind::Http, message);
            }
            self.prompt_tokens = full.prompt_tokens;
            self.cached_tokens = full.cached_tokens;
            self.server = full.server.map(Box::new);
            self.completion_tokens = full.completion_tokens;
            content = full.content;
            // Reasoning is counted only where the server says how much: a whole answer has
            // no chunks to count.
            self.reasoning_tokens = full.reasoning_tokens.filter(|_| full.reasoning);
            self.tool_calls = full.tool_calls;
            if full.answered {
                self.first_answer_ns = Some(now);
            }
            if let Some(calls) = &mut self.live_calls {
                calls.feed_body(body);
            }
            if let (Some(answer), Some(text)) = (&mut self.answer, &full.answer) {
                let quoted = serde_json::to_vec(text).unwrap_or_default();
                answer.extend_from_slice(&quoted[1..quoted.len() - 1]);
            }
            // The whole answer arrives at once: its first token is its last byte.
            self.first_token_ns = Some(now);
        } else if self.events == 0 {
            let api = scanner.api().name();
            self.fail(
                ErrorKind::Protocol,
                format!(
                    "HTTP {status} whose body holds no {api} stream event: {}",
                    excerpt(body)
                ),
            );
        }
        // Success means the answer arrived: no output where output was asked is a failure.
        let asked = self.req.output_tokens_target != Some(0);
        let counted = self.completion_tokens.map_or(content, |n| n > 0);
        if asked && !counted {
            let asked = self
                .req
                .output_tokens_target
                .map_or("tokens were".to_string(), |n| format!("{n} were"));
            self.fail(
                ErrorKind::Empty,
                format!(
                    "HTTP {status} with no output tokens ({asked} asked for): {}",
                    excerpt(body)
                ),
            );
        }
    }

    /// The prefix-cache hits the schedule predicts for this request: the model's tokens (a
    /// turn that carried its parent's prompt and answer may hit on all of it: its plan counts
    /// the answer, which the hash-id model cannot see), or a recorded-messages prompt's share
    /// of the server's prompt tokens.
    fn expected_cached_tokens(&self) -> Option<u64> {
        if let Some(share) = self.req.expected_share {
            let prompt = self
                .prompt_tokens
                .filter(|_| !self.approximate_prompt_count)?;
            return Some((share * prompt as f64) as u64);
        }
        self.req.expected_cached_tokens.map(|model| {
            let session = self.req.session.as_ref();
            let carried = session.filter(|t| t.carried_tokens.is_some());
            model.max(carried.and_then(|t| t.planned_cached_tokens).unwrap_or(0))
        })
    }

    /// The record of this exchange; times are made relative to the run start `t0`.
    pub fn into_record(self, endpoint: &str, t0: u64) -> RequestRecord {
        let rel = |t: Option<u64>| t.map(|t| t.saturating_sub(t0));
        // The server's count, never below one token per event that carried output:
        // Anthropic's message_start says `output_tokens: 1`, and a stream cut before
        // message_delta would otherwise count one token.
        let output_tokens = match self.completion_tokens {
            Some(n) => Some(n.max(self.chunks)),
            None => (self.chunks > 0).then_some(self.counted_tokens),
        };
        // OpenAI writes `reasoning_tokens: 0` for models that do not reason.
        let reasoning_tokens = match self.reasoning_tokens {
            Some(n) if n > 0 || self.reasoning_chunks > 0 => Some(n),
            _ => (self.reasoning_chunks > 0).then_some(self.reasoning_counted),
        };
        let expected_cached_tokens = self.expected_cached_tokens();
        RequestRecord {
            index: self.req.index,
            endpoint: endpoint.to_string(),
            status: self.status,
            error: self.error,
            scheduled_ns: self.req.due_ns,
            sent_ns: rel(self.sent_ns),
            first_token_ns: rel(self.first_token_ns),
            first_answer_ns: rel(self.first_answer_ns).filter(|_| reasoning_tokens.is_some()),
            reasoning_tokens,
            tool_calls: (self.tool_calls > 0).then_some(self.tool_calls),
            trace_id: None, // the collector's: it knows the run
            server: self.server.map(|s| *s),
            end_ns: rel(self.end_ns),
            input_tokens: self.req.input_tokens,
            prompt_tokens: self
                .prompt_tokens
                .filter(|_| !self.approximate_prompt_count),
            cached_tokens: self.cached_tokens,
            expected_cached_tokens,
            output_tokens_target: self.req.output_tokens_target,
            output_tokens,
            chunks: self.chunks,
            chunk_times_ns: self
                .chunk_times
                .map(|v| v.into_iter().map(|t| t.saturating_sub(t0)).collect()),
            chunk_tokens: self.chunk_tokens,
            queue_ns: self.req.queue_ns,
            connection_wait_ns: self.connection_wait_ns,
            resent_ns: rel(self.resent_ns),
            warmup: self.req.warmup,
            sent_prompt: None,
            session: self.req.session.map(|t| TurnRecord {
                root: t.link.root,
                turn: t.link.turn + 1,
                parent_index: t.link.parent_index,
                joins: t.link.joins,
                branch: t.link.branch,
                released_ns: t.released_ns,
                delay_ns: self.req.due_ns.saturating_sub(self.req.scheduled_ns),
                parent_failed: t.parent_failed,
                carried_tokens: t.carried_tokens,
                carry_note: t.not_carried.map(str::to_string),
                planned_cached_tokens: t.planned_cached_tokens,
                session_wait_ns: t.session_wait_ns,
                last: Some(t.link.last),
            }),
            ids: self.req.ids,
        }
    }
}

/// Feeds one read's worth of response bytes into an exchange (all stamped with `now`).
pub struct Feed<'a> {
    pub ex: &'a mut Exchange,
    pub sse: &'a mut SseScanner,
    pub body: &'a mut Vec<u8>,
    pub scanner: &'a EventScanner,
    pub gaps: &'a mut Gaps,
    pub now: u64,
    /// The request asked for a stream.
    pub stream: bool,
}

impl ResponseSink for Feed<'_> {
    fn head(&mut self, head: &ResponseHead) {
        self.ex.status = Some(head.status);
        self.ex.approximate_prompt_count = head.approximate_prompt_count;
        let success = (200..300).contains(&head.status);
        self.ex.sse = success && (head.event_stream || self.stream);
    }

    fn body(&mut self, data: &[u8]) {
        if self.ex.sse {
            // A stream's first bytes are kept for the message of a stream that says nothing.
            let room = EXCERPT.saturating_sub(self.body.len());
            self.body.extend_from_slice(&data[..data.len().min(room)]);
            let Feed {
                ex,
                sse,
                scanner,
                gaps,
                now,
                ..
            } = self;
            if let Err(e) = sse.feed(data, |payload| {
                let event = scanner.scan(payload);
                if let (true, Some(answer)) = (event.content, &mut ex.answer) {
                    answer.extend_from_slice(scanner.answer_text(payload).unwrap_or_default());
                }
                if let Some(calls) = &mut ex.live_calls {
                    if (event.tool_calls > 0 || event.content) && calls.carries_calls(payload) {
                        calls.feed_event(payload);
                    }
                }
                ex.on_event(event, *now, gaps)
            }) {
                ex.fail(ErrorKind::Protocol, e.to_string());
            }
            return;
        }
        let success = self.ex.status.is_some_and(|s| (200..300).contains(&s));
        let limit = if success { MAX_BODY } else { EXCERPT };
        let room = limit.saturating_sub(self.body.len());
        if success && data.len() > room {
            self.ex.fail(
                ErrorKind::Protocol,
                format!("response body larger than {MAX_BODY} bytes"),
            );
        }
        self.body.extend_from_slice(&data[..data.len().min(room)]);
    }
}
