//! The timeline's due events written out: every connection whose next event has come gets
//! all its due events coalesced into one chunk and one write.

use super::*;

impl MockLoop {
    /// Writes everything due on every connection whose time has come.
    pub(super) fn emit_due(&mut self) {
        let now = self.clock.now_ns();
        while let Some(&Reverse((due, slot, generation))) = self.due.peek() {
            if due > now {
                break;
            }
            self.due.pop();
            let cfg = self.cfg.clone();
            let Some(conn) = conn_in(&mut self.conns, slot, generation) else {
                continue;
            };
            let Some(g) = conn.generation.as_mut() else {
                continue;
            };
            if !g.stream && g.held() {
                hurry(&self.counting, (slot, generation, g.id()), g);
                continue; // answered when the count arrives (take_counts)
            }
            let mut finished = false;
            let mut tokens_before = g.sent;
            if let Some(head) = conn.head_pending.take() {
                conn.output.extend_from_slice(&head);
            }
            if g.stream {
                // One HTTP chunk for all due events: size as fixed-width hex, patched after.
                let start = conn.output.len();
                conn.output.extend_from_slice(b"00000000\r\n");
                if conn.fault == Some(FaultKind::MalformedSse) && g.sent == 0 {
                    conn.output.extend_from_slice(
                        b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n",
                    );
                }
                let n = g.write_due_events(&cfg, now, &mut conn.output);
                if n == 0 {
                    conn.output.truncate(start);
                } else {
                    let size = conn.output.len() - start - 10;
                    conn.output[start..start + 8].copy_from_slice(format!("{size:08x}").as_bytes());
                    conn.output.extend_from_slice(b"\r\n");
                }
                if g.sent >= g.stop_at && !g.done() {
                    let fault = conn.fault.take();
                    self.cut_stream(slot, generation, fault);
                    continue;
                }
                if g.closed() {
                    conn.output.extend_from_slice(b"0\r\n\r\n");
                    finished = true;
                } else if g.held() {
                    // The rest waits for the prompt count (take_counts).
                    hurry(&self.counting, (slot, generation, g.id()), g);
                } else {
                    self.due.push(Reverse((g.next_due(&cfg), slot, generation)));
                }
            } else {
                tokens_before = 0;
                let body = g.full_response();
                let extra = match cfg.counting {
                    PromptCounting::Approximate => APPROXIMATE_COUNT_HEADER,
                    _ => "",
                };
                let bytes = serde_json::to_vec(&body).unwrap_or_default();
                write_response(&mut conn.output, 200, "application/json", extra, &bytes);
                finished = true;
            }
            let conn = conn_in(&mut self.conns, slot, generation).expect("still open");
            let g = conn.generation.as_ref().expect("generation");
            self.stats.tokens += g.sent - tokens_before;
            let wrote = g.sent > tokens_before || finished;
            if finished && conn.fault.is_none() {
                let planned = g.chunk_due(&cfg, g.chunks(&cfg).saturating_sub(1));
                self.stats
                    .lateness
                    .observe(now.saturating_sub(planned), cfg.itl_ns);
            }
            let mut ended = None;
            if finished {
                ended = conn.generation.take();
                if let Some((cache, g)) = self.prefix_cache.as_mut().zip(ended.as_mut()) {
                    if let Some(chain) = g.cache_chain.take() {
                        cache.extend(chain, generation::TOKEN_TEXT.trim().as_bytes(), g.sent);
                    }
                }
                // The token cache keeps the answer's tokens too (its reasoning aside: a client
                // sends back only the answer).
                if let (Some(pool), Some(g)) = (&self.counting, ended.as_ref()) {
                    if let Some(seq) = g.count_seq {
                        pool.answered(seq, g.answer_tokens());
                    }
                }
                self.release();
            }
            // Read before the write: a write's time is then at or before the client's read of
            // it even when this thread is preempted as the write returns.
            let write_ns = self
                .timing_log
                .is_some()
                .then(crate::sys::clock::monotonic_ns);
            self.flush(slot, generation);
            if let (Some(write_ns), true) = (write_ns, wrote) {
                self.log_timing(slot, generation, ended, write_ns);
            }
            if finished {
                // A request may already be waiting on this connection.
                self.next_request(slot, generation);
                self.flush(slot, generation);
            }
        }
    }
}
