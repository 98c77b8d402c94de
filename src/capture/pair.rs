//! One client connection and the upstream connection its requests go to. [`Pair::pump`] does
//! everything the two sockets allow at once: reads the client, takes a whole request and
//! sends its bytes upstream, reads the answer into the client's buffer while the sender's
//! [`Wire`] measures it, and writes the client. An exchange that ends is handed back to the
//! capture, which writes its record.

use std::io::{self, ErrorKind as IoKind};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::request::{self, Framed};
use crate::api::{self, Api, EventScanner};
use crate::pipeline::PreparedRequest;
use crate::record::{ErrorKind, RequestRecord};
use crate::sender::wire::{Ending, Outcome, Reading, Wire};
use crate::sender::Exchange;
use crate::stats::Gaps;
use crate::transport::Stream;

/// Answer bytes held for a slow client before the upstream is no longer read (the rest
/// waits in the kernel: memory stays bounded however slow the client).
const CLIENT_BACKLOG: usize = 4 << 20;

/// Rounds of one pump (see [`Pair::pump`]); the next event goes on.
const MAX_ROUNDS: usize = 64;

/// What a pair needs of the capture.
pub struct Cx<'a> {
    pub registry: &'a Registry,
    pub upstreams: &'a [super::Server],
    pub gaps: &'a mut Gaps,
    pub next_index: &'a mut u64,
    pub now: u64,
    /// The capture is stopping: no new request is taken.
    pub stopping: bool,
    /// Where sockets are read into (one for all pairs: a buffer on the stack would be
    /// zeroed at every read).
    pub scratch: &'a mut [u8],
}

/// The request in flight on a pair: its bytes (sent again if the upstream drops it; its
/// body read for the trace off the event loop, by the writer), its dialect and route (None:
/// not a generation request), and when its first byte came.
pub struct Taken {
    pub bytes: Vec<u8>,
    pub body_at: usize,
    /// Its body came in chunks.
    pub chunked: bool,
    pub route: Option<(Api, api::Route)>,
    /// It asked for a stream.
    pub stream: bool,
    pub arrived_ns: u64,
}

impl Taken {
    /// Its body as the server reads it (a chunked one's chunks joined).
    pub fn body(&self) -> std::borrow::Cow<'_, [u8]> {
        let body = &self.bytes[self.body_at..];
        match self.chunked {
            true => request::dechunk(body).into(),
            false => body.into(),
        }
    }
}

/// An exchange that ended, measured.
pub struct Ended {
    pub taken: Taken,
    pub record: RequestRecord,
    /// A streamed text prompt's answer, JSON-escaped as the server sent it.
    pub answer: Option<Vec<u8>>,
}

struct Upstream {
    stream: Stream,
    out: Vec<u8>,
    connected: bool,
    /// What it is registered for now (see [`wanted`]).
    interest: Interest,
    /// Its end of stream has come: it is read to the end (no later event would say so).
    closing: bool,
    /// It answered a request (a request on it may be sent again, see `resendable`).
    answered: bool,
}

pub struct Pair {
    client: Stream,
    /// What the client is registered for now (see [`wanted`]).
    client_interest: Interest,
    /// Its end of stream has come: it is read to the end.
    client_closing: bool,
    slot: usize,
    /// Its upstream, of the capture's.
    target: usize,
    input: Vec<u8>,
    /// When the first bytes of the request now in `input` came.
    arrived_ns: Option<u64>,
    to_client: Vec<u8>,
    /// Close once `to_client` is written.
    close_client: bool,
    /// The client closed or broke: the pair ends.
    pub gone: bool,
    upstream: Option<Upstream>,
    wire: Wire,
    taken: Option<Taken>,
    /// The event scanner of the dialect in flight (made again when it changes).
    scanner: Option<EventScanner>,
}

fn client_token(slot: usize) -> Token {
    Token(slot * 2)
}

fn upstream_token(slot: usize) -> Token {
    Token(slot * 2 + 1)
}

/// The pair slot of a token, and whether it is the upstream side.
pub fn slot_of(token: Token) -> (usize, bool) {
    (token.0 / 2, token.0 % 2 == 1)
}

