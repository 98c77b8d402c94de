//! One request taken from a connection's input: its head and body parsed, its route and
//! faults decided, and its answer begun (an error at once, or a generation on the timeline).

use super::*;
use crate::api::{Api, Route};

/// What the head of a request says.
struct Head {
    /// Bytes of the head, up to and including its blank line.
    len: usize,
    /// `content-length`.
    body_len: usize,
    /// `x-llmreplay-index`: the record the client sent (faults and logs key on it).
    index: Option<u64>,
    wants_close: bool,
    /// With `--arrival-log`: the headers that say who the request is ([`identifying`]).
    ids: Vec<(String, String)>,
    method: String,
    /// Without its query.
    path: String,
}

impl MockLoop {
    /// Takes one complete request from the input. True when it was answered at once (so the
    /// next one may be taken too); false when incomplete, idle or generating.
    pub(super) fn take_request(&mut self, slot: usize, generation: u32) -> bool {
        let now = self.clock.now_ns();
        let id = self.next_id;
        let cfg = self.cfg.clone();
        let Some(conn) = conn_in(&mut self.conns, slot, generation) else {
            return false;
        };
        if conn.generation.is_some() || conn.input.is_empty() {
            return false;
        }
        let Some(head) = read_head(conn, self.arrival_log.is_some()) else {
            return false;
        };
        if conn.input.len() < head.len + head.body_len {
            return false; // body still arriving
        }
        let fault = cfg
            .faults
            .for_request(head.index.unwrap_or(id))
            .filter(|&f| f != FaultKind::DropReused || conn.requests > 0);
        if fault == Some(FaultKind::DropReused) {
            // Closed unread and unanswered: the flush after this closes it.
            conn.input.clear();
            conn.close_after = true;
            self.log_fault(head.index, FaultKind::DropReused);
            return false;
        }
        conn.requests += 1;
        // Only now: a close flagged while the body was still arriving would end the
        // connection before the request is answered.
        conn.close_after |= head.wants_close;
        if let Some(log) = self.arrival_log.as_mut() {
            // On this process's clock: compare gaps between arrivals, not absolute times.
            let arrival_ns = conn.arrived_ns.unwrap_or(now);
            let ids: serde_json::Map<String, Value> = head
                .ids
                .iter()
                .map(|(name, value)| (name.clone(), json!(value)))
                .collect();
            log.log(&json!({"index": head.index, "arrival_ns": arrival_ns, "headers": ids}));
        }
        let body: Vec<u8> = conn.input[head.len..head.len + head.body_len].to_vec();
        conn.input.drain(..head.len + head.body_len);
        let received_mono_ns = conn.received_mono_ns.take().unwrap_or(self.woke_mono_ns);
        // A pipelined next request is already here.
        conn.arrived_ns = (!conn.input.is_empty()).then_some(now);
        self.stats.requests += 1;
        let levels = metrics::Levels {
            model: &cfg.model,
            running: self.running,
            waiting: self.waiting.len(),
            stats: &self.stats,
        };
        let Some((dialect, route)) = route(conn, &head, &cfg, &levels) else {
            return true;
        };
        if self.stats.bodies.len() < cfg.keep_bodies {
            let text = String::from_utf8_lossy(&body).into_owned();
            self.stats.bodies.push((head.path.clone(), text));
        }
        *self
            .stats
            .requests_by_api
            .entry(dialect.name())
            .or_default() += 1;
        let begun = begin(
            &mut self.prefix_cache,
            &mut self.stats,
            &cfg,
            (dialect, &route),
            &body,
            id,
            now,
        );
        let mut g = match begun {
            Ok(g) => g,
            Err(message) => {
                respond_json(conn, 400, &error_body(&message, 400));
                return true;
            }
        };
        self.next_id += 1;
        if self.timing_log.is_some() {
            let chunks = g.chunks(&cfg) as usize + 1;
            g.timing = Some(Box::new(Timing {
                index: head.index,
                received_ns: received_mono_ns,
                chunks_ns: Vec::with_capacity(chunks),
                chunks_tokens: Vec::with_capacity(chunks),
            }));
        }
        if let Err(answered) = open_stream(conn, fault, &mut g, &cfg) {
            self.log_fault(head.index, answered);
            return true;
        }
        if let Some(f) = fault {
            self.log_fault(head.index, f);
        }
        self.admit(slot, generation, g);
        false
    }

