//! The effective schedule: the one place where the trace and every shaping option become the
//! records sent and their send times. The plan line, `--dry-run`, run.json and the producers
//! all run the same [`Shaper`], so what is announced is what is sent.
//!
//! The options apply in this order (the README's table says the same):
//!
//! | step | option | what it does |
//! |---|---|---|
//! | 1 | `--format`, `--skip-invalid` | records are read in timestamp order |
//! | 2 | `--loop N` | N passes, each one span and one mean gap after the one before |
//! | 3 | `--start-offset S` | records before trace time S are skipped; S becomes time 0 |
//! | 4 | `--max-requests N` | the first N records left are kept |
//! | 5 | pace: trace (`--max-idle-gap G`), `--rate`, `--concurrency` | each record's time |
//! | 6 | `--duration D` | records paced after D seconds are not sent |
//! | 7 | `--time-scale F` | times divided by F (a closed loop has none) |
//! | 8 | `--time-in-secs W` | records due after W wall seconds are not sent |
//! | 9 | `--warmup-requests K` | the first K records sent are warmup, in no statistic |
//! | 10 | sessions | a turn also waits for its parent's answer (after-parent mode) |
//!
//! Steps 4, 6 and 8 each keep a prefix of the records (paced times never go back), so they
//! commute; the first that cuts ends the schedule.

use std::collections::VecDeque;

use crate::load::{LoadPlan, Timeline};

/// Every shaping option, as plain values, and the trace facts they need.
#[derive(Clone, Debug)]
pub struct Shaping {
    /// The trace's earliest timestamp (ms): trace time 0.
    pub origin_ms: f64,
    pub load: LoadPlan,
    /// `--loop`: passes, how much later each starts (trace ms), and records in one.
    pub passes: u64,
    pub pass_shift_ms: f64,
    pub per_pass: u64,
    pub max_requests: Option<u64>,
    /// `--duration`, in paced ms (before the time scale).
    pub duration_ms: Option<f64>,
    pub time_scale: f64,
    /// `--time-in-secs`, in wall ns.
    pub wall_limit_ns: Option<u64>,
    pub warmup: u64,
}

/// Why the schedule ends before the trace does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    MaxRequests,
    Duration,
    TimeInSecs,
}

impl Cut {
    pub fn option(self) -> &'static str {
        match self {
            Cut::MaxRequests => "--max-requests",
            Cut::Duration => "--duration",
            Cut::TimeInSecs => "--time-in-secs",
        }
    }
}

/// What becomes of one record read from the trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Slot {
    /// Before `--start-offset`: not sent.
    Skip,
    /// Sent at `scheduled_ns` after the run start.
    Send { scheduled_ns: u64, warmup: bool },
    /// This record and every later one are not sent.
    End(Cut),
}

/// Places records in reading order; the producers and [`Preview::compute`] each run one.
pub struct Shaper {
    shaping: Shaping,
    timeline: Timeline,
    kept: u64,
    ended: Option<Cut>,
}

impl Shaping {
    /// The run time (ns) after which nothing is sent: `--duration` (scaled) or
    /// `--time-in-secs`, whichever comes first. A conversation's released turn past it is
    /// not sent either.
    pub fn bound_ns(&self) -> Option<u64> {
        let duration = self
            .duration_ms
            .map(|d| (d / self.time_scale * 1e6).round() as u64);
        match (duration, self.wall_limit_ns) {
            (Some(d), Some(w)) => Some(d.min(w)),
            (d, w) => d.or(w),
        }
    }

    pub fn shaper(&self) -> Shaper {
        Shaper {
            timeline: Timeline::new(self.load, self.origin_ms),
            shaping: self.clone(),
            kept: 0,
            ended: None,
        }
    }
}

impl Shaper {
    /// The record of pass `pass` with trace timestamp `ts_ms` (ms, as read).
    pub fn place(&mut self, pass: u64, ts_ms: f64) -> Slot {
        if let Some(cut) = self.ended {
            return Slot::End(cut);
        }
        let s = &self.shaping;
        let ts = ts_ms + pass as f64 * s.pass_shift_ms;
        let Some(paced) = self.timeline.place(ts) else {
            return Slot::Skip;
        };
        let paced_ms = (paced - s.origin_ms).max(0.0);
        let scheduled_ns = (paced_ms / s.time_scale * 1e6).round() as u64;
        let cut = if s.max_requests.is_some_and(|m| self.kept >= m) {
            Some(Cut::MaxRequests)
        } else if s.duration_ms.is_some_and(|d| paced_ms > d) {
            Some(Cut::Duration)
        } else if s.wall_limit_ns.is_some_and(|w| scheduled_ns > w) {
            Some(Cut::TimeInSecs)
        } else {
            None
        };
        if let Some(cut) = cut {
            self.ended = Some(cut);
            return Slot::End(cut);
        }
        self.kept += 1;
        Slot::Send {
            scheduled_ns,
            warmup: self.kept <= s.warmup,
        }
    }
}