impl Pair {
    /// A client connection (plain, or TLS as the listener serves it) whose requests go to
    /// `cx.upstreams[upstream]`.
    pub fn accept(
        mut client: Stream,
        slot: usize,
        upstream: usize,
        registry: &Registry,
    ) -> io::Result<Pair> {
        client.tcp().set_nodelay(true)?;
        let client_interest = wanted(&client, false);
        registry.register(client.tcp_mut(), client_token(slot), client_interest)?;
        Ok(Pair {
            client,
            client_interest,
            client_closing: false,
            slot,
            target: upstream,
            input: Vec::new(),
            arrived_ns: None,
            to_client: Vec::new(),
            close_client: false,
            gone: false,
            upstream: None,
            wire: Wire::default(),
            taken: None,
            scanner: None,
        })
    }

    /// An event said that the client's side (or the upstream's) closed or broke: that side
    /// is read to the end, not only to a short read.
    pub fn saw_close(&mut self, upstream: bool) {
        match (upstream, self.upstream.as_mut()) {
            (false, _) => self.client_closing = true,
            (true, Some(up)) => up.closing = true,
            (true, None) => {}
        }
    }

    /// Whether a request is in flight.
    pub fn busy(&self) -> bool {
        self.taken.is_some()
    }

    /// Everything the sockets allow now (the client's side is read when `client` says it
    /// stirred); the exchanges that ended are pushed to `ended`.
    pub fn pump(&mut self, client: bool, cx: &mut Cx, ended: &mut Vec<Ended>) {
        if client {
            self.read_client(cx);
        }
        if self.gone {
            self.end_in_flight(ErrorKind::Cancelled, "the client went away", cx, ended);
            self.close_upstream(cx.registry);
            return;
        }
        self.write_client();
        // Rounds while there is more to do at once: an answer that ended lets a pipelined
        // request go, and a client that took the whole backlog lets the upstream be read on
        // (its bytes wait in the kernel, which raises no new edge for them).
        for _ in 0..MAX_ROUNDS {
            let before = ended.len();
            self.take_request(cx, ended);
            let full = self.pump_upstream(cx, ended);
            self.write_client();
            let next = ended.len() > before && self.taken.is_none() && !self.input.is_empty();
            let drained = full && self.to_client.is_empty();
            if self.gone || !(next || drained) {
                break;
            }
        }
        self.settle(cx.registry);
    }

    /// Registers each socket for what it waits for now: a plain socket for WRITABLE only
    /// while bytes wait to go (or its connect to end). Otherwise every ACK of a streamed
    /// token would wake the loop for nothing.
    fn settle(&mut self, registry: &Registry) {
        if self.gone {
            return;
        }
        let want = wanted(&self.client, !self.to_client.is_empty());
        if want != self.client_interest
            && registry
                .reregister(self.client.tcp_mut(), client_token(self.slot), want)
                .is_ok()
        {
            self.client_interest = want;
        }
        if let Some(up) = self.upstream.as_mut() {
            let want = wanted(&up.stream, !up.connected || !up.out.is_empty());
            if want != up.interest
                && registry
                    .reregister(up.stream.tcp_mut(), upstream_token(self.slot), want)
                    .is_ok()
            {
                up.interest = want;
            }
        }
    }

    /// Ends the pair's exchange in flight (the capture is stopping).
    pub fn cut(&mut self, cx: &mut Cx, ended: &mut Vec<Ended>) {
        self.end_in_flight(ErrorKind::Cancelled, "the capture stopped", cx, ended);
        self.close_upstream(cx.registry);
        self.gone = true;
    }

