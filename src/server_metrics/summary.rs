//! `server_metrics.jsonl` read back: per target, each series over the run (mean, maximum,
//! last; a counter's increase), the scrapes that failed, and the points the report plots.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use super::families::{self, Kind};
use super::METRICS_FILE;
use crate::error::Result;

/// One target's scrapes.
#[derive(Clone, Debug, Default)]
pub struct TargetSummary {
    pub target: String,
    pub server: Option<String>,
    pub scrapes: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    /// The baseline scrape (before the load) failed, with this error: a counter's increase
    /// then starts at the first answered scrape and misses what came before it.
    pub baseline_error: Option<String>,
    /// Each series' points: (run seconds, value).
    pub points: BTreeMap<String, Vec<(f64, f64)>>,
    /// The `--metric` series the server typed as counters (the common names know their kind).
    pub counters: std::collections::BTreeSet<String>,
}

/// What one series did over the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesSummary {
    pub mean: f64,
    pub max: f64,
    pub last: f64,
    /// A counter's increase over the run, restarts of the server counted as Prometheus'
    /// `increase()` counts them (a fall starts again from zero).
    pub increase: Option<f64>,
}

impl TargetSummary {
    pub fn series(&self, name: &str) -> Option<SeriesSummary> {
        let points = self.points.get(name).filter(|p| !p.is_empty())?;
        let values = points.iter().map(|p| p.1);
        let counter = match families::common(name) {
            Some(c) => c.kind == Kind::Counter,
            None => self.counters.contains(name),
        };
        let increase = counter.then(|| {
            points
                .windows(2)
                .map(|w| match w[1].1 >= w[0].1 {
                    true => w[1].1 - w[0].1,
                    false => w[1].1,
                })
                .sum()
        });
        Some(SeriesSummary {
            mean: values.clone().sum::<f64>() / points.len() as f64,
            max: values.fold(f64::MIN, f64::max),
            last: points[points.len() - 1].1,
            increase,
        })
    }

    /// The increase of the server's prefix-cache counters over the run: (hits, queries), in
    /// tokens, when it has both.
    pub fn prefix_counters(&self) -> Option<(f64, f64)> {
        let hits = self.series("prefix_cache_hits")?.increase?;
        let queries = self.series("prefix_cache_queries")?.increase?;
        Some((hits, queries))
    }

    /// The server's prefix-cache hit share over the run, from its counters, when it was
    /// asked anything.
    pub fn prefix_hit_share(&self) -> Option<f64> {
        let (hits, queries) = self.prefix_counters()?;
        (queries > 0.0).then(|| hits / queries)
    }

    /// One line for the text table: the server, its scrapes, queue and KV-cache levels.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "{}, {} scrapes ({} failed)",
            self.server.as_deref().unwrap_or("unknown server"),
            self.scrapes,
            self.failed
        )];
        for (name, label, scale) in [
            ("running", "running", 1.0),
            ("waiting", "waiting", 1.0),
            ("kv_cache_usage", "KV use %", 100.0),
        ] {
            if let Some(s) = self.series(name) {
                parts.push(format!(
                    "{label} mean {:.1} max {:.1}",
                    s.mean * scale,
                    s.max * scale
                ));
            }
        }
        if let Some(n) = self.series("preemptions").and_then(|s| s.increase) {
            parts.push(format!("{n} preemptions"));
        }
        match (self.scrapes - self.failed, &self.first_error) {
            (0, Some(e)) => parts.push(format!("every scrape failed: {e}")),
            _ => {
                if let Some(note) = self.baseline_note() {
                    parts.push(note);
                }
            }
        }
        parts.join("; ")
    }

    /// When the baseline failed: which counters' increases start late, and from when.
    pub fn baseline_note(&self) -> Option<String> {
        let e = self.baseline_error.as_ref()?;
        let from = self
            .points
            .values()
            .filter_map(|p| p.first())
            .map(|p| p.0)
            .fold(f64::NAN, f64::min);
        Some(format!(
            "no baseline ({e}): counter increases start at {from:.1} s and miss what came before"
        ))
    }

    pub fn to_json(&self) -> Value {
        let series: BTreeMap<&String, Value> = self
            .points
            .keys()
            .filter_map(|name| {
                let s = self.series(name)?;
                let mut v = json!({"mean": s.mean, "max": s.max, "last": s.last});
                if let Some(inc) = s.increase {
                    v["increase"] = json!(inc);
                    if self.baseline_error.is_some() {
                        // Marked: the increase is from this time on, not over the run.
                        v["increase_from_s"] = json!(self.points[name][0].0);
                    }
                }
                Some((name, v))
            })
            .collect();
        json!({
            "target": self.target,
            "server": self.server,
            "scrapes": self.scrapes,
            "failed_scrapes": self.failed,
            "first_error": self.first_error,
            "baseline_error": self.baseline_error,
            "prefix_cache_hit_share": self.prefix_hit_share(),
            "series": series,
        })
    }
}

