//! Routing and pools: which endpoint a due request goes to, and the connections opened,
//! adopted and backed off for it.

use std::io;

use mio::Interest;

use crate::pipeline::PreparedRequest;
use crate::record::ErrorKind;
use crate::sys::limits;
use crate::transport::Stream;

use super::conn::Conn;
use super::connector::Opened;
use super::exchange::Exchange;
use super::{token, SenderLoop, Slot, CONNECT_COST_NS, MAX_BACKOFF_NS};

/// After the client ran out of descriptors, no new connection is asked for this long.
const DESCRIPTOR_PAUSE_NS: u64 = 10_000_000;

impl SenderLoop {
    /// Hands a due request to an idle connection of its endpoint, or queues it.
    pub(super) fn dispatch(&mut self, mut req: PreparedRequest) {
        if let Some(peers) = &self.cfg.peers {
            req.endpoint = self.cfg.load.least_loaded(&peers[req.endpoint as usize]);
        }
        if let Some(shape) = req.cache_shape.take() {
            let mut model = self.cfg.expected.lock().unwrap_or_else(|p| p.into_inner());
            req.expected_cached_tokens = Some(model.planned(req.endpoint, &shape));
        }
        let target = req.endpoint as usize;
        self.cfg.load.started(target);
        self.open_requests += 1;
        let mut ex = Exchange::new(req, self.cfg.record_itl);
        let now = self.clock.now_ns();
        // It was one of the upcoming requests the pool has a connection for: counted twice
        // until the next recount, a burst would open a second connection for each.
        let pool = &mut self.pools[target];
        pool.upcoming = pool.upcoming.saturating_sub(1);
        let mut stale = Vec::new();
        let idle = self.pools[target].take_idle(now, &mut stale);
        for slot in stale {
            self.close_taken_idle(slot);
        }
        if let Some(slot) = idle {
            self.start(slot, ex);
        } else if now < self.pools[target].down_until && self.pools[target].connecting == 0 {
            let (kind, why) = self.pools[target]
                .down_because
                .clone()
                .unwrap_or((ErrorKind::Connect, "unreachable".into()));
            ex.fail(
                kind,
                format!(
                    "{} is down, reconnecting with backoff: {why}",
                    self.cfg.targets[target].url
                ),
            );
            self.emit(ex, target);
        } else {
            ex.waiting_since = Some(now);
            self.pools[target].waiting.push_back(ex);
        }
        self.top_up(target);
    }

    /// Opens connections so that waiting requests and the spare pool are covered.
    pub(super) fn top_up(&mut self, target: usize) {
        let now = self.clock.now_ns();
        let pool = &self.pools[target];
        if now < pool.down_until || now < pool.open_paused_until {
            return;
        }
        let want = pool.waiting.len() + pool.upcoming + self.cfg.spare_connections;
        let have = pool.idle_len() + pool.connecting;
        let needed_now = pool.waiting.len();
        for n in have..want {
            // Each new socket costs this thread its registration and handshake events: a
            // hundred opened ahead of need would hold up a send, so those wait for a later
            // pass when a deadline is near. Connections for waiting requests are asked at once.
            if n >= needed_now && self.send_is_near() {
                return;
            }
            self.connector.request(target);
            self.pools[target].connecting += 1;
        }
    }

    /// A deadline falls within the spin window (plus the cost of one connect).
    pub(super) fn send_is_near(&self) -> bool {
        self.heap.peek().is_some_and(|top| {
            self.t0_ns + top.due_ns <= self.clock.now_ns() + self.cfg.spin_ns + CONNECT_COST_NS
        })
    }

    /// Takes in the sockets the connector opened, and the answers to probes.
    pub(super) fn take_opened(&mut self) {
        while let Some(opened) = self.connector.try_opened() {
            match opened {
                Opened::Stream(target, opened) => {
                    if let Err(e) = opened.and_then(|stream| self.adopt(target, stream)) {
                        self.pools[target].connecting -= 1;
                        self.connect_failed(target, ErrorKind::Connect, &e);
                    }
                }
                Opened::Probe(target, answer) => {
                    self.pools[target].probing = false;
                    if let Err(e) = answer {
                        self.endpoint_gone(target, &e);
                    }
                }
            }
        }
    }

