//! `llmreplay watch DIR...`: the combined live progress of the shards that meet in each
//! `--rendezvous` directory, from their heartbeats (`live/<i>`): how many are preparing,
//! waiting at the barrier, running or ended; sent, in flight, the verdict's late sends,
//! failed; send drift p99 and TTFT p50/p99 of the whole run (the shards' histograms added,
//! as merge's summary computes them from the records); output tokens per second; and which
//! shard is lost. It reads files only, so it runs anywhere the directory is mounted, and
//! ends when every shard has ended.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::error::{Error, Result};
use crate::rendezvous::{self, Beat, State};
use crate::sys::wall_start::unix_ns_now;

pub use crate::plan::hosts::WatchPlan;

/// One look at the heartbeats of every directory.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub shards: u32,
    /// Shards with a heartbeat, by state (one gone silent before it ended is lost).
    pub preparing: u32,
    /// Ready, waiting for the others at the barrier.
    pub at_barrier: u32,
    pub running: u32,
    pub ended: u32,
    pub lost: u32,
    pub sent: u64,
    pub in_flight: u64,
    /// The verdict's late sends: measured records sent more than 1 ms late.
    pub late_sends: u64,
    pub failed: u64,
    pub output_tokens: u64,
    /// The run's send drift and successful TTFT (ns), every shard's added.
    pub drift_ns: Histogram<u64>,
    pub ttft_ns: Histogram<u64>,
    /// `shard 1/3 (dir): why` for each shard lost, failed or stopped.
    pub trouble: Vec<String>,
}

impl Default for View {
    fn default() -> Self {
        View {
            shards: 0,
            preparing: 0,
            at_barrier: 0,
            running: 0,
            ended: 0,
            lost: 0,
            sent: 0,
            in_flight: 0,
            late_sends: 0,
            failed: 0,
            output_tokens: 0,
            drift_ns: crate::stats::latency_histogram(),
            ttft_ns: crate::stats::latency_histogram(),
            trouble: Vec::new(),
        }
    }
}

impl View {
    /// Reads every directory's heartbeats now.
    pub fn look(dirs: &[PathBuf], heartbeat_timeout: Duration) -> Result<View> {
        let mut v = View::default();
        let now = unix_ns_now();
        for dir in dirs {
            let count = rendezvous::count_in(dir)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{}: no heartbeats (live/<i>) here: give the directory the shards were \
                         given as --rendezvous",
                        dir.display()
                    ))
                })?
                .map_err(Error::Usage)?;
            v.shards += count;
            for (i, beat) in rendezvous::beats(dir, count).into_iter().enumerate() {
                let Some(b) = beat else {
                    v.trouble.push(format!(
                        "shard {i}/{count} ({}): no heartbeat yet",
                        dir.display()
                    ));
                    continue;
                };
                let why = rendezvous::lost_because(&b, now, heartbeat_timeout);
                v.add(&b, why.is_some());
                if let Some(why) = why {
                    v.trouble
                        .push(format!("shard {i}/{count} ({}): {why}", dir.display()));
                }
            }
        }
        Ok(v)
    }

    fn add(&mut self, b: &Beat, lost: bool) {
        match b.state {
            Some(State::Done | State::Failed | State::Stopped) => self.ended += 1,
            _ if lost => self.lost += 1,
            Some(State::Ready) => self.at_barrier += 1,
            Some(State::Preparing) | None => self.preparing += 1,
            Some(State::Running) => self.running += 1,
        }
        self.sent += b.sent;
        self.in_flight += b.in_flight();
        self.late_sends += b.late_sends;
        self.failed += b.failed;
        self.output_tokens += b.output_tokens;
        crate::stats::add_pairs(&mut self.drift_ns, &b.drift_ns);
        crate::stats::add_pairs(&mut self.ttft_ns, &b.ttft_ns);
    }

    /// The run's `p`th percentile of `h` in ms, as the summary would print it from the
    /// records (to the histogram's 0.1 %), or `n/a (N samples)` where it would print none.
    fn percentile(h: &Histogram<u64>, p: f64) -> String {
        match crate::stats::histogram_percentile_ms(h, p) {
            Some(ms) => format!("{ms:.3} ms"),
            None => format!("n/a ({} samples)", h.len()),
        }
    }

    /// Every shard has ended, or is lost.
    pub fn all_ended(&self) -> bool {
        self.shards > 0 && self.ended + self.lost == self.shards
    }

    /// One line (and a line per shard in trouble); `tok_per_s` from the previous look.
    pub fn line(&self, tok_per_s: Option<f64>) -> String {
        let mut s = format!("shards {}/{} running", self.running, self.shards);
        if self.preparing > 0 {
            let _ = write!(s, ", {} preparing", self.preparing);
        }
        if self.at_barrier > 0 {
            let _ = write!(s, ", {} at the barrier", self.at_barrier);
        }
        let _ = write!(
            s,
            ", {} ended, {} lost | sent {} fly {} late {} err {}",
            self.ended, self.lost, self.sent, self.in_flight, self.late_sends, self.failed
        );
        let _ = write!(
            s,
            " | drift p99 {} | TTFT p50 {}, p99 {}",
            Self::percentile(&self.drift_ns, 99.0),
            Self::percentile(&self.ttft_ns, 50.0),
            Self::percentile(&self.ttft_ns, 99.0),
        );
        if let Some(t) = tok_per_s {
            let _ = write!(s, " | {t:.0} tok/s");
        }
        for t in &self.trouble {
            let _ = write!(s, "\n  {}", crate::printable::printable(t));
        }
        s
    }
}

/// Prints the combined view every `every` until every shard has ended (or once); returns the
/// last view.
pub fn run(plan: &WatchPlan, mut print: impl FnMut(&str)) -> Result<View> {
    let mut last: Option<(View, std::time::Instant)> = None;
    loop {
        let view = View::look(&plan.dirs, plan.heartbeat_timeout)?;
        let rate = last.as_ref().map(|(before, at)| {
            view.output_tokens.saturating_sub(before.output_tokens) as f64
                / at.elapsed().as_secs_f64().max(1e-3)
        });
        print(&view.line(rate));
        if plan.once || view.all_ended() {
            return Ok(view);
        }
        last = Some((view, std::time::Instant::now()));
        std::thread::sleep(plan.every);
    }
}
