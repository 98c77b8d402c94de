//! One measured quantity's statistics, as numpy computes them (population std,
//! linear-interpolation percentiles), or from an HDR histogram.
//!
//! A percentile is only as good as the samples beyond it: with 120 samples, "p99" is the
//! largest one or two, not a distribution's tail. So each distribution knows how many samples
//! a percentile needs beyond it ([`Percentiles::tail_samples`], the verdict's `tail-samples`
//! bound) and [`Distribution::percentile`] gives only those that hold; every writer shows the
//! others as "n/a (N samples)" ([`Distribution::cell`]) and summary.json as null, listed in
//! `too_few_samples`. The value is still computed ([`Distribution::raw_percentile`]) for the
//! checks that read a tail as a bound (the verdict's drift p99, the calibration).

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::DEFAULT_PERCENTILES;

/// Which percentiles every distribution of a run reports, and how many samples a percentile
/// needs beyond it to be shown.
#[derive(Clone, Debug, PartialEq)]
pub struct Percentiles {
    /// [`DEFAULT_PERCENTILES`] and `--percentiles`, ascending, once each.
    pub list: Vec<f64>,
    /// Samples needed beyond a percentile (above it) for it to hold: the verdict's
    /// `tail-samples` bound.
    pub tail_samples: f64,
}

impl Default for Percentiles {
    fn default() -> Self {
        Percentiles::new(&[], super::verdict::TAIL_SAMPLES_DEFAULT)
    }
}

impl Percentiles {
    /// The default percentiles with `extra`, each held with `tail_samples` beyond it.
    pub fn new(extra: &[f64], tail_samples: f64) -> Percentiles {
        let mut list: Vec<f64> = DEFAULT_PERCENTILES.iter().chain(extra).copied().collect();
        list.sort_by(f64::total_cmp);
        list.dedup();
        Percentiles { list, tail_samples }
    }

    /// Whether `count` samples hold percentile `p`: at least `tail_samples` lie beyond it
    /// (p50 needs 10 at the default 5, p90 50, p99 500, p99.9 5000).
    pub fn holds(&self, p: f64, count: u64) -> bool {
        held(p, count, self.tail_samples)
    }

    /// The fewest samples that hold `p`.
    pub fn samples_needed(&self, p: f64) -> u64 {
        let beyond = 1.0 - p / 100.0;
        match beyond > 0.0 {
            true => (self.tail_samples / beyond - 1e-9).ceil().max(1.0) as u64,
            false => u64::MAX,
        }
    }
}

/// Whether `count` samples leave `tail_samples` beyond percentile `p`.
fn held(p: f64, count: u64, tail_samples: f64) -> bool {
    count as f64 * (1.0 - p / 100.0) >= tail_samples - 1e-9
}

#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub count: u64,
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// (percentile, value), ascending: every one computed, held or not.
    pub percentiles: Vec<(f64, f64)>,
    /// Samples a percentile needs beyond it to be shown ([`Percentiles::tail_samples`]).
    pub tail_samples: f64,
}

impl Distribution {
    /// `p50 / p99`, for the summary table.
    pub fn p50_p99(&self) -> String {
        format!("{} / {}", self.cell(50.0, 1), self.cell(99.0, 1))
    }

    /// Percentile `p` with `decimals`, or "n/a (N samples)" where too few samples hold it.
    pub fn cell(&self, p: f64, decimals: usize) -> String {
        match (self.percentile(p), self.raw_percentile(p)) {
            (Some(v), _) => format!("{v:.decimals$}"),
            (None, Some(_)) => self.not_held(),
            (None, None) => "-".into(),
        }
    }

    /// What a percentile too few samples hold shows instead of its value.
    pub fn not_held(&self) -> String {
        format!("n/a ({} samples)", self.count)
    }

