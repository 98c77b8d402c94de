//! Live progress of a replay on stderr: redrawn in place on a terminal, a plain line every
//! few seconds otherwise (logs, CI), nothing with `--quiet`.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::record::RequestRecord;

/// How often the line is redrawn on a terminal, and printed when stderr is a file or pipe.
const TERMINAL_EVERY: Duration = Duration::from_millis(500);
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Counters of completed requests, and the window since the last line.
pub struct LiveProgress {
    enabled: bool,
    terminal: bool,
    total: u64,
    /// Run time at which the last record is scheduled, in seconds (trace span / time scale).
    schedule_s: f64,
    time_scale: f64,
    done: u64,
    /// Records of requests that were sent (the others never were in flight).
    done_sent: u64,
    failed: u64,
    output_tokens: u64,
    window_drift_ms: Vec<f64>,
    last: Instant,
    last_done: u64,
    last_tokens: u64,
    printed: bool,
}

/// What the senders report as they go (read at each redraw).
pub struct Snapshot {
    pub sent: u64,
    /// Seconds since the run's time zero (negative before the first deadline).
    pub run_s: f64,
}

impl LiveProgress {
    pub fn new(total: u64, span_s: f64, time_scale: f64, enabled: bool) -> Self {
        LiveProgress {
            enabled,
            terminal: std::io::stderr().is_terminal(),
            total,
            schedule_s: span_s / time_scale,
            time_scale,
            done: 0,
            done_sent: 0,
            failed: 0,
            output_tokens: 0,
            window_drift_ms: Vec::new(),
            last: Instant::now(),
            last_done: 0,
            last_tokens: 0,
            printed: false,
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        self.done += 1;
        // In flight: sent and not yet recorded (a request that failed unsent never was).
        self.done_sent += u64::from(r.sent_ns.is_some());
        if r.ok() {
            self.output_tokens += r.output_tokens.unwrap_or(0);
        } else {
            self.failed += 1;
        }
        if self.enabled {
            if let Some(d) = r.drift_ms() {
                self.window_drift_ms.push(d);
            }
        }
    }

    /// Prints the line if it is time to.
    pub fn tick(&mut self, snapshot: Snapshot) {
        let every = if self.terminal {
            TERMINAL_EVERY
        } else {
            PLAIN_EVERY
        };
        let elapsed = self.last.elapsed();
        if !self.enabled || elapsed < every {
            return;
        }
        let line = self.line(&snapshot, elapsed.as_secs_f64());
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.printed = true;
        self.last = Instant::now();
        self.last_done = self.done;
        self.last_tokens = self.output_tokens;
        self.window_drift_ms.clear();
    }

    /// Ends the redrawn line so that what follows starts on its own.
    pub fn finish(&self) {
        if self.enabled && self.terminal && self.printed {
            eprintln!();
        }
    }

    fn line(&mut self, s: &Snapshot, window_s: f64) -> String {
        let run_s = s.run_s.max(0.0);
        let in_flight = s.sent.saturating_sub(self.done_sent);
        let drift = if self.window_drift_ms.is_empty() {
            "-".to_string()
        } else {
            self.window_drift_ms.sort_by(f64::total_cmp);
            let i = ((self.window_drift_ms.len() - 1) as f64 * 0.99).round() as usize;
            format!("{:.3} ms", self.window_drift_ms[i])
        };
        let eta = if run_s < self.schedule_s {
            format!("ETA {}", clock(self.schedule_s - run_s))
        } else {
            format!("draining {in_flight}")
        };
        format!(
            "[{} | trace {}] sent {}/{} done {} in-flight {} failed {} | {:.1} req/s {:.0} tok/s | drift p99 {drift} | {eta}",
            clock(run_s),
            clock(run_s.min(self.schedule_s) * self.time_scale),
            s.sent,
            self.total,
            self.done,
            in_flight,
            self.failed,
            (self.done - self.last_done) as f64 / window_s,
            (self.output_tokens - self.last_tokens) as f64 / window_s,
        )
    }
}

/// `h:mm:ss` or `m:ss`.
fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_position_counts_rates_drift_and_eta() {
        let mut p = LiveProgress::new(10, 100.0, 10.0, true);
        for (i, drift_ns) in [(0, 100_000u64), (1, 3_000_000)] {
            p.add(&RequestRecord {
                index: i,
                status: Some(200),
                scheduled_ns: 0,
                sent_ns: Some(drift_ns),
                output_tokens: Some(5),
                ..RequestRecord::default()
            });
        }
        let line = p.line(
            &Snapshot {
                sent: 4,
                run_s: 3.0,
            },
            1.0,
        );
        assert_eq!(
            line,
            "[0:03 | trace 0:30] sent 4/10 done 2 in-flight 2 failed 0 | 2.0 req/s 10 tok/s | drift p99 3.000 ms | ETA 0:07"
        );
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
