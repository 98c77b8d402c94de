//! Whether the mock keeps the timing it was given. Each answer's last event has a planned
//! time (arrival, `--ttft-ms`, prefill, `--itl-ms` per chunk); when the mock writes it later
//! than that, by more than one inter-token gap (at least [`MIN_LATE_NS`]), the answer is
//! late, and a client measures the mock's lateness as TPOT and E2EL. The mock then says so on
//! stderr (every [`REPORT_EVERY_NS`] at most, naming the likely cause) and counts it in its
//! stats, which `replay --mock` reports at the end of the run. The odd late answer (at most
//! [`QUIET_SHARE`] of them) is a preemption, not a mock out of time, and goes unreported.

/// Lateness below this is the timer's and the scheduler's, not a mock out of time.
const MIN_LATE_NS: u64 = 2_000_000;
/// Late answers up to this share are the odd preemption, not a mock out of time: not reported.
const QUIET_SHARE: f64 = 0.01;
/// At most one report on stderr per this long.
const REPORT_EVERY_NS: u64 = 10_000_000_000;

/// Answers timed against their planned end, and those that missed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Answers whose end was timed (injected faults are not).
    pub answers: u64,
    /// Those that ended late.
    pub late: u64,
    /// The latest end, past its planned time.
    pub worst_ns: u64,
    /// Counts at the last report, and when it was.
    reported: (u64, u64),
    reported_ns: Option<u64>,
}

impl Lateness {
    /// One answer ended `late_ns` after its planned time; `itl_ns` is the configured gap.
    pub fn observe(&mut self, late_ns: u64, itl_ns: u64) {
        self.answers += 1;
        if late_ns > itl_ns.max(MIN_LATE_NS) {
            self.late += 1;
            self.worst_ns = self.worst_ns.max(late_ns);
        }
    }

    /// A report of the answers since the last one, when some were late and the last report
    /// is old enough (the first comes at once); `counting` says the tokenizer counts prompts on this machine.
    pub fn report(&mut self, now_ns: u64, counting: bool) -> Option<String> {
        let (late, answers) = (self.late - self.reported.1, self.answers - self.reported.0);
        let recent = self
            .reported_ns
            .is_some_and(|at| now_ns.saturating_sub(at) < REPORT_EVERY_NS);
        if !worth_saying(late, answers) || recent {
            return None;
        }
        self.reported = (self.answers, self.late);
        self.reported_ns = Some(now_ns);
        Some(self.describe(late, answers, counting))
    }

    /// All answers so far, for the end of a run: None when at most the odd one was late.
    pub fn summary(&self, counting: bool) -> Option<String> {
        worth_saying(self.late, self.answers)
            .then(|| self.describe(self.late, self.answers, counting))
    }

    fn describe(&self, late: u64, answers: u64, counting: bool) -> String {
        let cause = match counting {
            true => {
                "counting prompts with --tokenizer takes this machine's cores (give it more \
                 cores, fewer --count-threads, or no --tokenizer)"
            }
            false => "the machine is too busy for the load",
        };
        format!(
            "mock: {late} of {answers} answers ended later than their configured time by more \
             than one inter-token gap (worst {:.1} ms): {cause}; TPOT and E2EL measured \
             against this mock include its lateness, not only its configured TTFT and ITL",
            self.worst_ns as f64 / 1e6
        )
    }
}

/// More than [`QUIET_SHARE`] of the answers were late.
fn worth_saying(late: u64, answers: u64) -> bool {
    late > 0 && late as f64 > answers as f64 * QUIET_SHARE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_answers_are_counted_and_reported_at_most_every_ten_seconds() {
        let mut l = Lateness::default();
        l.observe(1_000_000, 5_000_000); // within one gap
        l.observe(6_000_000, 5_000_000);
        l.observe(1_500_000, 0); // below the floor
        l.observe(3_000_000, 0);
        assert_eq!((l.answers, l.late, l.worst_ns), (4, 2, 6_000_000));
        let first = l.report(7, true).expect("late answers, reported at once");
        assert!(
            first.contains("2 of 4 answers") && first.contains("--tokenizer"),
            "{first}"
        );
        assert!(first.contains("worst 6.0 ms"), "{first}");
        l.observe(9_000_000, 0);
        assert_eq!(l.report(REPORT_EVERY_NS, true), None, "too soon");
        let next = l.report(REPORT_EVERY_NS + 7, false).expect("one more");
        assert!(
            next.contains("1 of 1 answers") && next.contains("too busy"),
            "{next}"
        );
        assert_eq!(l.report(4 * REPORT_EVERY_NS, false), None, "nothing new");
        assert!(l.summary(false).unwrap().contains("3 of 5 answers"));
        assert_eq!(Lateness::default().summary(true), None);
        // One late answer in a thousand is the odd preemption.
        let mut odd = Lateness::default();
        (0..999).for_each(|_| odd.observe(0, 0));
        odd.observe(50_000_000, 0);
        assert_eq!((odd.report(0, false), odd.summary(false)), (None, None));
    }
}
