//! Load modes: when each record leaves, between the trace and the schedule.
//!
//! - `trace` (the default): the trace's own timestamps, optionally with long silences capped
//!   (`--max-idle-gap`) and the first part skipped (`--start-offset`).
//! - `rate`: records in trace order at `--rate R` per second, with constant, Poisson or gamma
//!   (`--burstiness K`, as in `vllm bench serve`: shape K, 1 is Poisson) gaps from `--seed`.
//! - `closed`: `--concurrency C` requests in flight, timestamps ignored: every record is due
//!   at the start and the senders hold back all but C (see [`crate::sender`]); each record's
//!   wait for a free slot is its `queue_ms`.
//!
//! The producers call [`Timeline::place`] in trace order under their reader lock, so a seed
//! gives the same arrivals on every run whatever the thread count.

use crate::rng::SplitMix64;

crate::choices! {
    /// How the gaps of `--rate` are drawn.
    #[derive(Default)]
    pub enum Arrival {
        /// Every gap 1/R.
        Constant = "constant",
        /// Exponential gaps of mean 1/R.
        #[default]
        Poisson = "poisson",
        /// Gamma gaps of mean 1/R and shape `--burstiness` (below 1 burstier than Poisson).
        Gamma = "gamma",
    }
}

crate::choices! {
    /// What a sweep grows from step to step (`sweep --over`).
    #[derive(Default)]
    pub enum SweepAxis {
        /// The --time-scale: the trace's timing (or a --rate) replayed faster.
        #[default]
        Scale = "scale",
        /// The --max-active-sessions: conversations or agent tasks run at once, each
        /// closed-loop (AgentPerf's concurrent users); a step of a task trace passes on its good
        /// tasks.
        Sessions = "sessions",
    }
}

impl SweepAxis {
    /// The option each step sets.
    pub fn option(self) -> &'static str {
        match self {
            SweepAxis::Scale => "--time-scale",
            SweepAxis::Sessions => "--max-active-sessions",
        }
    }
}

/// What paces the records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    Trace,
    Rate {
        per_s: f64,
        arrival: Arrival,
        burstiness: f64,
    },
    Closed {
        concurrency: usize,
    },
}

impl Pace {
    /// The mode and its parameters, as run.json's `load` says them.
    pub fn json(&self) -> serde_json::Value {
        use serde_json::json;
        match *self {
            Pace::Trace => json!({"mode": "trace"}),
            Pace::Rate {
                per_s,
                arrival,
                burstiness,
            } => {
                json!({"mode": "rate", "rate": per_s, "arrival": arrival, "burstiness": burstiness})
            }
            Pace::Closed { concurrency } => json!({"mode": "closed", "concurrency": concurrency}),
        }
    }

