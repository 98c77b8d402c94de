//! report.html's "Endpoints" section: each endpoint's share of the run side by side (a table
//! of requests, failures, latency percentiles, throughput and prefix-cache hits) and, with
//! more than one, their TTFT and E2EL distributions and completions per second on one chart
//! each, so an instance that falls behind the others stands out.

use std::fmt::Write as _;

use super::chart::{cdf_chart, chart, Series, CDF_POINTS};
use super::data::{cdf, RunData};
use super::parts::{escape, per_second_over, section};
use crate::stats::Summary;

pub fn section_of(out: &mut String, summary: &Summary, data: &mut RunData) {
    if summary.per_endpoint.is_empty() {
        return;
    }
    let mut t = String::from(
        "<table>\n<tr><th>endpoint</th><th>requests</th><th>ok</th><th>failed</th>\
         <th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th><th>E2EL p50 (ms)</th><th>E2EL p99 (ms)</th>\
         <th>output tok/s</th><th>active (s)</th><th>prefix hits, server</th><th>prefix hits, expected</th></tr>\n",
    );
    let share = |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.2} %", s * 100.0));
    for e in &summary.per_endpoint {
        let [ttft50, ttft99, e2el50, e2el99] = e.latency_cells(2);
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.endpoint),
            e.requests,
            e.ok,
            e.failed,
            ttft50,
            ttft99,
            e2el50,
            e2el99,
            e.output_throughput,
            e.duration_s,
            share(e.prefix.observed_share()),
            share(e.prefix.expected_share()),
        );
    }
    t.push_str("</table>");
    let mut body = vec![t];
    if data.by_endpoint.len() > 1 {
        let mut ttft = Vec::new();
        let mut e2el = Vec::new();
        let mut completed = Vec::new();
        // Each line runs the whole run: an endpoint that stopped completing shows zeros.
        let seconds = data.per_second.seconds();
        for (url, d) in data.by_endpoint.iter_mut() {
            ttft.push(Series::line(url, cdf(&mut d.ttft, CDF_POINTS)));
            e2el.push(Series::line(url, cdf(&mut d.e2el, CDF_POINTS)));
            completed.push(Series::line(url, per_second_over(&d.completed, seconds)));
        }
        body.push(cdf_chart(
            "TTFT CDF by endpoint",
            "ms",
            "fraction of requests",
            &ttft,
        ));
        body.push(cdf_chart(
            "E2EL CDF by endpoint",
            "ms",
            "fraction of requests",
            &e2el,
        ));
        body.push(chart(
            "Completions per second by endpoint",
            "run time (s)",
            "req/s",
            &completed,
        ));
    }
    section(
        out,
        "endpoints",
        "Endpoints",
        "Each endpoint's own requests; its throughput is over its own active span (first send to last end).",
        &body,
    );
}
