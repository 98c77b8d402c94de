//! Polls each server's `/metrics` during a run, one thread per target on the producers'
//! cores (never a sender's), and writes one line per scrape to `server_metrics.jsonl`,
//! flushed as it is written. A target that fails is recorded and tried again next time,
//! never fatal.

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
use crate::clock::RunClock;
use crate::http::probe;
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

/// The running scrape threads.
pub struct Scraper {
    stop: Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

/// The run's clock, as the records count it.
#[derive(Clone)]
pub struct RunTime {
    pub clock: RunClock,
    pub t0_ns: u64,
}

impl RunTime {
    fn seconds(&self) -> f64 {
        (self.clock.now_ns() as f64 - self.t0_ns as f64) / 1e9
    }
}

impl Scraper {
    /// Starts one thread per target; each scrapes at once (the baseline), then every interval.
    pub fn start(config: ScrapeConfig, time: RunTime, dir: &Path) -> std::io::Result<Scraper> {
        let file = File::create(dir.join(METRICS_FILE))?;
        let raw_dir = dir.join(RAW_DIR);
        std::fs::create_dir_all(&raw_dir)?;
        let out = Arc::new(Mutex::new(BufWriter::new(file)));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let config = Arc::new(config);
        let threads = (0..config.targets.len())
            .map(|i| {
                let job = Job {
                    index: i,
                    config: Arc::clone(&config),
                    time: time.clone(),
                    out: Arc::clone(&out),
                    raw_dir: raw_dir.clone(),
                };
                let stopped = stopped.clone();
                std::thread::Builder::new()
                    .name(format!("scrape-{i}"))
                    .spawn(move || job.run(&stopped))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Scraper { stop, threads })
    }

    /// Takes a last scrape of every target and waits for the threads.
    pub fn finish(self) {
        drop(self.stop);
        for t in self.threads {
            t.join().ok();
        }
    }
}

struct Job {
    index: usize,
    config: Arc<ScrapeConfig>,
    time: RunTime,
    out: Arc<Mutex<BufWriter<File>>>,
    raw_dir: PathBuf,
}

impl Job {
    fn run(self, stopped: &Receiver<()>) {
        let target = &self.config.targets[self.index];
        let timeout = self
            .config
            .interval
            .clamp(Duration::from_millis(200), Duration::from_secs(5));
        let mut last_raw: Option<String> = None;
        let mut first = true;
        let mut ending = false;
        // Scrapes keep to the interval's grid, whatever each one took.
        let mut next = Instant::now();
        loop {
            let t_s = self.time.seconds();
            let line = match self.scrape(target, timeout) {
                Ok(text) => {
                    let line = match families::select(&text, &self.config.extra) {
                        Ok(sel) => {
                            if first {
                                self.warn_missing(&sel);
                            }
                            json!({"t_s": t_s, "target": target.url,
                                   "server": sel.server, "metrics": sel.values})
                        }
                        Err(e) => json!({"t_s": t_s, "target": target.url, "error": e}),
                    };
                    if first {
                        self.save_raw("first", &text);
                        first = false;
                    }
                    last_raw = Some(text);
                    line
                }
                Err(e) => json!({"t_s": t_s, "target": target.url, "error": e}),
            };
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
        }
        if let Some(text) = last_raw {
            self.save_raw("last", &text);
        }
    }

    /// One scrape's body; an error names what failed (a status, a timeout, a refused connect).
    fn scrape(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String, String> {
        let (status, body) = probe::get(
            target.addr,
            target.tls.as_ref(),
            &target.host,
            &target.path,
            probe::Accept::Text,
            &target.headers,
            timeout,
        )?;
        if status != 200 {
            return Err(format!("HTTP status {status}"));
        }
        String::from_utf8(body).map_err(|_| "the exposition is not UTF-8".to_string())
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