    /// The requests of the run's opening moments, which get connections before the start:
    /// those of the schedule's `first_second`, or a closed loop's slots.
    pub fn opening_requests(&self, first_second: usize) -> usize {
        match *self {
            Pace::Trace | Pace::Rate { .. } => first_second,
            Pace::Closed { concurrency } => concurrency,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadPlan {
    pub pace: Pace,
    pub seed: u64,
    /// Gaps between consecutive trace records are cut to this (trace ms).
    pub max_idle_gap_ms: Option<f64>,
    /// Records before this trace time are skipped; the rest start at once (trace ms).
    pub start_offset_ms: f64,
}

impl Default for LoadPlan {
    fn default() -> Self {
        LoadPlan {
            pace: Pace::Trace,
            seed: 0,
            max_idle_gap_ms: None,
            start_offset_ms: 0.0,
        }
    }
}

impl LoadPlan {
    /// The in-flight cap of each of `senders` sender threads in a closed loop (they share
    /// C as evenly as they can).
    pub fn per_sender_concurrency(&self, senders: usize, id: usize) -> Option<usize> {
        let Pace::Closed { concurrency } = self.pace else {
            return None;
        };
        let n = senders.max(1);
        Some(concurrency / n + usize::from(id < concurrency % n))
    }
}

/// Places records on the schedule's clock.
pub struct Timeline {
    plan: LoadPlan,
    origin_ms: f64,
    rng: SplitMix64,
    /// The previous record: its trace time and its placed time (ms after the origin).
    last: Option<(f64, f64)>,
}

impl Timeline {
    pub fn new(plan: LoadPlan, origin_ms: f64) -> Timeline {
        Timeline {
            plan,
            origin_ms,
            rng: SplitMix64(plan.seed ^ 0x0005_eed1_a7e0_fa77),
            last: None,
        }
    }

    /// The timestamp (trace ms) a record with trace timestamp `ts_ms` is planned at, or None
    /// to skip it (before `--start-offset`).
    pub fn place(&mut self, ts_ms: f64) -> Option<f64> {
        let t = ts_ms - self.origin_ms - self.plan.start_offset_ms;
        if t < 0.0 {
            return None;
        }
        let at = match (self.plan.pace, self.last) {
            (Pace::Closed { .. }, _) => 0.0,
            (Pace::Rate { .. }, None) => 0.0,
            (
                Pace::Rate {
                    per_s,
                    arrival,
                    burstiness,
                },
                Some((_, prev)),
            ) => prev + self.gap_ms(per_s, arrival, burstiness),
            (Pace::Trace, None) => t.min(self.plan.max_idle_gap_ms.unwrap_or(t)),
            (Pace::Trace, Some((prev_t, prev))) => {
                let gap = (t - prev_t).max(0.0);
                prev + self.plan.max_idle_gap_ms.map_or(gap, |cap| gap.min(cap))
            }
        };
        self.last = Some((t, at));
        Some(self.origin_ms + at)
    }

    fn gap_ms(&mut self, per_s: f64, arrival: Arrival, burstiness: f64) -> f64 {
        let mean = 1000.0 / per_s;
        match arrival {
            Arrival::Constant => mean,
            Arrival::Poisson => -self.rng.open01().ln() * mean,
            Arrival::Gamma => self.rng.gamma(burstiness) * mean / burstiness,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(plan: LoadPlan, n: usize) -> Vec<f64> {
        let mut t = Timeline::new(plan, 1000.0);
        let at: Vec<f64> = (0..=n)
            .map(|i| t.place(1000.0 + i as f64).unwrap())
            .collect();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn mean_var(x: &[f64]) -> (f64, f64) {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        (
            m,
            x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64,
        )
    }

    fn rate(arrival: Arrival, burstiness: f64, seed: u64) -> LoadPlan {
        LoadPlan {
            pace: Pace::Rate {
                per_s: 50.0,
                arrival,
                burstiness,
            },
            seed,
            ..LoadPlan::default()
        }
    }

    /// 50 req/s: gaps of mean 20 ms; Poisson's variance is the mean squared (400), gamma's
    /// mean² / shape; the same seed gives the same arrivals.
    #[test]
    fn arrivals_have_the_mean_and_variance_of_their_law() {
        let n = 200_000;
        let (m, v) = mean_var(&gaps(rate(Arrival::Poisson, 1.0, 7), n));
        assert!((m - 20.0).abs() < 0.2, "mean {m}");
        assert!((v - 400.0).abs() < 12.0, "variance {v}");
        let (m, v) = mean_var(&gaps(rate(Arrival::Gamma, 0.5, 7), n));
        assert!((m - 20.0).abs() < 0.3, "mean {m}");
        assert!((v - 800.0).abs() < 40.0, "variance {v}");
        let (m, v) = mean_var(&gaps(rate(Arrival::Gamma, 4.0, 7), n));
        assert!((m - 20.0).abs() < 0.2 && (v - 100.0).abs() < 4.0, "{m} {v}");
        let (m, v) = mean_var(&gaps(rate(Arrival::Constant, 1.0, 7), 100));
        assert!((m - 20.0).abs() < 1e-9 && v < 1e-9);
        assert_eq!(
            gaps(rate(Arrival::Poisson, 1.0, 7), 50),
            gaps(rate(Arrival::Poisson, 1.0, 7), 50)
        );
        assert_ne!(
            gaps(rate(Arrival::Poisson, 1.0, 7), 50),
            gaps(rate(Arrival::Poisson, 1.0, 8), 50)
        );
    }

    #[test]
    fn trace_gaps_are_capped_and_the_start_skipped() {
        let plan = LoadPlan {
            max_idle_gap_ms: Some(100.0),
            start_offset_ms: 50.0,
            ..LoadPlan::default()
        };
        let mut t = Timeline::new(plan, 0.0);
        assert_eq!(t.place(10.0), None, "before the offset");
        assert_eq!(t.place(60.0), Some(10.0), "trace time from the offset on");
        assert_eq!(t.place(90.0), Some(40.0));
        assert_eq!(
            t.place(10_090.0),
            Some(140.0),
            "a 10 s silence becomes 100 ms"
        );
        let closed = LoadPlan {
            pace: Pace::Closed { concurrency: 10 },
            ..LoadPlan::default()
        };
        let mut t = Timeline::new(closed, 5.0);
        assert_eq!((t.place(5.0), t.place(900.0)), (Some(5.0), Some(5.0)));
        let split: Vec<_> = (0..3)
            .map(|i| closed.per_sender_concurrency(3, i).unwrap())
            .collect();
        assert_eq!(split, [4, 3, 3]);
    }
}
