//! `report.html` and `compare.html`: one self-contained page each, plots drawn with plotters'
//! SVG backend and inlined, so the file opens anywhere without network access.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

pub use super::chart::{cdf_chart, chart, histogram, histogram_cdf, Series, CDF_POINTS};
use super::data::{cdf, RunData};
pub use super::parts::{escape, per_second, per_second_over, scatter, section};
use crate::stats::{Distribution, Summary};

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1260px;color:#222}\
h1{font-size:22px;overflow-wrap:anywhere}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}\
.grid{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.grid>figure{flex:0 0 600px;margin:0}.grid>table{flex:0 1 auto}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left;white-space:nowrap}\
td.text{text-align:left;max-width:760px;overflow-wrap:anywhere}td.msg{text-align:left;max-width:640px;overflow-wrap:anywhere;color:#555}\
.empty{color:#888;font-style:italic;font-size:13px;margin:4px 0}.note{color:#555;font-size:13px}\
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;margin:2px 0 0 64px}\
.legend span{display:inline-flex;align-items:center;gap:6px}.legend i{display:inline-block;width:18px}\
pre{white-space:pre-wrap;overflow-wrap:anywhere}";

/// Opens a page: doctype, head with inline style, title.
pub fn page_start(title: &str, subtitle: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p class=\"note\">{s}</p>\n",
        t = escape(title),
        s = escape(subtitle)
    )
}

/// The summary as two tables: headline figures, then one row per distribution.
pub fn summary_tables(s: &Summary) -> String {
    let mut t = String::from("<table>\n");
    let mut row = |k: &str, v: String, msg: &str| {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td class=\"msg\">{}</td></tr>",
            escape(k),
            escape(&v),
            escape(msg)
        );
    };
    for f in crate::headline::FIGURES {
        let Some(v) = f.format(s) else { continue };
        row(f.label, v, "");
        if f.key == "requests_failed" {
            for (kind, n) in &s.by_error_kind {
                let first = s.first_error_by_kind.get(kind).map_or("", String::as_str);
                row(
                    &format!("failed: {kind}"),
                    n.to_string(),
                    &format!("first: {first}"),
                );
            }
        }
    }
    row(
        "Input length exact (server usage)",
        s.input_length_match.describe(),
        "",
    );
    row("Output length exact", s.output_length_match.describe(), "");
    t.push_str("</table>\n<table>\n<tr><th>metric (ms)</th><th>count</th><th>mean</th><th>median</th><th>std</th><th>min</th>");
    for p in &s.percentiles.list {
        let _ = write!(t, "<th>{}</th>", crate::stats::percentile_key(*p));
    }
    t.push_str("<th>max</th></tr>\n");
    for (l, d) in s.metrics() {
        let Some(d) = d else { continue };
        let _ = write!(t, "<tr><td>{}</td><td>{}</td>", l.key, d.count);
        for v in [d.mean, d.median, d.std, d.min] {
            let _ = write!(t, "<td>{v:.3}</td>");
        }
        for p in &s.percentiles.list {
            let _ = write!(t, "<td>{}</td>", d.cell(*p, 3));
        }
        let _ = writeln!(t, "<td>{:.3}</td></tr>", d.max);
    }
    t.push_str("</table>");
    t
}

/// The whole `report.html` of one run.
pub fn report(
    title: &str,
    run: Option<&serde_json::Value>,
    summary: &Summary,
    data: &mut RunData,
    itl: &Histogram<u64>,
) -> String {
    let mut out = page_start(
        title,
        "llmreplay report: every figure below comes from requests.jsonl of this run.",
    );
    if let Some(v) = &summary.verdict {
        verdict_section(&mut out, v);
    }
    if let Some(run) = run {
        section(
            &mut out,
            "configuration",
            "Configuration",
            "",
            &[configuration(run)],
        );
    }
    section(
        &mut out,
        "summary",
        "Summary",
        "",
        &[summary_tables(summary)],
    );
    super::endpoints::section_of(&mut out, summary, data);
    if let Some(sessions) = &summary.sessions {
        super::sessions::section_of(&mut out, sessions);
    }
    latency_sections(&mut out, data, itl);
    throughput_section(&mut out, &data.per_second);
    if let Some(targets) = &summary.server {
        super::server::section_of(&mut out, targets, data);
    }
    drift_and_length_sections(&mut out, summary, data);
    errors_section(&mut out, summary, &data.per_second);
    out.push_str("</body>\n</html>\n");
    out
}

