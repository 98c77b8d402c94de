//! What the report's plots are drawn from, gathered in one pass over the records: compact
//! per-request values and per-second series of the run.

use std::collections::BTreeMap;

use crate::record::RequestRecord;
use crate::stats::{add_output_tokens, spread_over_seconds};

/// Per-second series of a run (index = second after the run start).
#[derive(Debug, Default)]
pub struct PerSecond {
    /// Requests planned to be sent in each second.
    pub scheduled: Vec<f64>,
    /// Requests actually sent.
    pub sent: Vec<f64>,
    /// Successful completions.
    pub completed: Vec<f64>,
    pub output_tokens: Vec<f64>,
    /// Failures by error kind, by the second they ended (or were due).
    pub errors: BTreeMap<String, Vec<f64>>,
}

impl PerSecond {
    /// The seconds the run covers: the longest of its series.
    pub fn seconds(&self) -> usize {
        [
            &self.scheduled,
            &self.sent,
            &self.completed,
            &self.output_tokens,
        ]
        .into_iter()
        .chain(self.errors.values())
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(1)
    }
}

/// Plot data of a run. Values are `f32`: enough for plots, and small for long runs.
#[derive(Debug, Default)]
pub struct RunData {
    /// (sent time s, ms) of successful requests.
    pub ttft: Vec<(f32, f32)>,
    pub e2el: Vec<(f32, f32)>,
    pub tpot: Vec<f32>,
    pub drift: Vec<f32>,
    /// (target input tokens, server prompt tokens) where the server reported usage.
    pub lengths: Vec<(u32, u32)>,
    pub per_second: PerSecond,
    /// Each endpoint's own latencies and completions, by URL.
    pub by_endpoint: BTreeMap<String, EndpointData>,
}

/// What one endpoint's successful requests took, and when they completed.
#[derive(Debug, Default)]
pub struct EndpointData {
    pub ttft: Vec<f32>,
    pub e2el: Vec<f32>,
    /// Successful completions per second of the run.
    pub completed: Vec<f64>,
}

fn bump(series: &mut Vec<f64>, at_ns: u64) {
    spread_over_seconds(series, at_ns, at_ns, 1.0);
}

impl RunData {
    pub fn add(&mut self, r: &RequestRecord) {
        if r.warmup {
            return; // in no statistic
        }
        let s = |ns: u64| (ns as f64 / 1e9) as f32;
        bump(&mut self.per_second.scheduled, r.scheduled_ns);
        if let Some(sent) = r.sent_ns {
            bump(&mut self.per_second.sent, sent);
        }
        if let Some(d) = r.drift_ms() {
            self.drift.push(d as f32);
        }
        if !r.ok() {
            let kind = r.error.as_ref().map_or("http", |e| e.kind.as_str());
            let at = r.end_ns.or(r.sent_ns).unwrap_or(r.scheduled_ns);
            bump(
                self.per_second.errors.entry(kind.to_string()).or_default(),
                at,
            );
            return;
        }
        let mine = self.by_endpoint.entry(r.endpoint.clone()).or_default();
        if let Some(end) = r.end_ns {
            bump(&mut self.per_second.completed, end);
            bump(&mut mine.completed, end);
        }
        if let Some(v) = r.ttft_ms() {
            mine.ttft.push(v as f32);
        }
        if let Some(v) = r.e2el_ms() {
            mine.e2el.push(v as f32);
        }
        add_output_tokens(&mut self.per_second.output_tokens, r);
        let sent = s(r.sent_ns.unwrap_or(r.scheduled_ns));
        if let Some(v) = r.ttft_ms() {
            self.ttft.push((sent, v as f32));
        }
        if let Some(v) = r.e2el_ms() {
            self.e2el.push((sent, v as f32));
        }
        if let Some(v) = r.tpot_ms() {
            self.tpot.push(v as f32);
        }
        if let (Some(t), Some(p)) = (r.input_tokens, r.prompt_tokens) {
            self.lengths.push((
                t.min(u64::from(u32::MAX)) as u32,
                p.min(u64::from(u32::MAX)) as u32,
            ));
        }
    }
}

/// At most `max` evenly spaced elements of `v` (all of them when there are fewer), the
/// last one always among them: a curve thinned for drawing still reaches its maximum.
pub fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    if v.len() <= max {
        return v.to_vec();
    }
    if max < 2 {
        return v.last().into_iter().copied().take(max).collect();
    }
    let step = (v.len() - 1) as f64 / (max - 1) as f64;
    (0..max)
        .map(|i| v[(i as f64 * step).round() as usize])
        .collect()
}

/// Points of the empirical CDF of `values` (sorted in place): (value, fraction <= value), at
/// most `max` of them.
pub fn cdf(values: &mut [f32], max: usize) -> Vec<(f64, f64)> {
    values.sort_by(f32::total_cmp);
    let n = values.len();
    let idx: Vec<usize> = thin(&(0..n).collect::<Vec<_>>(), max);
    let mut points: Vec<(f64, f64)> = idx
        .iter()
        .map(|&i| (f64::from(values[i]), (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = values.last() {
        points.push((f64::from(last), 1.0));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_and_thinning() {
        let mut v = vec![3.0, 1.0, 2.0, 4.0];
        assert_eq!(
            cdf(&mut v, 10),
            vec![(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0), (4.0, 1.0)]
        );
        assert_eq!(thin(&[1, 2, 3, 4, 5, 6], 3), vec![1, 4, 6]);
        assert_eq!(thin(&[1, 2, 3, 4, 5, 6, 7], 4), vec![1, 3, 5, 7]);
        let long: Vec<u32> = (0..10_000).collect();
        assert_eq!(thin(&long, 400).last(), Some(&9_999), "the maximum is kept");
    }
}