    /// Exact statistics of `samples` (sorted in place), as numpy computes them.
    pub fn of(samples: &mut [f64], percentiles: &Percentiles) -> Option<Distribution> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let at = |p: f64| interpolated(p, samples.len() as u64, |k| samples[k as usize]);
        Some(Distribution {
            count: samples.len() as u64,
            mean,
            median: at(50.0),
            std: var.sqrt(),
            min: samples[0],
            max: samples[samples.len() - 1],
            percentiles: percentiles.list.iter().map(|&p| (p, at(p))).collect(),
            tail_samples: percentiles.tail_samples,
        })
    }

    /// Statistics of a histogram of nanoseconds, in milliseconds (3 significant digits).
    pub fn of_histogram_ns(h: &Histogram<u64>, percentiles: &Percentiles) -> Option<Distribution> {
        if h.is_empty() {
            return None;
        }
        let ms = |v: f64| v / 1e6;
        let q = |p: f64| ms(h.value_at_quantile(p / 100.0) as f64);
        Some(Distribution {
            count: h.len(),
            mean: ms(h.mean()),
            median: q(50.0),
            std: ms(h.stdev()),
            min: ms(h.min() as f64),
            max: ms(h.max() as f64),
            percentiles: percentiles.list.iter().map(|&p| (p, q(p))).collect(),
            tail_samples: percentiles.tail_samples,
        })
    }

    /// Percentile `p` where enough samples lie beyond it; None where too few do (or it was
    /// not computed).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.raw_percentile(p).filter(|_| self.holds(p))
    }

    /// Whether enough samples lie beyond percentile `p` for it to be shown.
    pub fn holds(&self, p: f64) -> bool {
        held(p, self.count, self.tail_samples)
    }

    /// Percentile `p` as computed, however few samples lie beyond it: for checks that read
    /// a tail as a bound, never for a figure shown as a percentile.
    pub fn raw_percentile(&self, p: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, v)| *v)
    }

    /// The percentiles too few samples hold (`p99`, ...).
    pub fn not_held_keys(&self) -> Vec<String> {
        self.percentiles
            .iter()
            .filter(|(p, _)| !self.holds(*p))
            .map(|(p, _)| percentile_key(*p))
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            ("mean", self.mean),
            ("median", self.median),
            ("std", self.std),
            ("min", self.min),
            ("max", self.max),
        ] {
            m.insert(k.into(), json!(v));
        }
        for &(p, _) in &self.percentiles {
            m.insert(percentile_key(p), json!(self.percentile(p)));
        }
        m.insert("count".into(), json!(self.count));
        let thin = self.not_held_keys();
        if !thin.is_empty() {
            m.insert("too_few_samples".into(), json!(thin));
        }
        Value::Object(m)
    }
}

/// `p99`, `p99.9`.
pub fn percentile_key(p: f64) -> String {
    format!("p{}", format_number(p))
}

pub fn format_number(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("{}", p as u64)
    } else {
        format!("{p}")
    }
}

/// Percentile `p` of `n` sorted samples, `value(k)` the `k`th (from 0): interpolated between
/// the two around its rank, as numpy computes it.
fn interpolated(p: f64, n: u64, value: impl Fn(u64) -> f64) -> f64 {
    let rank = p / 100.0 * (n - 1) as f64;
    let (lo, hi) = (value(rank.floor() as u64), value(rank.ceil() as u64));
    lo + (hi - lo) * rank.fract()
}

/// Percentile `p` of a histogram of nanoseconds, in milliseconds, interpolated as
/// [`Distribution::of`] computes it from the samples themselves (each to the histogram's
/// precision); None where too few samples lie beyond it to show one.
pub fn histogram_percentile_ms(h: &Histogram<u64>, p: f64) -> Option<f64> {
    if h.is_empty() || !held(p, h.len(), Percentiles::default().tail_samples) {
        return None;
    }
    let value = |k: u64| {
        let mut seen = 0;
        h.iter_recorded()
            .find(|v| {
                seen += v.count_at_value();
                seen > k
            })
            .map_or(0.0, |v| v.value_iterated_to() as f64 / 1e6)
    };
    Some(interpolated(p, h.len(), value))
}

/// A histogram as `[value, count]` pairs (itl.json, the shards' heartbeats), and back.
pub fn histogram_pairs(h: &Histogram<u64>) -> Vec<[u64; 2]> {
    h.iter_recorded()
        .map(|v| [v.value_iterated_to(), v.count_at_value()])
        .collect()
}

/// Adds `[value, count]` pairs into `h` (values out of its range are clamped into it).
pub fn add_pairs(h: &mut Histogram<u64>, pairs: &[[u64; 2]]) {
    for [value, count] in pairs {
        h.saturating_record_n(*value, *count);
    }
}

/// A new histogram for nanosecond latencies up to an hour.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}
