//! Producers: read the trace, build each request's bytes ahead of its deadline, and hand them
//! to the senders through one bounded channel (the back-pressure that bounds memory).
//!
//! Producers take records from the shared reader in timestamp order and build bodies in
//! parallel (the expensive part). Under the reader's lock is everything that must follow the
//! trace's order: the line parse (`trace::OrderedReader`), `--loop` passes and salts, the
//! schedule's placement, the route, the session link and the expected-cache model (each
//! record's prompt shape is looked up there, and then held). Producers may finish out of
//! order; the senders order what they receive by deadline.

use std::cmp::Ordering;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::carry::CarrySlot;
use crate::error::{Error, Result};
use crate::expected_cache::{PromptShape, SharedModel};
use crate::fleet::Router;
use crate::schedule::{Shaper, Slot};
use crate::session::{SessionLink, SessionTracker, SessionTurn};
use crate::shard::ShardFilter;
use crate::sys::stop::StopRequest;
use crate::trace::{OrderedReader, TraceIds, TraceRecord};

mod build;
mod histories;
pub mod identity;
mod salt;
pub use build::{BlockCaches, BodyStyle, BuildError, PromptLog, RequestBuilder};
use histories::MessageHistories;
pub use salt::{LoopPrompts, Salts};

/// A request ready to be written: everything but the per-endpoint request line and headers.
#[derive(Debug)]
pub struct PreparedRequest {
    pub index: u64,
    /// The endpoint chosen for it ([`crate::fleet::Router`]); the body is in its dialect.
    pub endpoint: u32,
    /// Planned send time, nanoseconds after the run start: the schedule's, never changed.
    pub scheduled_ns: u64,
    /// When it is due to be sent (ns after the run start): the plan, moved later by the
    /// sender only, to its parent's end plus the think time (a released turn), to a freed
    /// session place, or to a free slot (closed loop). The record's `scheduled_ms` is this.
    pub due_ns: u64,
    /// `X-Llmreplay-Index: i\r\nContent-Length: N\r\n\r\n` followed by the body, from
    /// `start` on.
    pub bytes: Vec<u8>,
    pub start: usize,
    pub input_tokens: Option<u64>,
    pub output_tokens_target: Option<u64>,
    pub ids: TraceIds,
    /// A turn of a conversation: it waits for its parent (see [`crate::session`]).
    pub session: Option<Box<SessionTurn>>,
    /// Closed loop: how long it waited for a free slot (set when it is sent).
    pub queue_ns: Option<u64>,
    /// `--warmup-requests`: sent and recorded, left out of every statistic.
    pub warmup: bool,
    /// The prefix-cache hits its prompt should find at its endpoint, as the schedule
    /// predicts them ([`crate::expected_cache`]; None: not a synthetic prompt).
    pub expected_cached_tokens: Option<u64>,
    /// A recorded-messages prompt: the share of it the schedule predicts its endpoint holds
    /// (of its bytes; the record applies it to the server's prompt tokens).
    pub expected_share: Option<f64>,
    /// Where the endpoint is picked when the request is due (`--route least-inflight`): its
    /// prompt's shape, for the sender to look its expected hits up there.
    pub cache_shape: Option<Box<PromptShape>>,
    /// A turn of a conversation under `--carry-forward on`: where its prompt is, for its
    /// parent's history to go in front and its children to take it ([`crate::carry`]).
    pub carry: Option<Box<CarrySlot>>,
    /// `--save-prompts`: its place among the records sent and its prompts.jsonl line, as
    /// built (taken by the producer that logs it).
    pub prompt_line: Option<(u64, Vec<u8>)>,
}