    pub fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(self.client.tcp_mut());
        self.close_upstream(registry);
    }

    fn read_client(&mut self, cx: &mut Cx) {
        let buf = &mut *cx.scratch;
        while self.input.len() <= request::MAX_HEAD + request::MAX_BODY {
            match self.client.read(buf) {
                Ok(0) => {
                    self.gone = true;
                    return;
                }
                Ok(n) => {
                    if self.input.is_empty() {
                        self.arrived_ns = Some(cx.now);
                    }
                    self.input.extend_from_slice(&buf[..n]);
                    if n < buf.len() && self.client.short_read_drains() && !self.client_closing {
                        return;
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => return,
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(_) => {
                    self.gone = true;
                    return;
                }
            }
        }
    }

    /// Takes the next whole request from the client's input and sends it upstream.
    fn take_request(&mut self, cx: &mut Cx, ended: &mut Vec<Ended>) {
        if self.taken.is_some() || self.input.is_empty() || self.close_client || cx.stopping {
            return;
        }
        let (len, body_at, method, path, chunked) = match request::frame(&self.input) {
            Framed::Partial => return,
            Framed::Refused(status, why) => {
                self.input.clear();
                self.close_client = true;
                self.to_client.extend(local_answer(status, &why));
                return;
            }
            Framed::Whole {
                len,
                body_at,
                method,
                path,
                last,
                chunked,
            } => {
                // Its answer is the connection's last: the client is closed once it is written.
                self.close_client |= last;
                (len, body_at, method, path, chunked)
            }
        };
        let rest = self.input.split_off(len);
        let bytes = std::mem::replace(&mut self.input, rest);
        let arrived_ns = self.arrived_ns.unwrap_or(cx.now);
        self.arrived_ns = (!self.input.is_empty()).then_some(cx.now);
        let route = request::dialect_of(&method, &path);
        let stream = route.is_some_and(|(_, r)| request::streams(&r, &bytes[body_at..]));
        // Any answer is framed by the wire; another request's (`GET /v1/models`) is read as
        // OpenAI's, and not recorded.
        let api = route.map_or(Api::OpenaiChat, |(api, _)| api);
        if self.scanner.as_ref().is_none_or(|sc| sc.api() != api) {
            self.scanner = Some(EventScanner::new(api));
        }
        let req = PreparedRequest::empty(*cx.next_index, arrived_ns);
        *cx.next_index += 1;
        let mut ex = Exchange::new(req, false);
        ex.sent_ns = Some(cx.now);
        // A streamed text prompt's answer is kept: a later prompt that begins with this one's
        // and then its answer continues it ([`super::links`]). Messages say so themselves.
        if stream && route.is_some_and(|(api, _)| api.messages_form().is_none()) {
            ex.answer = Some(Vec::new());
        }
        // On a kept-alive connection that answered before, a close before a byte of answer
        // means the server dropped it idle (llama-server does): it goes again, once.
        ex.resendable = self.upstream.as_ref().is_some_and(|up| up.answered);
        self.wire.begin(ex);
        let opened = self
            .open_upstream(cx)
            .map(|up| up.out.extend_from_slice(&bytes));
        self.taken = Some(Taken {
            bytes,
            body_at,
            chunked,
            route,
            stream,
            arrived_ns,
        });
        if let Err((kind, why)) = opened {
            self.bad_gateway(kind, &why, cx, ended);
        }
    }

    /// The upstream connection, opened when there is none.
    fn open_upstream(&mut self, cx: &mut Cx) -> Result<&mut Upstream, (ErrorKind, String)> {
        if self.upstream.is_none() {
            let fail = |e: io::Error| (ErrorKind::Connect, e.to_string());
            let target = &cx.upstreams[self.target];
            let mut tcp = TcpStream::connect(target.addr).map_err(fail)?;
            let interest = Interest::READABLE | Interest::WRITABLE;
            cx.registry
                .register(&mut tcp, upstream_token(self.slot), interest)
                .map_err(fail)?;
            let stream = match &target.tls {
                Some(tls) => tls.wrap(tcp).map_err(|e| (ErrorKind::Tls, e.to_string()))?,
                None => Stream::Plain(tcp),
            };
            self.upstream = Some(Upstream {
                stream,
                out: Vec::new(),
                connected: false,
                interest,
                closing: false,
                answered: false,
            });
        }
        Ok(self.upstream.as_mut().expect("opened above"))
    }

    /// Connects, writes the request and reads the answer as far as the upstream allows;
    /// true when it stopped reading for the client's backlog.
    fn pump_upstream(&mut self, cx: &mut Cx, ended: &mut Vec<Ended>) -> bool {
        let Some(up) = self.upstream.as_mut() else {
            return false;
        };
        match up.ready() {
            Ok(true) => {}
            Ok(false) => return false,
            Err((kind, why)) => {
                self.close_upstream(cx.registry);
                if self.taken.is_some() {
                    self.bad_gateway(kind, &why, cx, ended);
                }
                return false;
            }
        }
        if let Err(e) = up.write_out() {
            let why = format!("writing the request upstream: {e}");
            self.upstream_broke(ErrorKind::Reset, &why, cx, ended);
            return false;
        }
        self.read_upstream(cx, ended)
    }

    /// Reads the answer into the client's buffer while the wire measures it; true when it
    /// stopped for the client's backlog.
    fn read_upstream(&mut self, cx: &mut Cx, ended: &mut Vec<Ended>) -> bool {
        let stream = self.taken.as_ref().is_some_and(|t| t.stream);
        while self.to_client.len() < CLIENT_BACKLOG {
            let Some(up) = self.upstream.as_mut() else {
                return false;
            };
            let n = match up.stream.read(cx.scratch) {
                Ok(0) => {
                    self.upstream_closed(cx, ended);
                    return false;
                }
                Ok(n) => n,
                Err(e) if e.kind() == IoKind::WouldBlock => return false,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(e) => {
                    let why = format!("the upstream connection broke: {e}");
                    self.upstream_broke(ErrorKind::from_io(&e), &why, cx, ended);
                    return false;
                }
            };
            if self.taken.is_none() {
                // Bytes with no request: the upstream broke the protocol; none reach the client.
                self.close_upstream(cx.registry);
                return false;
            }
            let bytes = &cx.scratch[..n];
            self.to_client.extend_from_slice(bytes);
            let Some(scanner) = self.scanner.as_ref() else {
                continue; // made with the request: never missing while one is in flight
            };
            let mut reading = Reading {
                scanner,
                gaps: cx.gaps,
                stream,
                head_len: 0,
            };
            let (outcome, _) = self.wire.on_readable(cx.now, bytes, &mut reading);
            match outcome {
                Outcome::NeedMore if n < cx.scratch.len() && self.drained_upstream() => {
                    return false
                }
                Outcome::NeedMore => {}
                Outcome::Complete { reusable } => {
                    self.finish(ended);
                    if !reusable {
                        self.close_upstream(cx.registry);
                        self.close_client = true;
                    }
                    return false;
                }
                Outcome::Fail(kind, why) => {
                    self.upstream_broke(kind, &why, cx, ended);
                    return false;
                }
                Outcome::Stray => {
                    self.close_upstream(cx.registry);
                    return false;
                }
            }
        }
        true
    }

    /// Whether a short read from the upstream emptied its socket (see
    /// [`Stream::short_read_drains`]); not once its end has come.
    fn drained_upstream(&self) -> bool {
        self.upstream
            .as_ref()
            .is_some_and(|up| up.stream.short_read_drains() && !up.closing)
    }

    /// The upstream closed its side: an answer framed by the close is complete.
    fn upstream_closed(&mut self, cx: &mut Cx, ended: &mut Vec<Ended>) {
        self.close_upstream(cx.registry);
        if self.taken.is_none() {
            return; // an idle kept-alive connection closed
        }
        // The client learns the end of an answer framed by the close the same way.
        let outcome = match self.scanner.as_ref() {
            Some(scanner) => self.wire.on_eof(cx.now, scanner),
            None => Outcome::Stray,
        };
        match outcome {
            Outcome::Fail(kind, why) => {
                if !self.end_in_flight(kind, &why, cx, ended) {
                    self.close_client = true;
                }
            }
            _ => {
                self.close_client = true;
                self.finish(ended);
            }
        }
    }

    /// The exchange in flight fails and both connections close (the client has part of an
    /// answer at most).
    fn upstream_broke(&mut self, kind: ErrorKind, why: &str, cx: &mut Cx, ended: &mut Vec<Ended>) {
        self.close_upstream(cx.registry);
        if !self.end_in_flight(kind, why, cx, ended) {
            self.close_client = true;
        }
    }

    /// The upstream could not be reached: the client gets a 502, the record says why.
    fn bad_gateway(&mut self, kind: ErrorKind, why: &str, cx: &mut Cx, ended: &mut Vec<Ended>) {
        self.close_upstream(cx.registry);
        let why = format!("the upstream {}: {why}", cx.upstreams[self.target].url);
        self.to_client.extend(local_answer(502, &why));
        self.close_client = true;
        if let Some(ex) = self.wire.exchange_mut() {
            ex.status = Some(502);
        }
        self.end_in_flight(kind, &why, cx, ended);
    }

    /// The exchange completed.
    fn finish(&mut self, ended: &mut Vec<Ended>) {
        let (Some(taken), Some(ex)) = (self.taken.take(), self.wire.take_exchange()) else {
            return;
        };
        if let Some(up) = self.upstream.as_mut() {
            up.answered = true;
        }
        ex_ended(ex, taken, ended);
    }

    /// Ends the exchange in flight with an error; but one the wire says to send again (see
    /// `resendable`) goes again on a fresh upstream connection: true then.
    fn end_in_flight(
        &mut self,
        kind: ErrorKind,
        why: &str,
        cx: &mut Cx,
        ended: &mut Vec<Ended>,
    ) -> bool {
        let Some(taken) = self.taken.take() else {
            return false;
        };
        // Sent again even while stopping: the answers in flight are waited for.
        let ex = match self.wire.fail(kind, why.to_string(), cx.now, false) {
            Some(Ending::Resend(ex)) => ex,
            Some(Ending::Failed(ex)) => {
                ex_ended(ex, taken, ended);
                return false;
            }
            None => return false,
        };
        let again = taken.bytes.clone();
        self.wire.begin(ex);
        self.taken = Some(taken);
        self.close_upstream(cx.registry);
        match self.open_upstream(cx) {
            Ok(up) => {
                up.out = again;
                true
            }
            Err((kind, why)) => {
                self.bad_gateway(kind, &why, cx, ended);
                false
            }
        }
    }

    fn close_upstream(&mut self, registry: &Registry) {
        if let Some(mut up) = self.upstream.take() {
            let _ = registry.deregister(up.stream.tcp_mut());
        }
    }

    fn write_client(&mut self) {
        let _ = self.client.handshake();
        if write_pending(&mut self.client, &mut self.to_client).is_err() {
            self.gone = true;
        }
        if self.close_client && self.to_client.is_empty() && self.taken.is_none() {
            self.gone = true;
        }
    }
}

impl Upstream {
    /// Whether the connection is open and secured (TLS) so that bytes may go; Err: a
    /// refused connect or a failed handshake, and why.
    fn ready(&mut self) -> Result<bool, (ErrorKind, String)> {
        if !self.connected {
            let tcp = self.stream.tcp();
            if let Ok(Some(e)) | Err(e) = tcp.take_error() {
                return Err((ErrorKind::Connect, e.to_string()));
            }
            match tcp.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.kind() == IoKind::NotConnected => return Ok(false),
                Err(e) => return Err((ErrorKind::Connect, e.to_string())),
            }
        }
        self.stream
            .handshake()
            .map_err(|e| (ErrorKind::Tls, crate::transport::tls::describe_io(&e)))
    }

    fn write_out(&mut self) -> io::Result<()> {
        write_pending(&mut self.stream, &mut self.out)
    }
}

