//! One connection's HTTP exchange without its socket: fed the bytes a read brought (and the
//! time they came), it decides what the connection does next ([`Outcome`]: wait for more,
//! complete the request and be reused or closed, fail it, or drop a connection that talks out
//! of turn), and how a failed request ends ([`Ending`]: recorded, or sent again). The sender
//! does the I/O and acts on the answer; the tests feed it responses with no socket, and
//! [`read_response`] reads a server's recorded stream exactly as a sender would.

use crate::api::{Api, EventScanner};
use crate::http::response::{ResponseParser, Step};
use crate::http::sse::SseScanner;
use crate::pipeline::PreparedRequest;
use crate::record::{ErrorKind, RequestRecord};
use crate::stats::Gaps;

use super::exchange::{Exchange, Feed};

/// What the connection does after a read.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The response is not complete: wait for more bytes.
    NeedMore,
    /// The response is complete and its exchange finished (take it with
    /// [`Wire::take_exchange`]); the connection takes another request if `reusable` (the
    /// server keeps it alive and sent nothing past the response), else it closes.
    Complete { reusable: bool },
    /// The exchange fails with this error, and the connection closes.
    Fail(ErrorKind, String),
    /// Bytes on a connection with no request: the server broke the protocol; close it.
    Stray,
}

/// How a failed exchange ends.
pub enum Ending {
    /// Recorded with its error.
    Failed(Exchange),
    /// Sent again on a fresh connection: a keep-alive connection closed as it went out,
    /// before a byte of answer (the server read none of it).
    Resend(Exchange),
}

/// What a read needs besides the bytes: the endpoint's dialect, where gaps between tokens
/// are counted, whether a stream was asked for, and the length of the request head (a
/// request kept for a resend gives its bytes back once its answer starts).
pub struct Reading<'a> {
    pub scanner: &'a EventScanner,
    pub gaps: &'a mut Gaps,
    pub stream: bool,
    pub head_len: usize,
}

/// The exchange in flight on a connection and its response parser's state.
#[derive(Default)]
pub struct Wire {
    exchange: Option<Exchange>,
    parser: ResponseParser,
    sse: SseScanner,
    /// A whole non-streamed body, or a stream's first bytes.
    body: Vec<u8>,
}

impl Wire {
    /// Takes a request: the response state starts afresh.
    pub fn begin(&mut self, ex: Exchange) {
        self.parser.reset();
        self.sse.reset();
        self.body.clear();
        self.exchange = Some(ex);
    }

    pub fn exchange(&self) -> Option<&Exchange> {
        self.exchange.as_ref()
    }

    pub fn exchange_mut(&mut self) -> Option<&mut Exchange> {
        self.exchange.as_mut()
    }

    pub fn take_exchange(&mut self) -> Option<Exchange> {
        self.exchange.take()
    }

    /// Feeds what one read brought at `now`. The second value is the request's buffer when
    /// its answer started and it was only kept for a resend (for the producers to reuse).
    pub fn on_readable(
        &mut self,
        now: u64,
        bytes: &[u8],
        r: &mut Reading,
    ) -> (Outcome, Option<Vec<u8>>) {
        let Some(ex) = self.exchange.as_mut() else {
            return (Outcome::Stray, None);
        };
        let spent = match ex.resendable {
            true => ex.answer_started(r.head_len),
            false => None,
        };
        ex.last_byte_ns = Some(now);
        let mut feed = Feed {
            ex,
            sse: &mut self.sse,
            body: &mut self.body,
            scanner: r.scanner,
            gaps: r.gaps,
            now,
            stream: r.stream,
        };
        let outcome = match self.parser.feed(bytes, &mut feed) {
            Err(e) => Outcome::Fail(ErrorKind::Protocol, e.to_string()),
            Ok(Step::NeedMore) => match &ex.error {
                // The dialect found the stream broken: the exchange has its error already.
                Some(e) if e.kind == ErrorKind::Protocol => {
                    Outcome::Fail(ErrorKind::Protocol, String::new())
                }
                _ => Outcome::NeedMore,
            },
            Ok(Step::Done { consumed }) => {
                ex.finish_response(&self.body, r.scanner, now);
                let keep_alive = self.parser.head().is_some_and(|h| h.keep_alive);
                Outcome::Complete {
                    reusable: consumed == bytes.len() && keep_alive,
                }
            }
        };
        (outcome, spent)
    }