impl PreparedRequest {
    pub fn payload(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// An empty request due at `at`: what the builder fills in, a response read with no request
    /// behind it ([`crate::sender::read_response`]), the sender's unit tests.
    pub fn empty(index: u64, at: u64) -> PreparedRequest {
        PreparedRequest {
            index,
            endpoint: 0,
            scheduled_ns: at,
            due_ns: at,
            bytes: Vec::new(),
            start: 0,
            input_tokens: None,
            output_tokens_target: None,
            ids: crate::trace::TraceIds::default(),
            session: None,
            queue_ns: None,
            warmup: false,
            expected_cached_tokens: None,
            expected_share: None,
            cache_shape: None,
            carry: None,
            prompt_line: None,
        }
    }

    /// An empty request for turn `link`, due at `at` (unit tests of the sender's sessions).
    #[cfg(test)]
    pub fn turn_for_test(index: u64, at: u64, link: crate::session::SessionLink) -> Self {
        let turn = crate::session::SessionTurn::new(link);
        let session = Some(Box::new(turn));
        PreparedRequest {
            session,
            ..Self::empty(index, at)
        }
    }
}

/// Ordered by when due, then record number, for the senders' min-heaps.
impl Ord for PreparedRequest {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due_ns, other.index).cmp(&(self.due_ns, self.index))
    }
}
impl PartialOrd for PreparedRequest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for PreparedRequest {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.index) == (other.due_ns, other.index)
    }
}
impl Eq for PreparedRequest {}

/// Request buffers on their way back from the senders to the producers.
///
/// A request's bytes (often 100 KB and more) are written once and then not needed. Freeing
/// them on the sender thread would hand glibc's work to it: a free into another thread's
/// arena, and now and then the release of a whole arena heap, stalled sends by up to 40 ms.
/// So senders only give buffers back, and producers reuse them (or free the ones too large
/// for the prompt at hand, off the schedule's critical path).
#[derive(Clone, Debug)]
pub struct BufferPool {
    tx: crossbeam_channel::Sender<Vec<u8>>,
    rx: crossbeam_channel::Receiver<Vec<u8>>,
}

impl BufferPool {
    /// Holds up to `capacity` buffers; one given back beyond that is freed by the giver.
    pub fn new(capacity: usize) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        BufferPool { tx, rx }
    }

    /// An empty buffer with room for `needed` bytes: a returned one when there is one of a
    /// fitting size.
    pub fn take(&self, needed: usize) -> Vec<u8> {
        let mut buf = match self.rx.try_recv() {
            Ok(buf) if buf.capacity() <= 2 * needed + 64 * 1024 => buf,
            _ => Vec::new(),
        };
        buf.clear();
        buf.reserve(needed);
        buf
    }

    /// Gives a written request's buffer back (never blocks).
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > 0 {
            let _ = self.tx.try_send(buf);
        }
    }
}

/// Bytes of prepared requests in the channel, bounded (`--channel-mb`), so that memory does
/// not depend on prompt sizes: producers wait for room, senders make room as they take.
#[derive(Debug)]
pub struct ChannelBudget {
    used: AtomicUsize,
    limit: usize,
    /// Sender threads still taking: when none is left, nothing will make room.
    senders: AtomicUsize,
}

impl ChannelBudget {
    pub fn new(limit: usize, senders: usize) -> Self {
        ChannelBudget {
            used: AtomicUsize::new(0),
            limit,
            senders: AtomicUsize::new(senders),
        }
    }