/// The whole schedule, computed before the start from the trace's timestamps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Preview {
    /// Records sent, warmup included.
    pub records: u64,
    pub warmup: u64,
    /// Records skipped by `--start-offset`.
    pub skipped_by_offset: u64,
    /// Records of the trace (all passes) left unsent by the cut.
    pub cut_records: u64,
    pub cut_by: Option<Cut>,
    /// First and last planned send, ns after the start.
    pub first_ns: u64,
    pub last_ns: u64,
    /// The most planned sends within any one second of wall time.
    pub busiest_second: u64,
    /// Planned sends in the run's first second (their connections open before the start).
    pub first_second: u64,
    /// The first record planned past [`MAX_SCHEDULE_NS`]: (its number in reading order,
    /// counted from 1, and its trace timestamp in ms).
    pub past_bound: Option<(u64, f64)>,
}

/// The latest send a schedule holds: 2^63 ns (292 years), so that every sum of run times
/// stays in a u64.
pub const MAX_SCHEDULE_NS: u64 = 1 << 63;

/// Builds a [`Preview`] from the trace's timestamps fed in reading order, pass after pass,
/// in memory bounded by the busiest second.
pub struct PreviewBuilder {
    shaper: Shaper,
    p: Preview,
    /// Planned sends of the last second.
    window: VecDeque<u64>,
    read: u64,
    total: u64,
}

impl PreviewBuilder {
    pub fn new(shaping: &Shaping) -> PreviewBuilder {
        PreviewBuilder {
            shaper: shaping.shaper(),
            p: Preview::default(),
            window: VecDeque::new(),
            read: 0,
            total: shaping.passes * shaping.per_pass,
        }
    }

    /// The next record's timestamp; false once the schedule has ended (feed no more).
    pub fn add(&mut self, pass: u64, ts_ms: f64) -> bool {
        self.read += 1;
        let p = &mut self.p;
        match self.shaper.place(pass, ts_ms) {
            Slot::Skip => p.skipped_by_offset += 1,
            Slot::End(cut) => {
                p.cut_by = Some(cut);
                p.cut_records = self.total.saturating_sub(self.read) + 1;
                return false;
            }
            Slot::Send {
                scheduled_ns,
                warmup,
            } => {
                if scheduled_ns >= MAX_SCHEDULE_NS && p.past_bound.is_none() {
                    p.past_bound = Some((self.read, ts_ms));
                }
                if p.records == 0 {
                    p.first_ns = scheduled_ns;
                }
                p.records += 1;
                p.warmup += u64::from(warmup);
                p.last_ns = p.last_ns.max(scheduled_ns);
                p.first_second += u64::from(scheduled_ns < 1_000_000_000);
                self.window.push_back(scheduled_ns);
                while self
                    .window
                    .front()
                    .is_some_and(|&f| scheduled_ns - f >= 1_000_000_000)
                {
                    self.window.pop_front();
                }
                p.busiest_second = p.busiest_second.max(self.window.len() as u64);
            }
        }
        true
    }

    pub fn finish(self) -> Preview {
        self.p
    }
}

