//! The trace's writer thread: each ended exchange's request is read (its body parsed, its
//! prompt rendered and tokenized, its blocks hashed) off the event loop, and its line written
//! in the order the requests were taken, flushed as it goes.

use std::collections::BTreeMap;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::blocks::BlockHasher;
use super::links::{self, Links};
use super::pair::Ended;
use super::parts::Parts;
use super::request::Openings;
use super::{record, request, CaptureStats};
use crate::error::{Error, Result};
use crate::prompt::PromptCounter;
use crate::rng::SplitMix64;

/// Ended exchanges queued for the writer before the event loop waits for it (the lines of
/// a burst of long prompts take a while to tokenize).
const QUEUE: usize = 4096;

pub struct TraceWriter {
    tx: Sender<Ended>,
    handle: JoinHandle<Result<CaptureStats>>,
}

/// What the writer thread holds.
struct Lines {
    out: Parts,
    counter: PromptCounter,
    openings: Openings,
    hasher: BlockHasher,
    links: Links,
    sample: Sample,
    /// Headers naming a request's session.
    session_headers: Vec<String>,
    /// Ended exchanges waiting for the ones taken before them (by index).
    waiting: BTreeMap<u64, Ended>,
    next: u64,
    /// The first request's arrival: the trace's time 0.
    origin: Option<u64>,
    /// The last timestamp written, in ms.
    last_ms: f64,
    stats: CaptureStats,
}

impl TraceWriter {
    pub fn start(
        out: Parts,
        counter: PromptCounter,
        openings: Openings,
        hasher: BlockHasher,
        session_headers: Vec<String>,
        sample: f64,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let lines = Lines {
            out,
            counter,
            openings,
            hasher,
            links: Links::default(),
            sample: Sample::new(sample),
            session_headers,
            waiting: BTreeMap::new(),
            next: 0,
            origin: None,
            last_ms: 0.0,
            stats: CaptureStats::default(),
        };
        let handle = std::thread::Builder::new()
            .name("capture-writer".into())
            .spawn(move || lines.run(rx))
            .expect("a thread for the trace writer");
        TraceWriter { tx, handle }
    }

    /// Queues an ended exchange; false when the writer has stopped (a write failed).
    pub fn send(&self, e: Ended) -> bool {
        self.tx.send(e).is_ok()
    }

    /// Writes what is queued and ends: what went through.
    pub fn finish(self) -> Result<CaptureStats> {
        drop(self.tx);
        self.handle
            .join()
            .unwrap_or_else(|_| Err(Error::Run("capture: the trace writer panicked".into())))
    }
}

/// `--sample F`: which conversations are written, drawn at random by their first turn.
struct Sample {
    fraction: f64,
    salt: u64,
}

impl Sample {
    fn new(fraction: f64) -> Sample {
        use std::hash::{BuildHasher, Hasher};
        let salt = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Sample { fraction, salt }
    }

    fn keeps(&self, root: u64) -> bool {
        self.fraction >= 1.0 || SplitMix64::new(self.salt, 0, root).open01() < self.fraction
    }
}

impl Lines {
    fn run(mut self, rx: Receiver<Ended>) -> Result<CaptureStats> {
        for e in rx {
            self.waiting.insert(e.record.index, e);
            while let Some(e) = self.waiting.remove(&self.next) {
                self.next += 1;
                self.write(&e)?;
            }
            self.out.flush()?;
        }
        // A request taken but never ended cannot be: the rest go in order all the same.
        for (_, e) in std::mem::take(&mut self.waiting) {
            self.write(&e)?;
        }
        self.out.flush()?;
        let (last, parts) = self.out.current();
        self.stats.parts = parts;
        self.stats.last_part = last.to_path_buf();
        Ok(self.stats)
    }

    /// An ended exchange's line, if it is one for the trace; counted either way.
    fn write(&mut self, e: &Ended) -> Result<()> {
        let Some((api, route)) = &e.taken.route else {
            self.stats.other += 1;
            return Ok(());
        };
        let body = e.taken.body();
        let seen = request::read(*api, route, &body, &self.counter);
        let tokens = match &seen.tokens {
            Ok(tokens) => tokens,
            Err(why) => {
                self.stats.unread += 1;
                self.stats.unread_why.get_or_insert_with(|| why.clone());
                return Ok(());
            }
        };
        let arrived = e.taken.arrived_ns;
        let linked = seen.thread.as_ref().map(|thread| {
            let head = &e.taken.bytes[..e.taken.body_at];
            self.links.link(&links::Request {
                thread,
                session: request::header(head, &self.session_headers),
                id: e.record.index,
                arrived_ns: arrived,
                ended_ns: e.record.end_ns.unwrap_or(arrived),
                answer: e.answer.as_deref(),
            })
        });
        let parent = linked.and_then(|(parent, _)| parent);
        // `--sample`: a conversation is kept or left out whole, by its first turn.
        let root = linked.map_or(e.record.index, |(_, me)| me.root);
        if !self.sample.keeps(root) {
            self.stats.sampled_out += 1;
            return Ok(());
        }
        self.stats.recorded += 1;
        self.stats.failed += u64::from(!e.record.ok());
        // Time 0 is the first line's arrival; a request whose body took longer to come than
        // the next one's is written at that one's time (lines never go back).
        let origin = *self.origin.get_or_insert(arrived);
        let ms = arrived.saturating_sub(origin) as f64 / 1e6;
        self.last_ms = ms.max(self.last_ms);
        let place = record::Place {
            timestamp_ms: self.last_ms,
            parent,
            turn: linked.map_or(1, |(_, me)| me.turn),
            think_ms: parent.map(|p| arrived.saturating_sub(p.ended_ns) as f64 / 1e6),
        };
        let opening = self.openings.opening(seen.wrapping);
        let line = record::line(&seen, tokens, &e.record, &self.hasher, opening, &place);
        self.out.write(&line.to_string(), self.last_ms)
    }
}