    /// Puts a begun generation on the timeline, or in the queue when the server is full or
    /// shutting down.
    fn admit(&mut self, slot: usize, generation: u32, mut g: Generation) {
        if let (Some(pool), Some(job)) = (&self.counting, &g.count_job) {
            g.count_seq = Some(pool.submit((slot, generation, g.id()), job.clone()));
        }
        let taken = g.id() + 1;
        if self.cfg.graceful_shutdown_after.is_some_and(|n| taken >= n) && self.listener.is_some() {
            // Closing the listener refuses new connects; the queued stay queued.
            if let Some(mut listener) = self.listener.take() {
                let _ = self.poll.registry().deregister(&mut listener);
            }
            self.accept_retry = false;
        }
        let full = self.cfg.max_running.is_some_and(|n| self.running >= n);
        let queued = self.listener.is_none() || full;
        g.queued = queued;
        if queued {
            self.waiting.push_back((slot, generation, g.id()));
        } else {
            self.running += 1;
        }
        let conn = conn_in(&mut self.conns, slot, generation).expect("open");
        conn.generation = Some(g);
        if !queued {
            self.schedule_first(slot, generation);
        }
    }
}

/// The head at the start of `conn.input`; None while it is incomplete, or when it was bad
/// and has been answered with an error.
fn read_head(conn: &mut Conn, keep_ids: bool) -> Option<Head> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(&conn.input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if conn.input.len() > MAX_REQUEST_HEAD {
                conn.close_after = true;
                respond_json(conn, 431, &error_body("request head too large", 431));
            }
            return None;
        }
        Err(e) => {
            conn.close_after = true;
            let message = format!("invalid request: {e}");
            respond_json(conn, 400, &error_body(&message, 400));
            conn.input.clear();
            return None;
        }
    };
    let number = |value: &[u8]| std::str::from_utf8(value).ok()?.trim().parse().ok();
    let mut head = Head {
        len,
        body_len: 0,
        index: None,
        wants_close: false,
        ids: Vec::new(),
        method: req.method.unwrap_or("").to_string(),
        path: req
            .path
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_string(),
    };
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("x-llmreplay-index") {
            head.index = number(h.value);
        } else if h.name.eq_ignore_ascii_case("content-length") {
            head.body_len = number(h.value).unwrap_or(0) as usize;
        } else if h.name.eq_ignore_ascii_case("connection") {
            head.wants_close |= h.value.eq_ignore_ascii_case(b"close");
        } else if keep_ids && identifying(h.name) {
            let value = String::from_utf8_lossy(h.value).into_owned();
            head.ids.push((h.name.to_ascii_lowercase(), value));
        }
    }
    Some(head)
}

/// Whether the arrival log keeps a header: `traceparent` and the `x-` headers that name a
/// request or its session, never one that may hold a secret (a key, a token).
fn identifying(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let secret = ["key", "auth", "token", "secret", "cookie"]
        .iter()
        .any(|s| name.contains(s));
    (name == "traceparent" || name.starts_with("x-")) && name != "x-llmreplay-index" && !secret
}

/// The dialect and route of a generation; None when the request was answered here (info,
/// health, metrics, models, or an error for a wrong method or path).
fn route(
    conn: &mut Conn,
    head: &Head,
    cfg: &MockConfig,
    levels: &metrics::Levels,
) -> Option<(Api, Route)> {
    let (method, path) = (head.method.as_str(), head.path.as_str());
    let served = crate::api::REGISTRY.iter().find_map(|&api| {
        let route = api.routes().iter().find(|r| r.path == path)?;
        Some((api, *route))
    });
    match (method, path, served) {
        ("POST", _, Some(served)) => return Some(served),
        ("GET", "/info", _) => {
            let info = json!({"model_id": cfg.model, "model_dtype": "mock", "max_input_tokens": 1_000_000, "max_total_tokens": 2_000_000, "version": "llmreplay-mock"});
            respond_json(conn, 200, &info);
        }
        ("GET", "/health", _) => {
            // A Date header, as every HTTP server sends: the shards' clock check reads it.
            let now = crate::sys::wall_start::unix_ns_now() as i128;
            let date = now + i128::from(cfg.date_offset_ms) * 1_000_000;
            let header = format!("date: {}", crate::http::date::format(date.max(0) as u64));
            write_response(&mut conn.output, 200, "text/plain", &header, b"");
        }
        ("GET", "/metrics", _) => {
            let text = metrics::exposition(levels);
            let kind = "text/plain; version=0.0.4; charset=utf-8";
            write_response(&mut conn.output, 200, kind, "", text.as_bytes());
        }
        ("GET", "/v1/models", _) => {
            let models = json!({"object": "list", "data": [{"id": cfg.model, "object": "model", "created": 0, "owned_by": "llmreplay-mock"}]});
            respond_json(conn, 200, &models);
        }
        (_, "/health" | "/metrics" | "/v1/models" | "/info", _) | (_, _, Some(_)) => {
            let message = format!("method {method} not allowed");
            respond_json(conn, 405, &error_body(&message, 405));
        }
        _ => {
            let message = format!("no route for {method} {path}");
            respond_json(conn, 404, &error_body(&message, 404));
        }
    }
    None
}

