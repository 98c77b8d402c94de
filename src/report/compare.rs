//! `llmreplay report A B`: two runs side by side, each metric with its relative change.

use std::fmt::Write as _;

use super::data::cdf;
use super::html::{
    self, cdf_chart, escape, histogram_cdf, page_start, section, Series, CDF_POINTS,
};
use super::LoadedRun;
use crate::stats::{percentile_key, Summary};

/// One compared figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
}

impl Row {
    /// (B - A) / A in percent, when both exist and A is not zero.
    pub fn delta_pct(&self) -> Option<f64> {
        match (self.a, self.b) {
            (Some(a), Some(b)) if a != 0.0 => Some((b - a) / a.abs() * 100.0),
            _ => None,
        }
    }
}

/// The figures compared: headline numbers, then each distribution's mean, median, requested
/// percentiles and max.
pub fn rows(a: &Summary, b: &Summary) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut push = |metric: String, f: &dyn Fn(&Summary) -> Option<f64>| {
        rows.push(Row {
            metric,
            a: f(a),
            b: f(b),
        })
    };
    for f in crate::headline::FIGURES {
        push(f.key.into(), &|s| (f.value)(s));
    }
    let mut stats = vec!["mean".to_string(), "median".into()];
    stats.extend(a.percentiles.list.iter().map(|p| percentile_key(*p)));
    stats.push("max".into());
    for l in crate::stats::latency::LATENCIES {
        for stat in &stats {
            push(format!("{}.{stat}", l.key), &|s: &Summary| {
                s.latency(l).and_then(|d| html::stat(d, stat))
            });
        }
    }
    rows
}

/// A count as a whole number, anything else to three decimals.
fn cell(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => format!("{v:.3}"),
    }
}

fn delta(r: &Row) -> String {
    r.delta_pct().map_or("-".into(), |d| format!("{d:+.1}%"))
}

/// The side-by-side table printed by `report A B`.
pub fn table(rows: &[Row], a_name: &str, b_name: &str) -> String {
    let mut out = format!(
        "A = {a_name}\nB = {b_name}\n{:<36} {:>13} {:>13} {:>9}\n",
        "metric", "A", "B", "delta"
    );
    for r in rows {
        if r.a.is_none() && r.b.is_none() {
            continue;
        }
        let _ = writeln!(
            out,
            // A space between columns even when a figure overflows its width.
            "{:<36} {:>13} {:>13} {:>9}",
            r.metric,
            cell(r.a),
            cell(r.b),
            delta(r)
        );
    }
    out
}

/// `compare.html`: the table and overlaid latency CDFs of both runs.
pub fn page(
    rows: &[Row],
    a: &mut LoadedRun,
    b: &mut LoadedRun,
    a_name: &str,
    b_name: &str,
) -> String {
    let mut out = page_start(
        "llmreplay comparison",
        &format!("A = {a_name}; B = {b_name}"),
    );
    let mut t =
        String::from("<table>\n<tr><th>metric</th><th>A</th><th>B</th><th>delta</th></tr>\n");
    for r in rows.iter().filter(|r| r.a.is_some() || r.b.is_some()) {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.metric),
            cell(r.a),
            cell(r.b),
            delta(r)
        );
    }
    t.push_str("</table>");
    section(
        &mut out,
        "comparison-table",
        "Side by side",
        "delta = (B - A) / A",
        &[t],
    );
    let both =
        |f: &dyn Fn(&mut LoadedRun) -> Vec<(f64, f64)>, a: &mut LoadedRun, b: &mut LoadedRun| {
            vec![Series::line("A", f(a)), Series::line("B", f(b))]
        };
    let ttft = both(
        &|r| {
            cdf(
                &mut r.data.ttft.iter().map(|p| p.1).collect::<Vec<_>>(),
                CDF_POINTS,
            )
        },
        a,
        b,
    );
    let e2el = both(
        &|r| {
            cdf(
                &mut r.data.e2el.iter().map(|p| p.1).collect::<Vec<_>>(),
                CDF_POINTS,
            )
        },
        a,
        b,
    );
    let tpot = both(&|r| cdf(&mut r.data.tpot, CDF_POINTS), a, b);
    let itl = both(&|r| histogram_cdf(&r.itl), a, b);
    section(
        &mut out,
        "comparison-cdfs",
        "Latency CDFs, A vs B",
        "",
        &[
            cdf_chart("TTFT CDF", "ms", "fraction of requests", &ttft),
            cdf_chart("TPOT CDF", "ms", "fraction of requests", &tpot),
            cdf_chart("ITL CDF", "ms", "fraction of chunks", &itl),
            cdf_chart("E2EL CDF", "ms", "fraction of requests", &e2el),
        ],
    );
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas() {
        let r = |a, b| Row {
            metric: "m".into(),
            a,
            b,
        };
        assert_eq!(r(Some(100.0), Some(110.0)).delta_pct(), Some(10.0));
        assert_eq!(r(Some(0.0), Some(1.0)).delta_pct(), None);
        assert_eq!(r(None, Some(1.0)).delta_pct(), None);
        // A figure wider than its column still has a space before the next one.
        let row = r(Some(1e5), Some(1e11));
        let line = table(&[row], "a", "b").lines().last().unwrap().to_string();
        assert!(line.ends_with(" 100000000000 +99999900.0%"), "{line}");
    }
}