/// Reads a run directory's `server_metrics.jsonl`; None when the run scraped nothing.
pub fn load(dir: &Path) -> Result<Option<Vec<TargetSummary>>> {
    let path = dir.join(METRICS_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let mut targets: Vec<TargetSummary> = Vec::new();
    crate::jsonl::each_json_line(&path, |n, v| {
        let (Some(target), Some(t_s)) = (v["target"].as_str(), v["t_s"].as_f64()) else {
            let message = "expected the fields `target` and `t_s`".to_string();
            return Err(crate::jsonl::line_error(&path, n, message));
        };
        let at = match targets.iter().position(|t| t.target == target) {
            Some(at) => at,
            None => {
                targets.push(TargetSummary {
                    target: target.to_string(),
                    ..TargetSummary::default()
                });
                targets.len() - 1
            }
        };
        let t = &mut targets[at];
        t.scrapes += 1;
        if let Some(e) = v["error"].as_str() {
            let e = crate::printable::printable(e);
            if v["baseline"] == true {
                t.baseline_error = Some(e.to_string());
            }
            t.failed += 1;
            t.first_error.get_or_insert_with(|| e.to_string());
            return Ok(());
        }
        if let Some(server) = v["server"].as_str() {
            t.server
                .get_or_insert_with(|| crate::printable::printable(server).into_owned());
        }
        for (name, value) in v["metrics"].as_object().into_iter().flatten() {
            if let Some(x) = value.as_f64() {
                t.points.entry(name.clone()).or_default().push((t_s, x));
            }
        }
        for name in v["counters"].as_array().into_iter().flatten() {
            if let Some(name) = name.as_str() {
                t.counters.insert(name.to_string());
            }
        }
        Ok(())
    })?;
    Ok(Some(targets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_increase_across_a_restart_and_gauges_average() {
        let mut t = TargetSummary::default();
        t.points.insert(
            "prefix_cache_hits".into(),
            vec![(0.0, 100.0), (1.0, 150.0), (2.0, 20.0), (3.0, 50.0)],
        );
        t.points.insert(
            "prefix_cache_queries".into(),
            vec![(0.0, 1000.0), (3.0, 1200.0)],
        );
        t.points
            .insert("waiting".into(), vec![(0.0, 0.0), (1.0, 4.0), (2.0, 2.0)]);
        // 50 before the restart, 20 up to the restart's first scrape, 30 after.
        assert_eq!(t.series("prefix_cache_hits").unwrap().increase, Some(100.0));
        assert_eq!(t.prefix_hit_share(), Some(0.5));
        let w = t.series("waiting").unwrap();
        assert_eq!((w.mean, w.max, w.last, w.increase), (2.0, 4.0, 2.0, None));
        // A `--metric` series gets its increase when the scrapes marked it a counter.
        let points = vec![(0.0, 10.0), (1.0, 25.0)];
        t.points.insert("x_total".into(), points.clone());
        t.points.insert("y".into(), points);
        t.counters.insert("x_total".into());
        assert_eq!(t.series("x_total").unwrap().increase, Some(15.0));
        assert_eq!(t.series("y").unwrap().increase, None);
    }
}
