//! Polls each server's `/metrics` during a run, one thread per target over one connection
//! kept from before the load, and writes one line per scrape to `server_metrics.jsonl`,
//! flushed as it is written. The first line of each target is its baseline (`"baseline":
//! true`), taken before the run's load connections open, at a negative `t_s`. A target that
//! fails is recorded and tried again next time, never fatal.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::json;

use super::families;
use crate::http::blocking::{Accept, KeptConnection};
use crate::sys::clock::RunClock;
use crate::transport::TlsTarget;

/// The per-scrape lines.
pub const METRICS_FILE: &str = "server_metrics.jsonl";
/// The first and last whole exposition of each target.
pub const RAW_DIR: &str = "server_metrics_raw";

/// One `/metrics` URL, resolved.
#[derive(Clone)]
pub struct ScrapeTarget {
    pub url: String,
    pub addr: SocketAddr,
    pub tls: Option<TlsTarget>,
    pub host: String,
    pub path: String,
    /// Header lines sent with each scrape: the endpoints' (an API key among them, never
    /// written anywhere) for a target on an endpoint's host and port, else none.
    pub headers: String,
}

/// What to scrape and how often.
pub struct ScrapeConfig {
    pub targets: Vec<ScrapeTarget>,
    pub interval: Duration,
    /// `--metric` series kept beside the common names.
    pub extra: Vec<String>,
}

