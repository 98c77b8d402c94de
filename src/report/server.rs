//! report.html's "Server metrics" section: each scraped target's queue, running requests,
//! KV-cache use and prefix-cache hit rate over the run, beside the requests sent per second
//! and TTFT, all on the run's time axis.

use super::chart::{chart, Series};
use super::data::RunData;
use super::parts::{per_second, scatter, section};
use crate::server_metrics::summary::TargetSummary;

pub fn section_of(out: &mut String, targets: &[TargetSummary], data: &RunData) {
    let lines = |name: &str, scale: f64| -> Vec<Series> {
        targets
            .iter()
            .filter_map(|t| {
                let points = t.points.get(name)?;
                let points = points.iter().map(|&(x, y)| (x, y * scale)).collect();
                Some(Series::line(&t.target, points))
            })
            .collect()
    };
    let mut waiting = lines("waiting", 1.0);
    for s in &mut waiting {
        s.name = format!("{} waiting", s.name);
    }
    for mut s in lines("running", 1.0) {
        s.name = format!("{} running", s.name);
        waiting.push(s);
    }
    let failed: Vec<String> = targets
        .iter()
        .filter(|t| t.failed > 0)
        .map(|t| {
            format!(
                "{}: {} of {} scrapes failed ({})",
                t.target,
                t.failed,
                t.scrapes,
                t.first_error.as_deref().unwrap_or("")
            )
        })
        .chain(targets.iter().flat_map(|t| {
            t.baseline_note()
                .map(move |note| format!("{}: {note}", t.target))
        }))
        .collect();
    let note = format!(
        "From each target's /metrics, scraped during the run (server_metrics.jsonl); the hit \
         rate is each interval's prefix-cache hits over its queries (vLLM's and SGLang's \
         counters), or SGLang's own rate. {}",
        failed.join("; ")
    );
    section(
        out,
        "server-metrics",
        "Server metrics",
        &note,
        &[
            chart(
                "Queue and running requests",
                "run time (s)",
                "requests",
                &waiting,
            ),
            chart(
                "KV-cache use",
                "run time (s)",
                "% in use",
                &lines("kv_cache_usage", 100.0),
            ),
            chart(
                "Prefix-cache hit rate",
                "run time (s)",
                "% of prompt tokens",
                &hit_rates(targets),
            ),
            chart(
                "Requests sent per second",
                "run time (s)",
                "req/s",
                &[Series::line("sent", per_second(&data.per_second.sent))],
            ),
            chart(
                "TTFT over the run",
                "run time (s)",
                "ms",
                &[Series::dots("TTFT", scatter(&data.ttft))],
            ),
        ],
    );
}

/// Per target and scrape interval: the hits over the queries of that interval, in %; else
/// the server's own rate gauge.
fn hit_rates(targets: &[TargetSummary]) -> Vec<Series> {
    targets
        .iter()
        .filter_map(|t| {
            if let (Some(hits), Some(queries)) = (
                t.points.get("prefix_cache_hits"),
                t.points.get("prefix_cache_queries"),
            ) {
                let points = hits
                    .windows(2)
                    .zip(queries.windows(2))
                    .filter_map(|(h, q)| {
                        let dq = q[1].1 - q[0].1;
                        (dq > 0.0).then(|| (h[1].0, 100.0 * (h[1].1 - h[0].1) / dq))
                    })
                    .collect();
                return Some(Series::line(&t.target, points));
            }
            let rate = t.points.get("prefix_cache_hit_rate")?;
            let points = rate.iter().map(|&(x, y)| (x, y * 100.0)).collect();
            Some(Series::line(&t.target, points))
        })
        .collect()
}