    /// Waits until `bytes` more fit (or the channel is empty: one request always fits); false
    /// when a stop is requested or every sender has ended.
    pub fn reserve(&self, bytes: usize, stop: &StopRequest) -> bool {
        loop {
            let used = self.used.load(AtomicOrdering::Acquire);
            if used == 0 || used + bytes <= self.limit {
                if self
                    .used
                    .compare_exchange(
                        used,
                        used + bytes,
                        AtomicOrdering::AcqRel,
                        AtomicOrdering::Relaxed,
                    )
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if stop.requested_at().is_some() || self.senders.load(AtomicOrdering::Acquire) == 0 {
                return false;
            }
            // Room comes back as senders take requests; a 200 us nap is nothing against a
            // lead of seconds, and keeps a waiting producer off the CPU.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// A sender thread has ended (normally or not).
    pub fn sender_ended(&self) {
        self.senders.fetch_sub(1, AtomicOrdering::AcqRel);
    }

    /// A sender took `bytes` out of the channel.
    pub fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, AtomicOrdering::AcqRel);
    }
}

/// The producers' end of the channels to the senders, bounded in count and in bytes: one
/// that every sender takes from, and one per sender for the turns of the conversations it
/// runs (a turn waits for its parent on the sender that sent the parent).
#[derive(Clone)]
pub struct ToSenders {
    pub tx: Sender<PreparedRequest>,
    pub conversations: Vec<Sender<PreparedRequest>>,
    pub budget: Arc<ChannelBudget>,
}

impl ToSenders {
    /// Waits for room, then hands the request over; false when stopping or the senders are
    /// gone.
    fn send(&self, request: PreparedRequest, stop: &StopRequest) -> bool {
        if !self.budget.reserve(request.bytes.capacity(), stop) {
            return false;
        }
        match &request.session {
            Some(turn) => {
                let to = turn.link.sender(self.conversations.len());
                self.conversations[to].send(request).is_ok()
            }
            None => self.tx.send(request).is_ok(),
        }
    }
}

/// `--loop`: how the trace is read again for the next pass, and what makes each pass's
/// prompts its own.
pub struct Passes {
    /// Passes after the current one.
    pub left: u64,
    /// Opens the trace anew.
    pub reopen: Box<dyn FnMut() -> Result<OrderedReader> + Send>,
    /// Records in one pass: pass k's indices start at k x this.
    pub per_pass: u64,
    /// The run's and each pass's prompt salts ([`salt`]).
    pub salts: Salts,
}

impl Passes {
    /// A single pass, salted as `salts` say.
    pub fn once(salts: Salts) -> Passes {
        Passes {
            left: 0,
            reopen: Box::new(|| Err(Error::Run("no further pass".into()))),
            per_pass: 0,
            salts,
        }
    }
}

/// The trace reader shared by the producers, with the router: records are routed in trace
/// order (a conversation's turns in turn), under the same short lock.
struct SharedReader {
    reader: OrderedReader,
    passes: Passes,
    /// The pass being read (0 first).
    pass: u64,
    /// The effective schedule ([`crate::schedule`]): the plan line ran the same.
    shaper: Shaper,
    /// Records handed out so far: the next one's place.
    handed_out: u64,
    /// `--shard`: only this shard's records of the schedule are built and sent.
    shard: Option<ShardFilter>,
    router: Router,
    sessions: SessionTracker,
    /// The expected prefix-cache hits, modelled over every record the schedule sends.
    expected: SharedModel,
    /// Task graphs' recorded-messages turns, for the turns that continue them.
    histories: MessageHistories,
    builder: Arc<RequestBuilder>,
    finished: bool,
}

/// What a producer thread did: the requests it built, and its time with the shared reader's
/// lock, under which records are decided in trace order (the pipeline's serial part).
#[derive(Clone, Copy, Debug, Default)]
pub struct Produced {
    pub built: u64,
    /// Nanoseconds it held the lock.
    pub locked_ns: u64,
    /// Nanoseconds it waited for the lock.
    pub waited_ns: u64,
    /// Its whole run, ns.
    pub wall_ns: u64,
}

impl Produced {
    pub fn add(&mut self, other: Produced) {
        self.built += other.built;
        self.locked_ns += other.locked_ns;
        self.waited_ns += other.waited_ns;
        self.wall_ns = self.wall_ns.max(other.wall_ns);
    }
}

/// Starts `n` producer threads; each says what it did ([`Produced`]).
/// `cores` are pinned round-robin when given.
#[allow(clippy::too_many_arguments)]
pub fn spawn_producers(
    n: usize,
    reader: OrderedReader,
    passes: Passes,
    shaper: Shaper,
    shard: Option<ShardFilter>,
    router: Router,
    sessions: SessionTracker,
    expected: SharedModel,
    builder: Arc<RequestBuilder>,
    out: ToSenders,
    cores: Vec<core_affinity::CoreId>,
    stop: Arc<StopRequest>,
) -> Vec<JoinHandle<Result<Produced>>> {
    let shared = Arc::new(Mutex::new(SharedReader {
        reader,
        passes,
        pass: 0,
        shaper,
        handed_out: 0,
        shard,
        router,
        sessions,
        expected,
        histories: MessageHistories::default(),
        builder: Arc::clone(&builder),
        finished: false,
    }));
    (0..n.max(1))
        .map(|i| {
            let shared = Arc::clone(&shared);
            let builder = Arc::clone(&builder);
            let out = out.clone();
            let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("producer-{i}"))
                .spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                    produce(&shared, &builder, &out, &stop)
                })
                .expect("spawn producer thread")
        })
        .collect()
}

