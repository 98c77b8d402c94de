//! Live progress of a replay on stderr: redrawn in place on a terminal, a plain line every
//! few seconds otherwise (logs, CI), nothing with `--quiet`.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::record::RequestRecord;
use crate::stats::{histogram_pairs as pairs, latency_histogram};

/// How often the line is redrawn on a terminal, and printed when stderr is a file or pipe.
const TERMINAL_EVERY: Duration = Duration::from_millis(500);
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Counters of completed requests, and the window since the last line.
pub struct LiveProgress {
    enabled: bool,
    terminal: bool,
    /// Run time at which the last record is scheduled, in seconds (trace span / time scale).
    schedule_s: f64,
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
    /// Late arrivals at the last line: more since say the producers are behind.
    last_arrived_late: u64,
    /// Requests the schedule plans (0: not known), and whether turns wait for parents.
    planned: u64,
    conversations: bool,
    /// What the summary will judge, so far (measured records only): sends later than
    /// [`crate::stats::LATE_SEND_MS`], and the drift and TTFT distributions (ns), for the
    /// shards' heartbeats and `watch`.
    late_sends: u64,
    drift_ns: Histogram<u64>,
    ttft_ns: Histogram<u64>,
}

/// What a heartbeat carries of the run's figures so far ([`LiveProgress::figures`]).
pub struct Figures {
    pub late_sends: u64,
    /// `[value_ns, count]` pairs of the drift and TTFT histograms.
    pub drift_ns: Vec<[u64; 2]>,
    pub ttft_ns: Vec<[u64; 2]>,
}

/// What the senders report as they go (read at each redraw).
#[derive(Default)]
pub struct Snapshot {
    pub sent: u64,
    /// Requests that reached their sender after their send time, so far.
    pub arrived_late: u64,
    /// The client ran out of file descriptors.
    pub out_of_descriptors: bool,
    /// Seconds since the run's time zero (negative before the first deadline).
    pub run_s: f64,
}

impl LiveProgress {
    /// `schedule_s`: wall seconds from the start to the last planned send.
    pub fn new(schedule_s: f64, enabled: bool) -> Self {
        LiveProgress {
            enabled,
            terminal: std::io::stderr().is_terminal(),
            schedule_s,
            done: 0,
            done_sent: 0,
            failed: 0,
            output_tokens: 0,
            window_drift_ms: Vec::new(),
            last: Instant::now(),
            last_done: 0,
            last_tokens: 0,
            printed: false,
            last_arrived_late: 0,
            planned: 0,
            conversations: false,
            late_sends: 0,
            drift_ns: latency_histogram(),
            ttft_ns: latency_histogram(),
        }
    }

    /// The schedule's planned requests, so that past its end the line tells requests still
    /// unsent (the client behind, or turns waiting for their parents) from a drain.
    pub fn planning(mut self, planned: u64, conversations: bool) -> Self {
        self.planned = planned;
        self.conversations = conversations;
        self
    }

    /// Requests ended, of them failed, and output tokens, so far (the shards' heartbeats).
    pub fn totals(&self) -> (u64, u64, u64) {
        (self.done, self.failed, self.output_tokens)
    }

    /// The figures so far, for a heartbeat.
    pub fn figures(&self) -> Figures {
        Figures {
            late_sends: self.late_sends,
            drift_ns: pairs(&self.drift_ns),
            ttft_ns: pairs(&self.ttft_ns),
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        if !r.warmup {
            // As the summary counts them: drift of every record, TTFT of the successful.
            if let Some(d) = r.drift_ms() {
                self.late_sends += u64::from(d > crate::stats::LATE_SEND_MS);
                let _ = self.drift_ns.record(((d * 1e6) as u64).max(1));
            }
            if let Some(t) = r.ttft_ms().filter(|_| r.ok()) {
                let _ = self.ttft_ns.record(((t * 1e6) as u64).max(1));
            }
        }
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
            match self.window_drift_ms[i] {
                d if d < 10.0 => format!("{d:.2}ms"),
                d => format!("{d:.0}ms"),
            }
        };
        // Why the client is behind, where it knows: requests reached their senders late in
        // this window, or it ran out of descriptors.
        let cause = match (
            s.arrived_late > self.last_arrived_late,
            s.out_of_descriptors,
        ) {
            (_, true) => " (fd limit)",
            (true, false) => " (producers)",
            _ => "",
        };
        self.last_arrived_late = s.arrived_late;
        // Requests neither sent nor failed unsent.
        let unsent = self
            .planned
            .saturating_sub(s.sent + (self.done - self.done_sent));
        let eta = if run_s < self.schedule_s {
            format!("ETA {}{cause}", clock(self.schedule_s - run_s))
        } else if unsent > 0 && self.conversations {
            format!("{} turns wait", short(unsent as f64))
        } else if unsent > 0 {
            // Past the last planned send with requests unsent: the client is behind.
            format!(
                "behind {}{cause}, {} unsent",
                clock(run_s - self.schedule_s),
                short(unsent as f64)
            )
        } else {
            format!("drain {}", short(in_flight as f64))
        };
        // Fits 80 columns: counts past 10,000 are shortened (12.0M, 323k); the ETA says how
        // much of the schedule is left.
        format!(
            "{} sent {} fly {} err {} {}r/s {}tok/s p99 {drift} {eta}",
            clock(run_s),
            short(s.sent as f64),
            short(in_flight as f64),
            short(self.failed as f64),
            short((self.done - self.last_done) as f64 / window_s),
            short((self.output_tokens - self.last_tokens) as f64 / window_s),
        )
    }
}