impl Preview {
    /// Runs the shaper over `timestamps_ms` (the trace's, in reading order) for every pass.
    pub fn compute(shaping: &Shaping, timestamps_ms: &[f64]) -> Preview {
        let mut b = PreviewBuilder::new(shaping);
        'passes: for pass in 0..shaping.passes {
            for &ts in timestamps_ms {
                if !b.add(pass, ts) {
                    break 'passes;
                }
            }
        }
        b.finish()
    }

    /// Wall seconds from the first planned send to the last.
    pub fn span_s(&self) -> f64 {
        self.last_ns.saturating_sub(self.first_ns) as f64 / 1e9
    }

    /// Why the run would send or measure nothing, said before the start.
    /// A plan that runs longer than a day is most likely a unit or scale mistake.
    pub fn warning(&self) -> Option<String> {
        const DAY_NS: u64 = 86_400_000_000_000;
        (self.last_ns > DAY_NS).then(|| {
            format!(
                "the plan's last send is {:.1} days after the start: check --time-scale and \
                 the trace's timestamp unit (--format)",
                self.last_ns as f64 / DAY_NS as f64
            )
        })
    }

    pub fn refusal(&self, shaping: &Shaping, trace_span_ms: f64) -> Option<String> {
        if self.records == 0 {
            let why = if self.skipped_by_offset > 0 && self.cut_by.is_none() {
                format!(
                    "--start-offset {} s skips every record: the trace spans {:.1} s",
                    shaping.load.start_offset_ms / 1000.0,
                    trace_span_ms / 1000.0
                )
            } else if let Some(cut) = self.cut_by {
                format!("{} leaves no record to send", cut.option())
            } else {
                "the trace has no records".into()
            };
            return Some(format!("nothing would be sent: {why}"));
        }
        if let Some((n, ts)) = self.past_bound {
            let years = ts / shaping.time_scale / 3.156e10;
            const BOUND: &str = "a schedule holds at most 2^63 ns (292 years)";
            // At a --rate the paced time is the rate's, not the record's timestamp.
            if let crate::load::Pace::Rate { per_s, .. } = shaping.load.pace {
                return Some(format!(
                    "record {n} would be sent more than 292 years after the start at --rate \
                     {per_s:e} and --time-scale {}: {BOUND}; raise --rate, or send fewer \
                     records (--max-requests)",
                    shaping.time_scale
                ));
            }
            return Some(format!(
                "record {n} of the trace (timestamp {ts:e} ms) would be sent {years:.0e} years \
                 after the start at --time-scale {}: {BOUND}; fix its timestamp, or raise \
                 --time-scale",
                shaping.time_scale
            ));
        }
        if self.warmup >= self.records {
            return Some(format!(
                "--warmup-requests {} leaves nothing to measure: the schedule sends {} records \
                 (lower it, or send more)",
                shaping.warmup, self.records
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Arrival, Pace};

    fn shaping(n: u64) -> Shaping {
        Shaping {
            origin_ms: 1000.0,
            load: LoadPlan::default(),
            passes: 1,
            pass_shift_ms: 0.0,
            per_pass: n,
            max_requests: None,
            duration_ms: None,
            time_scale: 1.0,
            wall_limit_ns: None,
            warmup: 0,
        }
    }

    /// 10 records 100 ms apart, from 1000 ms.
    fn ts() -> Vec<f64> {
        (0..10).map(|i| 1000.0 + 100.0 * f64::from(i)).collect()
    }

    #[test]
    fn the_offset_applies_before_max_requests() {
        let mut s = shaping(10);
        s.load.start_offset_ms = 550.0;
        s.max_requests = Some(3);
        let p = Preview::compute(&s, &ts());
        assert_eq!((p.records, p.skipped_by_offset), (3, 6));
        assert_eq!((p.first_ns, p.last_ns), (50_000_000, 250_000_000));
        assert_eq!((p.cut_by, p.cut_records), (Some(Cut::MaxRequests), 1));
    }

    #[test]
    fn cuts_scale_and_warmup() {
        let mut s = shaping(10);
        s.time_scale = 2.0;
        s.duration_ms = Some(500.0);
        s.warmup = 2;
        let p = Preview::compute(&s, &ts());
        assert_eq!((p.records, p.warmup, p.last_ns), (6, 2, 250_000_000));
        assert_eq!(p.cut_by, Some(Cut::Duration));
        // --time-in-secs counts wall time: 0.2 s at 2x is 400 ms of trace.
        let mut s = shaping(10);
        s.time_scale = 2.0;
        s.wall_limit_ns = Some(200_000_000);
        assert_eq!(Preview::compute(&s, &ts()).records, 5);
        assert_eq!(Preview::compute(&s, &ts()).busiest_second, 5);
    }

    #[test]
    fn idle_gaps_are_capped_and_the_busiest_second_is_exact() {
        let mut s = shaping(4);
        s.load.max_idle_gap_ms = Some(10.0);
        let t = [0.0, 5000.0, 10_000.0, 60_000.0];
        s.origin_ms = 0.0;
        let p = Preview::compute(&s, &t);
        assert_eq!(p.last_ns, 30_000_000);
        assert_eq!(p.busiest_second, 4, "a 60 s trace squeezed into 30 ms");
    }

    #[test]
    fn loops_rates_and_refusals() {
        let mut s = shaping(10);
        s.passes = 3;
        s.pass_shift_ms = 1000.0;
        let p = Preview::compute(&s, &ts());
        assert_eq!((p.records, p.last_ns), (30, 2_900_000_000));
        s.load.pace = Pace::Rate {
            per_s: 10.0,
            arrival: Arrival::Constant,
            burstiness: 1.0,
        };
        let p = Preview::compute(&s, &ts());
        assert_eq!(
            (p.records, p.last_ns, p.busiest_second),
            (30, 2_900_000_000, 10)
        );

        let mut s = shaping(10);
        s.load.start_offset_ms = 5000.0;
        let p = Preview::compute(&s, &ts());
        let why = p.refusal(&s, 900.0).unwrap();
        assert!(
            why.contains("--start-offset 5 s skips every record"),
            "{why}"
        );
        let mut s = shaping(10);
        s.warmup = 10;
        let why = Preview::compute(&s, &ts()).refusal(&s, 900.0).unwrap();
        assert!(why.contains("--warmup-requests 10 leaves nothing"), "{why}");
    }
}
