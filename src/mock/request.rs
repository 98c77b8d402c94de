//! One request taken from a connection's input: its head and body parsed, its route and
//! faults decided, and its answer begun (an error at once, or a generation on the timeline).

use super::*;

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
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(&conn.input) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if conn.input.len() > MAX_REQUEST_HEAD {
                    conn.close_after = true;
                    respond_json(conn, 431, &error_body("request head too large", 431));
                }
                return false;
            }
            Err(e) => {
                conn.close_after = true;
                respond_json(
                    conn,
                    400,
                    &error_body(&format!("invalid request: {e}"), 400),
                );
                conn.input.clear();
                return false;
            }
        };
        let mut length = 0usize;
        let mut index = None;
        let mut wants_close = false;
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("x-llmreplay-index") {
                index = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            }
            if h.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
            } else if h.name.eq_ignore_ascii_case("connection")
                && h.value.eq_ignore_ascii_case(b"close")
            {
                wants_close = true;
            }
        }
        if conn.input.len() < head_len + length {
            return false; // body still arriving
        }
        let fault = cfg
            .faults
            .for_request(index.unwrap_or(id))
            .filter(|&f| f != FaultKind::DropReused || conn.requests > 0);
        if fault == Some(FaultKind::DropReused) {
            // Closed unread and unanswered: the flush after this closes it.
            conn.input.clear();
            conn.close_after = true;
            self.log_fault(index, FaultKind::DropReused);
            return false;
        }
        conn.requests += 1;
        // Only now: a close flagged while the body was still arriving would end the
        // connection before the request is answered.
        conn.close_after |= wants_close;
        if let Some(log) = self.arrival_log.as_mut() {
            // On this process's clock: compare gaps between arrivals, not absolute times.
            let arrival_ns = conn.arrived_ns.unwrap_or(now);
            log.log(&json!({"index": index, "arrival_ns": arrival_ns}));
        }
        let method = req.method.unwrap_or("").to_string();
        let path = req
            .path
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_string();
        let body: Vec<u8> = conn.input[head_len..head_len + length].to_vec();
        conn.input.drain(..head_len + length);
        let received_mono_ns = conn.received_mono_ns.take().unwrap_or(self.woke_mono_ns);
        // A pipelined next request is already here.
        conn.arrived_ns = (!conn.input.is_empty()).then_some(now);
        self.stats.requests += 1;
        let served = crate::api::REGISTRY.iter().find_map(|&api| {
            let route = api.routes().iter().find(|r| r.path == path)?;
            Some((api, *route))
        });
        let (dialect, route) = match (method.as_str(), path.as_str(), served) {
            ("POST", _, Some(served)) => served,
            ("GET", "/info", _) => {
                let info = json!({"model_id": cfg.model, "model_dtype": "mock", "max_input_tokens": 1_000_000, "max_total_tokens": 2_000_000, "version": "llmreplay-mock"});
                respond_json(conn, 200, &info);
                return true;
            }
            ("GET", "/health", _) => {
                // A Date header, as every HTTP server sends: the shards' clock check reads it.
                let now = crate::sys::wall_start::unix_ns_now() as i128;
                let date = now + i128::from(cfg.date_offset_ms) * 1_000_000;
                let header = format!("date: {}", crate::http::date::format(date.max(0) as u64));
                write_response(&mut conn.output, 200, "text/plain", &header, b"");
                return true;
            }
            ("GET", "/metrics", _) => {
                let text = metrics::exposition(&metrics::Levels {
                    model: &cfg.model,
                    running: self.running,
                    waiting: self.waiting.len(),
                    stats: &self.stats,
                });
                let kind = "text/plain; version=0.0.4; charset=utf-8";
                write_response(&mut conn.output, 200, kind, "", text.as_bytes());
                return true;
            }
            ("GET", "/v1/models", _) => {
                let models = json!({"object": "list", "data": [{"id": cfg.model, "object": "model", "created": 0, "owned_by": "llmreplay-mock"}]});
                respond_json(conn, 200, &models);
                return true;
            }
            (_, "/health" | "/metrics" | "/v1/models" | "/info", _) | (_, _, Some(_)) => {
                respond_json(
                    conn,
                    405,
                    &error_body(&format!("method {method} not allowed"), 405),
                );
                return true;
            }
            _ => {
                respond_json(
                    conn,
                    404,
                    &error_body(&format!("no route for {method} {path}"), 404),
                );
                return true;
            }
        };
        if self.stats.bodies.len() < cfg.keep_bodies {
            let text = String::from_utf8_lossy(&body).into_owned();
            self.stats.bodies.push((path.clone(), text));
        }
        *self
            .stats
            .requests_by_api
            .entry(dialect.name())
            .or_default() += 1;
        let cache = &mut self.prefix_cache;
        let stats = &mut self.stats;
        let parsed = serde_json::from_slice::<Value>(&body)
            .map_err(|e| format!("invalid JSON body: {e}"))
            .and_then(|v| {
                let obj = v.as_object().ok_or("request body must be a JSON object")?;
                let req = dialect.mock_request(obj, &route)?;
                let mut g = Generation::new(dialect, &req, obj, id, now, &cfg.counting)
                    .with_reasoning(cfg.reasoning_tokens)
                    .with_fixture(cfg.replay_stream.clone());
                let uncached = match cache.as_mut() {
                    Some(cache) => {
                        let (hits, queries, chain) = cache.serve_request(&req.prompt);
                        g.cache_chain = Some(chain);
                        // With --tokenizer, the token cache reports the hits (the words'
                        // serve the prefill time).
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
            });
        let generation_state = match parsed {
            Ok(g) => g,
            Err(message) => {
                respond_json(conn, 400, &error_body(&message, 400));
                return true;
            }
        };
        self.next_id += 1;
        let mut generation_state = generation_state;
        if self.timing_log.is_some() {
            generation_state.timing = Some(Box::new(Timing {
                index,
                received_ns: received_mono_ns,
                chunks_ns: Vec::with_capacity(generation_state.chunks(&cfg) as usize + 1),
                chunks_tokens: Vec::with_capacity(generation_state.chunks(&cfg) as usize + 1),
            }));
        }
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
                self.log_fault(index, FaultKind::Status(code));
                return true;
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
                self.log_fault(index, FaultKind::HugeHead);
                return true;
            }
            Some(FaultKind::CloseAfterResponse) => {
                conn.close_after = true;
                head.extend_from_slice(b"connection: close\r\n");
            }
            Some(FaultKind::SlowHead) => generation_state.arrival_ns += SLOW_HEAD_NS,
            Some(FaultKind::Stall | FaultKind::ResetMidStream | FaultKind::TruncatedChunk) => {
                generation_state.stop_at = generation_state.tokens / 2;
            }
            Some(FaultKind::MalformedSse | FaultKind::Refuse | FaultKind::DropReused) | None => {}
        }
        head.extend_from_slice(b"\r\n");
        if generation_state.stream {
            if fault == Some(FaultKind::SlowHead) {
                conn.head_pending = Some(head);
            } else {
                conn.output.extend_from_slice(&head);
            }
        }
        if let (Some(pool), Some(job)) = (&self.counting, &generation_state.count_job) {
            generation_state.count_seq =
                Some(pool.submit((slot, generation, generation_state.id()), job.clone()));
        }
        if let Some(f) = fault {
            self.log_fault(index, f);
        }
        if cfg.graceful_shutdown_after.is_some_and(|n| id + 1 >= n) && self.listener.is_some() {
            // Closing the listener refuses new connects; the queued stay queued.
            if let Some(mut listener) = self.listener.take() {
                let _ = self.poll.registry().deregister(&mut listener);
            }
            self.accept_retry = false;
        }
        if self.listener.is_none() || cfg.max_running.is_some_and(|n| self.running >= n) {
            generation_state.queued = true;
            self.waiting
                .push_back((slot, generation, generation_state.id()));
            let conn = conn_in(&mut self.conns, slot, generation).expect("open");
            conn.generation = Some(generation_state);
            return false;
        }
        self.running += 1;
        let conn = conn_in(&mut self.conns, slot, generation).expect("open");
        conn.generation = Some(generation_state);
        self.schedule_first(slot, generation);
        false
    }
}