/// The scrape threads, each with its target's connection.
pub struct Scraper {
    begin: Sender<u64>,
    stop: Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

impl Scraper {
    /// Starts one thread per target, each of which opens its connection and takes the
    /// baseline scrape at once; returns when every baseline is in (or failed). Called before
    /// any load connection is opened: a server whose HTTP workers each hold one connection
    /// would otherwise queue the scrapes behind the load, and a connection kept from here
    /// keeps its worker for the run.
    pub fn start(config: ScrapeConfig, clock: RunClock, dir: &Path) -> std::io::Result<Scraper> {
        let file = File::create(dir.join(METRICS_FILE))?;
        let raw_dir = dir.join(RAW_DIR);
        std::fs::create_dir_all(&raw_dir)?;
        let out = Arc::new(Mutex::new(BufWriter::new(file)));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let (begin, begun) = crossbeam_channel::unbounded::<u64>();
        let (ready_tx, ready) = crossbeam_channel::unbounded::<()>();
        let config = Arc::new(config);
        let threads = (0..config.targets.len())
            .map(|i| {
                let job = Job {
                    index: i,
                    config: Arc::clone(&config),
                    clock: clock.clone(),
                    out: Arc::clone(&out),
                    raw_dir: raw_dir.clone(),
                };
                let (stopped, begun, ready_tx) = (stopped.clone(), begun.clone(), ready_tx.clone());
                std::thread::Builder::new()
                    .name(format!("scrape-{i}"))
                    .spawn(move || job.run(&ready_tx, &begun, &stopped))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        for _ in &threads {
            ready.recv().ok(); // each thread says so once, its baseline taken
        }
        Ok(Scraper {
            begin,
            stop,
            threads,
        })
    }

    /// The run's clock starts at `t0_ns`: the baselines are written and the scrapes go on
    /// every interval.
    pub fn begin(&self, t0_ns: u64) {
        for _ in &self.threads {
            self.begin.send(t0_ns).ok();
        }
    }

    /// Takes a last scrape of every target and waits for the threads (a scraper dropped
    /// before [`Scraper::begin`] writes nothing more).
    pub fn finish(self) {
        let Scraper {
            begin,
            stop,
            threads,
        } = self;
        drop((begin, stop));
        for t in threads {
            t.join().ok();
        }
    }
}

struct Job {
    index: usize,
    config: Arc<ScrapeConfig>,
    clock: RunClock,
    out: Arc<Mutex<BufWriter<File>>>,
    raw_dir: PathBuf,
}

/// One scrape, parsed or not.
struct Scraped {
    at_ns: u64,
    result: Result<String, String>,
}

impl Job {
    fn run(self, ready: &Sender<()>, begun: &Receiver<u64>, stopped: &Receiver<()>) {
        let target = &self.config.targets[self.index];
        // Generous beside the interval: a scrape that times out loses the kept connection,
        // and a new one may queue behind the load; a slow scrape only skips grid points.
        let timeout = self
            .config
            .interval
            .clamp(Duration::from_secs(2), Duration::from_secs(10));
        let mut conn = KeptConnection::new(target.addr, target.tls.clone(), timeout);
        let baseline = self.scrape(&mut conn);
        ready.send(()).ok();
        let Ok(t0_ns) = begun.recv() else {
            return; // the run did not start
        };
        let mut last_raw: Option<String> = None;
        let mut first = true;
        let mut scraped = baseline;
        let mut ending = false;
        // Scrapes keep to the interval's grid, whatever each one took.
        let mut next = Instant::now();
        loop {
            let t_s = (scraped.at_ns as f64 - t0_ns as f64) / 1e9;
            let mut line = match scraped.result {
                Ok(text) => {
                    let line = match families::select(&text, &self.config.extra) {
                        Ok(sel) => {
                            if first {
                                self.warn_missing(&sel);
                            }
                            let mut line = json!({"t_s": t_s, "target": target.url,
                                   "server": sel.server, "metrics": sel.values});
                            if !sel.counters.is_empty() {
                                line["counters"] = json!(sel.counters);
                            }
                            line
                        }
                        Err(e) => json!({"t_s": t_s, "target": target.url, "error": e}),
                    };
                    if first {
                        self.save_raw("first", &text);
                    }
                    last_raw = Some(text);
                    line
                }
                Err(e) => json!({"t_s": t_s, "target": target.url, "error": e}),
            };
            if first {
                line["baseline"] = json!(true);
                if let Some(e) = line["error"].as_str() {
                    eprintln!(
                        "warning: {}: the baseline scrape failed ({e}); its counters' increases \
                         will start at its first answered scrape and miss what came before",
                        target.url
                    );
                }
                first = false;
            }
            if let Ok(mut out) = self.out.lock() {
                writeln!(out, "{line}").and_then(|()| out.flush()).ok();
            }
            if ending {
                break;
            }
            let now = Instant::now();
            while next <= now {
                next += self.config.interval;
            }
            // The run ended: one more scrape, the last.
            ending = !matches!(stopped.recv_deadline(next), Err(RecvTimeoutError::Timeout));
            scraped = self.scrape(&mut conn);
        }
        if let Some(text) = last_raw {
            self.save_raw("last", &text);
        }
    }

    /// One scrape's body, over the kept connection; an error names what failed (a status, a
    /// timeout, a refused or closed connection).
    fn scrape(&self, conn: &mut KeptConnection) -> Scraped {
        let target = &self.config.targets[self.index];
        let at_ns = self.clock.now_ns();
        let result =
            conn.get(&target.host, &target.path, Accept::Text, &target.headers)
                .map_err(|e| e.to_string())
                .and_then(|(status, body)| match status {
                    200 => String::from_utf8(body)
                        .map_err(|_| "the exposition is not UTF-8".to_string()),
                    _ => Err(format!("HTTP status {status}")),
                });
        Scraped { at_ns, result }
    }

    /// A `--metric` series this target does not have would be missing without a word: said
    /// once, at its first scrape.
    fn warn_missing(&self, sel: &families::Selected) {
        let url = &self.config.targets[self.index].url;
        for name in self
            .config
            .extra
            .iter()
            .filter(|n| !sel.values.contains_key(*n))
        {
            eprintln!("warning: {url} has no series {name} (--metric)");
        }
    }

    fn save_raw(&self, which: &str, text: &str) {
        let path = self
            .raw_dir
            .join(format!("target-{}-{which}.txt", self.index));
        let head = format!("# {}\n", self.config.targets[self.index].url);
        std::fs::write(path, head + text).ok();
    }
}