    /// The server closed the connection at `now`: a response framed by the close is
    /// complete; one cut short fails as a reset.
    pub fn on_eof(&mut self, now: u64, scanner: &EventScanner) -> Outcome {
        let Some(ex) = self.exchange.as_mut() else {
            return Outcome::Stray;
        };
        match self.parser.finish_at_eof() {
            Ok(()) => {
                ex.finish_response(&self.body, scanner, now);
                Outcome::Complete { reusable: false }
            }
            Err(e) => Outcome::Fail(
                ErrorKind::Reset,
                format!("connection closed by the server: {e}"),
            ),
        }
    }

    /// Ends the exchange in flight (if any) with an error at `now`. A reset of a request that
    /// went out on a connection that had answered before, and heard nothing back, is sent
    /// again (once; not while the run is `stopping`, when no connection is opened).
    pub fn fail(
        &mut self,
        kind: ErrorKind,
        message: String,
        now: u64,
        stopping: bool,
    ) -> Option<Ending> {
        let mut ex = self.exchange.take()?;
        if kind == ErrorKind::Reset && ex.resendable && !stopping {
            ex.resend(now);
            return Some(Ending::Resend(ex));
        }
        ex.fail(kind, message);
        ex.end_ns = Some(now);
        Some(Ending::Failed(ex))
    }
}

/// A response read as a sender reads it, with no socket: `reads` are each read's bytes and
/// arrival time (ns, on the clock of `sent_ns`, when the request went out). Gives the
/// request's record, every figure of it measured from those times: how a server's stream
/// shapes are judged from a fixture (the golden-stream tests).
pub fn read_response<'a>(
    api: Api,
    sent_ns: u64,
    output_tokens_target: Option<u64>,
    reads: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> RequestRecord {
    let mut req = PreparedRequest::empty(0, sent_ns);
    req.output_tokens_target = output_tokens_target;
    let mut ex = Exchange::new(req, true);
    ex.sent_ns = Some(sent_ns);
    let (ex, _) = feed_reads(ex, api, reads);
    ex.into_record("", 0)
}

/// Feeds reads to a wire carrying `ex` (sent) until the response completes or fails, as the sender
/// would; a response the reads leave unfinished fails as a reset. Gives the exchange and the
/// outcome of each read.
fn feed_reads<'a>(
    ex: Exchange,
    api: Api,
    reads: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> (Exchange, Vec<Outcome>) {
    let scanner = EventScanner::new(api);
    let mut gaps = Gaps::default();
    let mut reading = Reading {
        scanner: &scanner,
        gaps: &mut gaps,
        stream: true,
        head_len: 0,
    };
    let mut wire = Wire::default();
    wire.begin(ex);
    let mut outcomes = Vec::new();
    let mut last = 0;
    for (bytes, now) in reads {
        last = now;
        let (outcome, _) = wire.on_readable(now, bytes, &mut reading);
        let more = outcome == Outcome::NeedMore;
        outcomes.push(outcome);
        if !more {
            break;
        }
    }
    let (kind, message) = match outcomes.last() {
        Some(Outcome::Complete { .. }) => {
            return (wire.take_exchange().expect("complete"), outcomes);
        }
        Some(Outcome::Fail(kind, message)) => (*kind, message.clone()),
        _ => (
            ErrorKind::Reset,
            "the response ended before it was complete".into(),
        ),
    };
    match wire.fail(kind, message, last, true) {
        Some(Ending::Failed(ex) | Ending::Resend(ex)) => (ex, outcomes),
        None => unreachable!("the wire carries the exchange until it completes"),
    }
}

/// The exchange is a state machine fed bytes: these tests give it a response read by read, with
/// the time of each read, and judge the outcome and the record, with no socket.
#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
