//! `llmreplay watch DIR...`: the combined live progress of the shards that meet in each
//! `--rendezvous` directory, from their heartbeats (`live/<i>`): sent, in flight, late,
//! failed, output tokens per second, and which shard is lost. It reads files only, so it runs
//! anywhere the directory is mounted, and ends when every shard has ended.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::rendezvous::{self, Beat, State};
use crate::sys::wall_start::unix_ns_now;

pub use crate::plan::hosts::WatchPlan;

/// One look at the heartbeats of every directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    pub shards: u32,
    /// Shards with a heartbeat, by state (a running one gone silent is lost).
    pub running: u32,
    pub ended: u32,
    pub lost: u32,
    pub sent: u64,
    pub in_flight: u64,
    pub late: u64,
    pub failed: u64,
    pub output_tokens: u64,
    /// `shard 1/3 (dir): why` for each shard lost, failed or stopped.
    pub trouble: Vec<String>,
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
            _ => self.running += 1,
        }
        self.sent += b.sent;
        self.in_flight += b.in_flight();
        self.late += b.late;
        self.failed += b.failed;
        self.output_tokens += b.output_tokens;
    }

    /// Every shard has ended, or is lost.
    pub fn all_ended(&self) -> bool {
        self.shards > 0 && self.ended + self.lost == self.shards
    }

    /// One line (and a line per shard in trouble); `tok_per_s` from the previous look.
    pub fn line(&self, tok_per_s: Option<f64>) -> String {
        let mut s = format!(
            "shards {}/{} running, {} ended, {} lost | sent {} fly {} late {} err {}",
            self.running,
            self.shards,
            self.ended,
            self.lost,
            self.sent,
            self.in_flight,
            self.late,
            self.failed
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