/// A generation begun from a request body: its prompt read by the dialect, looked up in the
/// prefix cache, and its prefill time set from what was not cached. Err: the 400's message.
fn begin(
    cache: &mut Option<crate::prefix_cache::PrefixCache>,
    stats: &mut MockStats,
    cfg: &MockConfig,
    (dialect, route): (Api, &Route),
    body: &[u8],
    id: u64,
    now: u64,
) -> Result<Generation, String> {
    let v = serde_json::from_slice::<Value>(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let obj = v.as_object().ok_or("request body must be a JSON object")?;
    let req = dialect.mock_request(obj, route)?;
    let mut g = Generation::new(dialect, &req, obj, id, now, &cfg.counting)
        .with_reasoning(cfg.reasoning_tokens)
        .with_fixture(cfg.replay_stream.clone());
    let uncached = match cache.as_mut() {
        Some(cache) => {
            let (hits, queries, chain) = cache.serve_request(&req.prompt);
            g.cache_chain = Some(chain);
            // With --tokenizer, the token cache reports the hits (the words' serve the
            // prefill time).
            if g.count_job.is_none() {
                stats.prefix_hits += hits;
                stats.prefix_queries += queries;
            }
            g.cached_tokens = Some(hits);
            queries - hits
        }
        // A prompt still to count: its words, one a token in synthetic prompts.
        None if g.count_job.is_some() => prompt_words(&req.prompt),
        None => g.prompt_tokens,
    };
    g.prefill_ns = uncached * cfg.prefill_ns_per_token;
    Ok(g)
}

/// Begins the answer: the stream's head, shaped by the request's fault. Err: the fault
/// answered the request whole (an error status, a huge head), nothing is generated.
fn open_stream(
    conn: &mut Conn,
    fault: Option<FaultKind>,
    g: &mut Generation,
    cfg: &MockConfig,
) -> Result<(), FaultKind> {
    conn.fault = fault;
    let mut head: Vec<u8> = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n".to_vec();
    // A recorded stream's counts are the recording's, not the mock's estimate.
    if matches!(cfg.counting, PromptCounting::Approximate) && cfg.replay_stream.is_none() {
        head.extend_from_slice(APPROXIMATE_COUNT_HEADER.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    match fault {
        Some(FaultKind::Status(code)) => {
            conn.fault = None;
            respond_json(conn, code, &error_body("injected fault", code));
            return Err(FaultKind::Status(code));
        }
        Some(FaultKind::HugeHead) => {
            conn.fault = None;
            conn.close_after = true;
            let filler = "a".repeat(HUGE_HEAD_BYTES);
            write!(
                conn.output,
                "HTTP/1.1 200 OK\r\nx-filler: {filler}\r\ncontent-length: 0\r\n\r\n"
            )
            .ok();
            return Err(FaultKind::HugeHead);
        }
        Some(FaultKind::CloseAfterResponse) => {
            conn.close_after = true;
            head.extend_from_slice(b"connection: close\r\n");
        }
        Some(FaultKind::SlowHead) => g.arrival_ns += SLOW_HEAD_NS,
        Some(FaultKind::Stall | FaultKind::ResetMidStream | FaultKind::TruncatedChunk) => {
            g.stop_at = g.tokens / 2;
        }
        Some(FaultKind::MalformedSse | FaultKind::Refuse | FaultKind::DropReused) | None => {}
    }
    head.extend_from_slice(b"\r\n");
    if g.stream {
        if fault == Some(FaultKind::SlowHead) {
            conn.head_pending = Some(head);
        } else {
            conn.output.extend_from_slice(&head);
        }
    }
    Ok(())
}