/// What a socket is registered for: READABLE, and WRITABLE while `pending` (bytes wait to go,
/// or a connect to end); a TLS socket always both, since rustls may hold bytes to send
/// (a handshake's, a close's) that the pair does not see.
fn wanted(stream: &Stream, pending: bool) -> Interest {
    match pending || matches!(stream, Stream::Tls(_)) {
        true => Interest::READABLE | Interest::WRITABLE,
        false => Interest::READABLE,
    }
}

/// Writes as much of `pending` as the socket takes now (what went is drained from it).
fn write_pending(stream: &mut Stream, pending: &mut Vec<u8>) -> io::Result<()> {
    let mut at = 0;
    let written = loop {
        if at == pending.len() {
            break Ok(());
        }
        match stream.write(&pending[at..]) {
            Ok(0) => break Ok(()),
            Ok(n) => at += n,
            Err(e) if e.kind() == IoKind::WouldBlock => break Ok(()),
            Err(e) if e.kind() == IoKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    pending.drain(..at);
    written.and_then(|()| stream.flush())
}

fn ex_ended(mut ex: Exchange, taken: Taken, ended: &mut Vec<Ended>) {
    ended.push(Ended {
        answer: ex.answer.take(),
        record: ex.into_record("", 0),
        taken,
    });
}

/// An answer of the capture's own (an upstream out of reach, a request it cannot frame),
/// in OpenAI's error shape, closing the connection.
fn local_answer(status: u16, why: &str) -> Vec<u8> {
    let body = serde_json::json!({"error": {
        "message": format!("llmreplay capture: {why}"),
        "type": "llmreplay_capture",
        "code": status,
    }})
    .to_string();
    let reason = match status {
        400 => "Bad Request",
        501 => "Not Implemented",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Bad Gateway",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
