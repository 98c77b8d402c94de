//! How a trace's requests are spread over time, in bounded memory: counts per bucket of
//! trace time, 100 ms wide to start with; when a trace is longer than the buckets allow, pairs
//! are merged and the width doubles. Enough to say a run's busiest second before it starts.

/// Buckets kept at most (8 MiB of counts): 100 ms buckets cover 29 hours.
const MAX_BUCKETS: usize = 1 << 21;
const FIRST_WIDTH_MS: f64 = 100.0;

#[derive(Clone, Debug)]
pub struct Arrivals {
    width_ms: f64,
    counts: Vec<u32>,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            width_ms: FIRST_WIDTH_MS,
            counts: Vec::new(),
        }
    }
}

impl Arrivals {
    /// A request `t_ms` after the trace's first one.
    pub fn add(&mut self, t_ms: f64) {
        let mut i = (t_ms.max(0.0) / self.width_ms) as usize;
        while i >= MAX_BUCKETS {
            self.counts = self
                .counts
                .chunks(2)
                .map(|pair| pair.iter().sum())
                .collect();
            self.width_ms *= 2.0;
            i = (t_ms.max(0.0) / self.width_ms) as usize;
        }
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] = self.counts[i].saturating_add(1);
    }

    /// The most requests in any window of `window_ms` of trace time (windows aligned to the
    /// buckets, so a bucket's width of error either way).
    pub fn peak(&self, window_ms: f64) -> u64 {
        let n = ((window_ms / self.width_ms).round() as usize).max(1);
        let mut sum: u64 = 0;
        let mut best = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            sum += u64::from(c);
            if i >= n {
                sum -= u64::from(self.counts[i - n]);
            }
            best = best.max(sum);
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_over_windows_and_merges_past_the_bound() {
        let mut a = Arrivals::default();
        for i in 0..100 {
            a.add(f64::from(i) * 10.0); // 100 requests in the first second
        }
        for i in 0..20 {
            a.add(5000.0 + f64::from(i) * 100.0); // 20 over two seconds later on
        }
        assert_eq!(a.peak(1000.0), 100);
        assert_eq!(a.peak(100.0), 10);
        assert_eq!(a.peak(10_000_000.0), 120);
        // Far beyond the buckets' reach: widths double, counts are kept.
        a.add(FIRST_WIDTH_MS * MAX_BUCKETS as f64 * 3.0);
        assert!(a.width_ms >= 400.0 && a.counts.len() <= MAX_BUCKETS);
        assert_eq!(a.peak(1e12), 121);
    }
}