    /// Endpoint `target` takes no new connection, or answers none: the requests it has left
    /// without an answer for `--stall-timeout` will never get one (a server shutting down
    /// keeps them open and silent; a hung engine never starts them) and fail as
    /// `endpoint-down`.
    pub(super) fn endpoint_gone(&mut self, target: usize, e: &io::Error) {
        let now = self.clock.now_ns();
        let stall = self.cfg.stall_timeout_ns;
        let url = &self.cfg.targets[target].url;
        let what = match e.kind() {
            io::ErrorKind::Other => e.to_string(),
            _ => format!("takes no new connection ({e})"),
        };
        let gone: Vec<(usize, String)> = self
            .in_flight_exchanges()
            .filter(|(slot, ex)| {
                self.slots[*slot]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.target == target)
                    && ex
                        .waiting_for_answer(now)
                        .is_some_and(|silent| silent > stall)
            })
            .map(|(slot, ex)| {
                let silent = ex.waiting_for_answer(now).unwrap_or(0) as f64 / 1e9;
                (
                    slot,
                    format!(
                        "{url} {what}, and left this request without an answer for \
                         {silent:.1} s (--stall-timeout)"
                    ),
                )
            })
            .collect();
        for (slot, message) in gone {
            self.fail_and_close(slot, ErrorKind::EndpointDown, message);
        }
    }

    /// Registers a socket whose connect is under way; its first event tells how it went.
    pub(super) fn adopt(&mut self, target: usize, mut stream: Stream) -> io::Result<()> {
        self.opened += 1;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                generation: 0,
                conn: None,
            });
            self.slots.len() - 1
        });
        let generation = self.slots[slot].generation;
        if let Err(e) = self.poll.registry().register(
            stream.tcp_mut(),
            token(slot, generation),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(slot);
            return Err(e);
        }
        self.slots[slot].conn = Some(Conn::new(stream, target, self.opened));
        Ok(())
    }

    /// A connect (`Connect`) or TLS handshake (`Tls`) failed: the endpoint backs off, unless
    /// the client ran out of file descriptors.
    pub(super) fn connect_failed(&mut self, target: usize, kind: ErrorKind, e: &io::Error) {
        let now = self.clock.now_ns();
        let url = &self.cfg.targets[target].url;
        if limits::is_fd_exhaustion(e) {
            // The client's own limit, not the endpoint's fault: no backoff, no request failed
            // for it. Waiting requests take the connections that others free (or time out
            // waiting, told why); new connections are asked again after a pause.
            let why = format!(
                "this client is out of file descriptors ({e}): ulimit -n caps the requests in \
                 flight; raise it (ulimit -n 65536)"
            );
            if !std::mem::replace(&mut self.descriptors_warned, true) {
                self.progress
                    .out_of_descriptors
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                eprintln!(
                    "warning: {why}; requests wait for a connection another request frees, \
                     and {url} is not blamed"
                );
            }
            let pool = &mut self.pools[target];
            pool.open_paused_until = now + DESCRIPTOR_PAUSE_NS;
            pool.out_of_descriptors = Some(why);
            return;
        }
        let why = match kind {
            ErrorKind::Tls => format!("TLS handshake with {url}: {e}"),
            _ => format!("connect to {url}: {e}"),
        };
        let pool = &mut self.pools[target];
        pool.down_until = now + pool.backoff_ns;
        pool.backoff_ns = (pool.backoff_ns * 2).min(MAX_BACKOFF_NS);
        pool.down_because = Some((kind, why.clone()));
        if pool.connecting == 0 {
            // Nothing else will connect soon: the queued requests fail now, at their deadlines.
            let waiting = std::mem::take(&mut pool.waiting);
            for mut ex in waiting {
                ex.fail(kind, why.clone());
                self.emit(ex, target);
            }
        }
    }
}