/// The verdict and each of its reasons.
fn verdict_section(out: &mut String, v: &crate::stats::verdict::Verdict) {
    let mut items = String::from("<ul>");
    for r in &v.reasons {
        let _ = write!(
            items,
            "<li><b>{}</b>: {}</li>",
            escape(r.key),
            escape(&r.text)
        );
    }
    items.push_str("</ul>");
    section(
        out,
        "verdict",
        &format!("Verdict: {}", v.word()),
        "Whether these numbers hold: every check of README \"Can I trust this run?\", \
         against the bounds in summary.json's verdict.bounds.",
        &[items],
    );
}

/// The latency CDFs, and TTFT and E2EL over the run.
fn latency_sections(out: &mut String, data: &mut RunData, itl: &Histogram<u64>) {
    let mut ttft: Vec<f32> = data.ttft.iter().map(|p| p.1).collect();
    let mut e2el: Vec<f32> = data.e2el.iter().map(|p| p.1).collect();
    let cdf_of = |name: &str, points: Vec<(f64, f64)>| {
        cdf_chart(
            &format!("{name} CDF"),
            "ms",
            "fraction of requests",
            &[Series::line("", points)],
        )
    };
    let itl_points = histogram_cdf(itl);
    section(
        out,
        "latency-cdfs",
        "Latency CDFs",
        "TTFT = first token - sent; TPOT = (E2EL - TTFT) / (output tokens - 1); ITL = gap between content chunks; E2EL = last byte - sent.",
        &[
            cdf_of("TTFT", cdf(&mut ttft, CDF_POINTS)),
            cdf_of("TPOT", cdf(&mut data.tpot, CDF_POINTS)),
            cdf_chart(
                "ITL CDF",
                "ms",
                "fraction of chunks",
                &[Series::line("", itl_points)],
            ),
            cdf_of("E2EL", cdf(&mut e2el, CDF_POINTS)),
        ],
    );
    section(
        out,
        "latency-over-time",
        "TTFT and E2EL over the run",
        "One dot per successful request, at the time it was sent.",
        &[
            chart(
                "TTFT over the run",
                "run time (s)",
                "ms",
                &[Series::dots("TTFT", scatter(&data.ttft))],
            ),
            chart(
                "E2EL over the run",
                "run time (s)",
                "ms",
                &[Series::dots("E2EL", scatter(&data.e2el))],
            ),
        ],
    );
}

/// Requests scheduled, sent and completed, and output tokens, per second.
fn throughput_section(out: &mut String, ps: &super::data::PerSecond) {
    section(
        out,
        "throughput-over-time",
        "Throughput over time",
        "Per second of the run: requests the trace scheduled (the pale band) vs requests sent and completed; output tokens received.",
        &[
            chart(
                "Requests per second",
                "run time (s)",
                "req/s",
                &[
                    Series::band("scheduled", per_second(&ps.scheduled)),
                    Series::line("sent", per_second(&ps.sent)),
                    Series::line("completed", per_second(&ps.completed)),
                ],
            ),
            chart(
                "Output tokens per second",
                "run time (s)",
                "tok/s",
                &[Series::line("output tokens", per_second(&ps.output_tokens))],
            ),
        ],
    );
}

/// The send drift histogram, and the input lengths asked for against the server's counts.
fn drift_and_length_sections(out: &mut String, summary: &Summary, data: &RunData) {
    section(
        out,
        "drift-histogram",
        "Send drift",
        "Drift = first byte written - planned send time. Above 1 ms counts as a late send.",
        &[histogram(
            "Send drift histogram",
            "drift (ms)",
            &data.drift,
            40,
        )],
    );
    let lengths: Vec<(f64, f64)> = data
        .lengths
        .iter()
        .map(|&(t, p)| (f64::from(t), f64::from(p)))
        .collect();
    let diagonal: Vec<(f64, f64)> = lengths
        .iter()
        .map(|p| p.0)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        .map_or_else(Vec::new, |max| vec![(0.0, 0.0), (max, max)]);
    section(
        out,
        "input-length-match",
        "Input length match",
        &format!(
            "Target input_length vs the server's usage.prompt_tokens: {}.",
            summary.input_length_match.describe()
        ),
        &[chart(
            "Prompt tokens: target vs server",
            "input_length (trace)",
            "prompt_tokens (server)",
            &[
                Series::line("exact", diagonal),
                Series::dots("requests", lengths),
            ],
        )],
    );
}

