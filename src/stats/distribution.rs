//! One measured quantity's statistics, as numpy computes them (population std,
//! linear-interpolation percentiles), or from an HDR histogram.

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::DEFAULT_PERCENTILES;

#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub count: u64,
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// (percentile, value), ascending.
    pub percentiles: Vec<(f64, f64)>,
}

pub(super) fn percentile_list(extra: &[f64]) -> Vec<f64> {
    let mut ps: Vec<f64> = DEFAULT_PERCENTILES.iter().chain(extra).copied().collect();
    ps.sort_by(f64::total_cmp);
    ps.dedup();
    ps
}

impl Distribution {
    /// Exact statistics of `samples` (sorted in place), as numpy computes them.
    /// `p50 / p99`, for the summary table.
    pub fn p50_p99(&self) -> String {
        let p = |q| self.percentile(q).map_or("-".into(), |v| format!("{v:.1}"));
        format!("{} / {}", p(50.0), p(99.0))
    }

    pub fn of(samples: &mut [f64], extra_percentiles: &[f64]) -> Option<Distribution> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let at = |p: f64| {
            let rank = p / 100.0 * (n - 1.0);
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            samples[lo] + (samples[hi] - samples[lo]) * (rank - lo as f64)
        };
        Some(Distribution {
            count: samples.len() as u64,
            mean,
            median: at(50.0),
            std: var.sqrt(),
            min: samples[0],
            max: samples[samples.len() - 1],
            percentiles: percentile_list(extra_percentiles)
                .into_iter()
                .map(|p| (p, at(p)))
                .collect(),
        })
    }

    /// Statistics of a histogram of nanoseconds, in milliseconds (3 significant digits).
    pub fn of_histogram_ns(h: &Histogram<u64>, extra_percentiles: &[f64]) -> Option<Distribution> {
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
            percentiles: percentile_list(extra_percentiles)
                .into_iter()
                .map(|p| (p, q(p)))
                .collect(),
        })
    }

    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, v)| *v)
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
        for (p, v) in &self.percentiles {
            m.insert(percentile_key(*p), json!(v));
        }
        m.insert("count".into(), json!(self.count));
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

/// A new histogram for nanosecond latencies up to an hour.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}