/// A record with everything decided under the reader lock, in trace order.
struct Planned {
    record: TraceRecord,
    /// Its place among the records sent.
    seq: u64,
    endpoint: u32,
    scheduled_ns: u64,
    link: Option<SessionLink>,
    warmup: bool,
    expected_cached_tokens: Option<u64>,
    expected_share: Option<f64>,
    cache_shape: Option<PromptShape>,
}

impl SharedReader {
    /// The next record to send and its plan, or None at the end (of the trace, the last
    /// `--loop` pass, or the cut of `--max-requests`/`--duration`/`--time-in-secs`).
    fn next_planned(&mut self) -> Result<Option<Planned>> {
        if self.finished {
            return Ok(None);
        }
        // Records before --start-offset are skipped.
        let (record, endpoint, scheduled_ns, warmup, expected) = loop {
            let Some((mut record, ts)) = self.reader.next_record()? else {
                if self.passes.left == 0 {
                    self.finished = true;
                    return Ok(None);
                }
                self.passes.left -= 1;
                self.pass += 1;
                self.reader = (self.passes.reopen)()?;
                self.sessions.new_pass();
                self.passes.salts.new_pass();
                if self.passes.salts.repeats() {
                    self.expected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .forget();
                }
                if let Some(shard) = &mut self.shard {
                    shard.new_pass();
                }
                continue;
            };
            record.index += self.pass * self.passes.per_pass;
            self.passes.salts.apply(&mut record);
            let live = self.builder.carry_forward.threads_live(&record.ids);
            self.histories.complete(&mut record, live);
            match self.shaper.place(self.pass, ts) {
                Slot::Skip => {}
                Slot::End(_) => {
                    self.finished = true;
                    return Ok(None);
                }
                Slot::Send {
                    scheduled_ns,
                    warmup,
                } => {
                    // Every record is routed, the shard's own or not: the router's state
                    // (conversations placed, round-robin turns) is the same on every host.
                    let endpoint = self.router.pick(&record);
                    // So is the expected cache: every host models the whole schedule (unless
                    // the endpoint is picked when due: then the sender looks it up there).
                    let shape = self.builder.prompt_shape(endpoint, &record);
                    let expected = match (shape, self.router.picks_when_due()) {
                        (Some(shape), true) => (None, None, Some(shape)),
                        (Some(shape), false) => {
                            let mut model = self.expected.lock().unwrap_or_else(|p| p.into_inner());
                            (Some(model.planned(endpoint, &shape)), None, None)
                        }
                        (None, false) => {
                            let mut model = self.expected.lock().unwrap_or_else(|p| p.into_inner());
                            let share = self.histories.share(&mut model, endpoint, &record, live);
                            (None, share, None)
                        }
                        (None, true) => (None, None, None),
                    };
                    let pass = self.pass;
                    if self
                        .shard
                        .as_mut()
                        .is_none_or(|shard| shard.keeps(&record, pass, endpoint))
                    {
                        break (record, endpoint, scheduled_ns, warmup, expected);
                    }
                }
            }
        };
        let link = self.sessions.link(&record, scheduled_ns);
        // `--measure-from mid`: a turn before its conversation's first measured one is warmup.
        let warmup = warmup
            || link
                .as_ref()
                .is_some_and(|l| self.sessions.before_measure(l));
        self.handed_out += 1;
        Ok(Some(Planned {
            record,
            seq: self.handed_out - 1,
            endpoint,
            scheduled_ns,
            link,
            warmup,
            expected_cached_tokens: expected.0,
            expected_share: expected.1,
            cache_shape: expected.2,
        }))
    }
}