/// Failures per second by error kind.
fn errors_section(out: &mut String, summary: &Summary, ps: &super::data::PerSecond) {
    let errors = error_lines(ps);
    section(
        out,
        "errors-over-time",
        "Errors over time",
        &format!(
            "{} failed requests, by error kind and second.",
            summary.failed
        ),
        &[chart(
            "Errors per second",
            "run time (s)",
            "failures/s",
            &errors,
        )],
    );
}

/// Failures per second, a line per error kind over the whole run: back at zero after a
/// kind's last failure, not ending there.
fn error_lines(ps: &super::data::PerSecond) -> Vec<Series> {
    let seconds = ps.seconds();
    let mut lines: Vec<Series> = ps
        .errors
        .iter()
        .map(|(kind, v)| Series::line(kind, per_second_over(v, seconds)))
        .collect();
    if lines.is_empty() {
        lines.push(Series::line("no failures", per_second_over(&[], seconds)));
    }
    lines
}

/// A distribution's value by name, for comparisons.
pub fn stat(d: &Distribution, name: &str) -> Option<f64> {
    match name {
        "mean" => Some(d.mean),
        "median" => Some(d.median),
        "std" => Some(d.std),
        "min" => Some(d.min),
        "max" => Some(d.max),
        p => p
            .strip_prefix('p')?
            .parse()
            .ok()
            .and_then(|p| d.percentile(p)),
    }
}

/// What the run was (from its run.json): tool version, trace, endpoints with their dialect
/// and model, stream mode, time scale, routing, and certificate checks.
fn configuration(run: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut t = String::from("<table>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td class=\"text\">{}</td></tr>",
            escape(k),
            escape(&v)
        );
    };
    row(
        "Tool",
        format!("{} {}", text(&run["tool"]), text(&run["version"])),
    );
    row(
        "Trace",
        format!("{} ({})", text(&run["trace"]), text(&run["format"])),
    );
    let endpoints = run["fleet"].as_array().map_or_else(Vec::new, |fleet| {
        fleet
            .iter()
            .map(|e| {
                format!(
                    "{} ({}, model {})",
                    text(&e["url"]),
                    text(&e["api"]),
                    text(&e["model"])
                )
            })
            .collect()
    });
    row("Endpoints", endpoints.join("; "));
    row("Route", text(&run["route"]));
    row(
        "Stream",
        if run["stream"] == true {
            "yes (SSE)"
        } else {
            "no (whole responses)"
        }
        .into(),
    );
    row("Time scale", text(&run["time_scale"]));
    row("Exact output lengths asked", text(&run["exact_output"]));
    if run["prime"] == true {
        row("Primed", crate::stats::PRIMED.into());
    }
    if let Some(detail) = run["ended"]["detail"].as_str() {
        row("Ended", detail.to_string());
    }
    if run["tls"]["verify_certificates"] == false {
        row(
            "TLS",
            "--insecure: server certificates were NOT verified".into(),
        );
    }
    t.push_str("</table>\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::parts::EMPTY;

    #[test]
    fn an_error_line_falls_back_to_zero_and_runs_to_the_end() {
        let mut ps = super::super::data::PerSecond {
            completed: vec![1.0; 10],
            ..Default::default()
        };
        ps.errors.insert("reset".into(), vec![0.0, 2.0, 1.0]);
        let lines = error_lines(&ps);
        assert_eq!(lines[0].points.len(), 10);
        assert_eq!(lines[0].points[3], (3.0, 0.0));
        assert_eq!(lines[0].points[9], (9.0, 0.0));
    }

    #[test]
    fn empty_charts_share_one_line_below_the_drawn_ones() {
        let mut out = String::new();
        let drawn = chart(
            "A",
            "s",
            "n",
            &[Series::line("", vec![(0.0, 1.0), (1.0, 2.0)])],
        );
        let body = [chart("B", "s", "n", &[]), drawn, chart("C", "s", "n", &[])];
        section(&mut out, "x", "X", "", &body);
        assert_eq!(out.matches(EMPTY).count(), 1, "{out}");
        assert!(out.contains("No data to draw: B; C."));
        assert!(out.find("<svg") < out.find("No data"));
    }
}