/// A count in at most 5 characters: 9999, 12.3k, 323k, 1.23M, 12.0M.
fn short(x: f64) -> String {
    match x {
        x if x < 10_000.0 => format!("{x:.0}"),
        x if x < 100_000.0 => format!("{:.1}k", x / 1e3),
        x if x < 1e6 => format!("{:.0}k", x / 1e3),
        x if x < 1e7 => format!("{:.2}M", x / 1e6),
        x => format!("{:.1}M", x / 1e6),
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
        let mut p = LiveProgress::new(10.0, true);
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
                ..Snapshot::default()
            },
            1.0,
        );
        assert_eq!(
            line,
            "0:03 sent 4 fly 2 err 0 2r/s 10tok/s p99 3.00ms ETA 0:07"
        );
        // A large run still fits 80 columns.
        let mut big = LiveProgress::new(40_000.0, false);
        big.done = 1_234_000;
        big.done_sent = 1_234_000;
        big.failed = 12_345;
        big.output_tokens = 9_876_543_210;
        big.last_done = big.done - 1000;
        big.last_tokens = big.output_tokens - 323_360;
        big.window_drift_ms = vec![12.34];
        let line = big.line(
            &Snapshot {
                sent: 1_234_567,
                run_s: 3725.0,
                ..Snapshot::default()
            },
            1.0,
        );
        assert!(line.len() <= 80, "{} columns: {line}", line.len());

        // Past the schedule's end with 89 of 100 unsent: behind, not draining; with
        // conversations, turns waiting for their parents.
        let behind = |conversations| {
            let mut p = LiveProgress::new(1.6, true).planning(100, conversations);
            p.line(
                &Snapshot {
                    sent: 11,
                    run_s: 31.6,
                    ..Snapshot::default()
                },
                1.0,
            )
        };
        assert!(
            behind(false).ends_with("behind 0:30, 89 unsent"),
            "{}",
            behind(false)
        );
        assert!(behind(true).ends_with("89 turns wait"), "{}", behind(true));
        // The cause, where the senders know it: late arrivals in this window, descriptors.
        let mut p = LiveProgress::new(1.6, true).planning(100, false);
        let at = |late, fds| Snapshot {
            sent: 11,
            run_s: 31.6,
            arrived_late: late,
            out_of_descriptors: fds,
        };
        let line = p.line(&at(5, false), 1.0);
        assert!(
            line.ends_with("behind 0:30 (producers), 89 unsent"),
            "{line}"
        );
        let line = p.line(&at(5, false), 1.0);
        assert!(
            line.ends_with("behind 0:30, 89 unsent"),
            "none late since: {line}"
        );
        let line = p.line(&at(5, true), 1.0);
        assert!(
            line.ends_with("behind 0:30 (fd limit), 89 unsent"),
            "{line}"
        );
        let mut done = LiveProgress::new(1.6, true).planning(2, false);
        done.done_sent = 1;
        done.done = 1;
        let line = done.line(
            &Snapshot {
                sent: 2,
                run_s: 5.0,
                ..Snapshot::default()
            },
            1.0,
        );
        assert!(line.ends_with("drain 1"), "{line}");
        assert_eq!(short(12_031_000.0), "12.0M");
        assert_eq!(short(323_360.0), "323k");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