fn produce(
    shared: &Mutex<SharedReader>,
    builder: &RequestBuilder,
    out: &ToSenders,
    stop: &StopRequest,
) -> Result<Produced> {
    let started = Instant::now();
    let mut done = Produced::default();
    let mut caches = builder.new_caches();
    let lock = || {
        shared
            .lock()
            .map_err(|_| Error::Run("a producer thread panicked".into()))
    };
    while stop.requested_at().is_none() {
        let asked = Instant::now();
        let mut reader = lock()?;
        let got = Instant::now();
        let next = reader.next_planned();
        let released = Instant::now();
        drop(reader);
        done.waited_ns += (got - asked).as_nanos() as u64;
        done.locked_ns += (released - got).as_nanos() as u64;
        let Some(mut p) = next? else {
            break;
        };
        if let Some(dataset) = &builder.dataset {
            dataset
                .fill(&mut p.record)
                .map_err(|message| Error::Trace {
                    file: PathBuf::from("--prompt-dataset"),
                    line: p.record.line,
                    message,
                })?;
        }
        // The session header names the conversation (or the agentic task).
        let session = p.link.as_ref().map(|l| l.root.as_str());
        let session = session.or(p.record.ids.session_id.as_deref());
        let mut request = builder
            .build(
                &p.record,
                p.seq,
                p.endpoint,
                session,
                p.scheduled_ns,
                &mut caches,
            )
            .map_err(|e| Error::Trace {
                file: lock()
                    .map(|s| s.reader.reader().path().to_path_buf())
                    .unwrap_or_default(),
                line: p.record.line,
                message: e.to_string(),
            })?;
        request.warmup = p.warmup;
        request.expected_cached_tokens = p.expected_cached_tokens;
        request.expected_share = p.expected_share;
        request.cache_shape = p.cache_shape.map(Box::new);
        if let Some(pause) = builder.slow_build {
            std::thread::sleep(pause);
        }
        if let Some(link) = p.link {
            request.carry = builder.carry_slot(&request, &p.record).map(Box::new);
            // A spawned sub-agent's plan counts the blocks it shares with its task; the head
            // the server puts before every prompt (a chat template's) is shared too.
            let head = match link.fresh {
                true => builder.frame_head(p.endpoint),
                false => 0,
            };
            let planned_cached_tokens = link
                .planned_prefix
                .zip(p.record.input_length())
                .map(|(prefix, input)| builder.planned_cached(prefix + head, input));
            request.session = Some(Box::new(SessionTurn {
                planned_cached_tokens,
                ..SessionTurn::new(link)
            }));
        }
        log_prompt(builder, &mut request)?;
        if !out.send(request, stop) {
            break; // stopping, or the senders are gone
        }
        done.built += 1;
    }
    done.wall_ns = started.elapsed().as_nanos() as u64;
    Ok(done)
}

