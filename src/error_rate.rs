//! `--max-error-rate`, judged in schedule order.
//!
//! Records reach the collector in completion order, and a failure is often fast (a 503 in a
//! millisecond) where a success is slow (a whole stream): judged as they complete, a run with
//! 21 % failures showed 50 % failed among its first records and was stopped. So a request
//! counts only once every request scheduled before it has been recorded: the judged records
//! are always a prefix of the schedule, and their failure share is the run's.

use std::collections::BTreeMap;

/// Requests judged before the share may stop a run: fewer say too little (at a true share of
/// 20 %, 11 or more failures among the first 20 come about once in 1,700 runs).
pub const MIN_JUDGED: u64 = 20;

pub struct ErrorRateJudge {
    limit: f64,
    /// The next index in schedule order not yet recorded.
    next: u64,
    /// Recorded past the frontier: index -> counts (None: warmup, in no share).
    waiting: BTreeMap<u64, Option<bool>>,
    judged: u64,
    failed: u64,
}

impl ErrorRateJudge {
    /// `first_index`: the index of the first record the schedule sends (records are
    /// numbered in reading order, and the schedule keeps one run of them).
    pub fn new(limit: f64, first_index: u64) -> ErrorRateJudge {
        ErrorRateJudge {
            limit,
            next: first_index,
            waiting: BTreeMap::new(),
            judged: 0,
            failed: 0,
        }
    }

    /// One record; returns why the run must stop, once the share of the judged prefix
    /// exceeds the limit.
    pub fn record(&mut self, index: u64, failed: bool, warmup: bool) -> Option<String> {
        let verdict = (!warmup).then_some(failed);
        if index < self.next {
            // Before the frontier (read out of order): nothing earlier can still be missing.
            self.count(verdict);
        } else {
            self.waiting.insert(index, verdict);
            while let Some(verdict) = self.waiting.remove(&self.next) {
                self.count(verdict);
                self.next += 1;
            }
        }
        (self.judged >= MIN_JUDGED && self.failed as f64 > self.limit * self.judged as f64).then(
            || {
                format!(
                    "stopped early: {} of the first {} requests in schedule order failed, more \
                     than --max-error-rate {}",
                    self.failed, self.judged, self.limit
                )
            },
        )
    }

    fn count(&mut self, verdict: Option<bool>) {
        if let Some(failed) = verdict {
            self.judged += 1;
            self.failed += u64::from(failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_failures_wait_for_the_slower_successes_scheduled_before_them() {
        let mut j = ErrorRateJudge::new(0.5, 10);
        // Requests 10..40: every fifth fails; the failures are recorded first.
        for i in (10..40).filter(|i| i % 5 == 0) {
            assert_eq!(j.record(i, true, false), None, "nothing judged yet");
        }
        for i in (10..40).filter(|i| i % 5 != 0) {
            assert_eq!(j.record(i, false, false), None);
        }
        assert_eq!((j.judged, j.failed), (30, 6));
        // A real failure wave stops it once judged.
        let mut j = ErrorRateJudge::new(0.5, 0);
        let stop = (0..40).find_map(|i| j.record(i, i % 3 != 0, false));
        assert!(stop.unwrap().contains("of the first 20 requests"));
        // Warmup records advance the frontier and count in no share.
        let mut j = ErrorRateJudge::new(0.1, 0);
        assert_eq!(j.record(1, false, false), None);
        assert_eq!(j.record(0, true, true), None);
        assert_eq!((j.judged, j.failed, j.next), (1, 0, 2));
    }
}
