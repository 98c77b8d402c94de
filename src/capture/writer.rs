//! The trace's writer thread: each ended exchange's request is read (its body parsed, its
//! prompt rendered and tokenized, its blocks hashed) off the event loop, and its line written
//! in the order the requests were taken, flushed as it goes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::blocks::BlockHasher;
use super::links::{self, Links};
use super::pair::Ended;
use super::{record, request, CaptureStats};
use crate::error::{Error, Result};
use crate::prompt::PromptCounter;

/// Ended exchanges queued for the writer before the event loop waits for it (the lines of
/// a burst of long prompts take a while to tokenize).
const QUEUE: usize = 4096;

pub struct TraceWriter {
    tx: Sender<Ended>,
    handle: JoinHandle<Result<CaptureStats>>,
}

/// What the writer thread holds.
struct Lines {
    out: BufWriter<File>,
    path: PathBuf,
    counter: PromptCounter,
    hasher: BlockHasher,
    links: Links,
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
        out: File,
        path: PathBuf,
        counter: PromptCounter,
        hasher: BlockHasher,
        session_headers: Vec<String>,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let lines = Lines {
            out: BufWriter::new(out),
            path,
            counter,
            hasher,
            links: Links::default(),
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

impl Lines {
    fn run(mut self, rx: Receiver<Ended>) -> Result<CaptureStats> {
        for e in rx {
            self.waiting.insert(e.record.index, e);
            while let Some(e) = self.waiting.remove(&self.next) {
                self.next += 1;
                self.write(&e)?;
            }
            self.out.flush().map_err(|e| Error::io(&self.path, e))?;
        }
        // A request taken but never ended cannot be: the rest go in order all the same.
        for (_, e) in std::mem::take(&mut self.waiting) {
            self.write(&e)?;
        }
        self.out.flush().map_err(|e| Error::io(&self.path, e))?;
        Ok(self.stats)
    }

    /// An ended exchange's line, if it is one for the trace; counted either way.
    fn write(&mut self, e: &Ended) -> Result<()> {
        let Some((api, route)) = &e.taken.route else {
            self.stats.other += 1;
            return Ok(());
        };
        let seen = request::read(*api, route, e.taken.body(), &self.counter);
        let tokens = match &seen.tokens {
            Ok(tokens) => tokens,
            Err(why) => {
                self.stats.unread += 1;
                self.stats.unread_why.get_or_insert_with(|| why.clone());
                return Ok(());
            }
        };
        self.stats.recorded += 1;
        self.stats.failed += u64::from(!e.record.ok());
        // Time 0 is the first request's arrival; a request whose body took longer to come
        // than the next one's is written at that one's time (lines never go back).
        let arrived = e.taken.arrived_ns;
        let origin = *self.origin.get_or_insert(arrived);
        let ms = arrived.saturating_sub(origin) as f64 / 1e6;
        self.last_ms = ms.max(self.last_ms);
        let parent = seen.thread.as_ref().and_then(|thread| {
            self.links.link(&links::Request {
                thread,
                session: request::header(&e.taken.bytes[..e.taken.body_at], &self.session_headers),
                id: e.record.index,
                arrived_ns: arrived,
                ended_ns: e.record.end_ns.unwrap_or(arrived),
                answer: e.answer.as_deref(),
            })
        });
        let place = record::Place {
            timestamp_ms: self.last_ms,
            parent,
            think_ms: parent.map(|p| arrived.saturating_sub(p.ended_ns) as f64 / 1e6),
        };
        let line = record::line(&seen, tokens, &e.record, &self.hasher, &place);
        writeln!(self.out, "{line}").map_err(|e| Error::io(&self.path, e))
    }
}