/// Logs a request's prompts.jsonl line (`--save-prompts`): a turn the sender will rebuild
/// around its parent's answer has its line written there, as sent.
fn log_prompt(builder: &RequestBuilder, request: &mut PreparedRequest) -> Result<()> {
    let (Some(log), Some((seq, line))) = (&builder.prompt_log, request.prompt_line.take()) else {
        return Ok(());
    };
    match request.carry {
        Some(_) => log.defer(seq),
        None => log.put(seq, line),
    }
    .map_err(|e| Error::Run(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Api, BodyOptions};
    use crate::trace::Input;

    #[test]
    fn channel_budget_holds_producers_until_senders_take() {
        let budget = Arc::new(ChannelBudget::new(1000, 1));
        let stop = Arc::new(StopRequest::default());
        assert!(
            budget.reserve(5000, &stop),
            "an empty channel takes any one request"
        );
        let (b, s) = (Arc::clone(&budget), Arc::clone(&stop));
        let waiter = std::thread::spawn(move || b.reserve(10, &s));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "over the limit: the producer waits");
        budget.release(5000);
        assert!(waiter.join().unwrap(), "room made: the producer goes on");
        assert!(budget.reserve(990, &stop));
        stop.request(1);
        assert!(!budget.reserve(1, &stop), "a stop ends the wait");
        let ended = ChannelBudget::new(10, 1);
        assert!(ended.reserve(10, &StopRequest::default()));
        ended.sender_ended();
        assert!(
            !ended.reserve(1, &StopRequest::default()),
            "no sender left to make room"
        );
    }

    #[test]
    fn buffer_pool_reuses_fitting_buffers_and_never_blocks() {
        let pool = BufferPool::new(1);
        let first = pool.take(100_000);
        let ptr = first.as_ptr();
        pool.give(first);
        pool.give(Vec::with_capacity(10)); // pool full: freed by the giver, no wait
        let again = pool.take(90_000);
        assert_eq!(again.as_ptr(), ptr, "the returned buffer is reused");
        assert!(again.is_empty() && again.capacity() >= 90_000);
        // A buffer far larger than needed is freed rather than kept for a small prompt.
        pool.give(again);
        let small = pool.take(1_000);
        assert!(small.capacity() < 100_000);
    }

    #[test]
    fn request_bytes_carry_exact_content_length() {
        let builder = RequestBuilder::uniform(
            Api::OpenaiCompletions,
            BodyOptions {
                model_json: "\"m\"".into(),
                stream: true,
                exact_output: true,
                extra_body: None,
            },
            None,
            BufferPool::new(0),
        );
        let record = TraceRecord {
            index: 4,
            line: 5,
            timestamp_ms: Some(0.0),
            input: Input::Text {
                text: "hello".into(),
                input_length: Some(1),
            },
            output_length: Some(3),
            ids: TraceIds::default(),
            extra: None,
        };
        let req = builder
            .build(&record, 0, 0, None, 77, &mut builder.new_caches())
            .unwrap();
        let text = std::str::from_utf8(req.payload()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head,
            format!("X-Llmreplay-Index: 4\r\nContent-Length: {}", body.len())
        );
        assert_eq!(
            (
                req.index,
                req.scheduled_ns,
                req.input_tokens,
                req.output_tokens_target
            ),
            (4, 77, Some(1), Some(3))
        );
        serde_json::from_str::<serde_json::Value>(body).unwrap();
        // With an identity, its lines come first and the body is the same.
        let builder = RequestBuilder {
            identity: Some(identity::Identity::new(
                "r1",
                Some("X-Request-Id".into()),
                true,
                Some("X-Session-Affinity".into()),
            )),
            ..builder
        };
        let named = builder
            .build(&record, 0, 0, Some("chat-1"), 77, &mut builder.new_caches())
            .unwrap();
        let text = std::str::from_utf8(named.payload()).unwrap();
        let (head, again) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(again, body);
        let trace = builder.identity.as_ref().unwrap().trace_id(4).unwrap();
        assert!(head.starts_with(&format!("X-Request-Id: r1-4\r\ntraceparent: 00-{trace}-")));
        assert!(head.ends_with(&format!(
            "-01\r\nX-Session-Affinity: chat-1\r\nX-Llmreplay-Index: 4\r\nContent-Length: {}",
            body.len()
        )));
    }
}
