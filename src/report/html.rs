//! `report.html` and `compare.html`: one self-contained page each, plots drawn with plotters'
//! SVG backend and inlined, so the file opens anywhere without network access.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use plotters::prelude::*;

use super::data::{cdf, thin, RunData};
use crate::stats::{Distribution, Summary};

const SIZE: (u32, u32) = (600, 340);
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
/// Scatter plots keep at most this many points (evenly thinned) so pages stay light.
const MAX_POINTS: usize = 4000;
/// Points drawn per CDF curve.
pub const CDF_POINTS: usize = 400;

/// How a series is drawn.
#[derive(Clone, Copy, PartialEq)]
pub enum Mark {
    Line,
    Dots,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
}

impl Series {
    pub fn line(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            mark: Mark::Line,
        }
    }

    pub fn dots(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            mark: Mark::Dots,
        }
    }
}

/// An x-y chart as an SVG string; a short note instead when there is nothing to draw.
pub fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return format!("<p class=\"empty\">{}: no data</p>", escape(title));
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    let mut svg = String::new();
    let drawn = draw(
        &mut svg,
        title,
        x_label,
        y_label,
        series,
        (x0, x1 * 1.02, y0, y1 * 1.05),
    );
    match drawn {
        Ok(()) => svg,
        Err(e) => format!("<p class=\"empty\">{}: {}</p>", escape(title), escape(&e)),
    }
}

fn draw(
    svg: &mut String,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    (x0, x1, y0, y1): (f64, f64, f64, f64),
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3))
        };
        match s.mark {
            Mark::Line => c
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(legend),
            Mark::Dots => c
                .draw_series(
                    thin(&s.points, MAX_POINTS)
                        .into_iter()
                        .map(|p| Circle::new(p, 2, color.mix(0.5).filled())),
                )
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(legend),
        };
    }
    if series.len() > 1 || series.first().is_some_and(|s| !s.name.is_empty()) {
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

/// A bar chart of counts per bin, as an SVG string.
pub fn histogram(title: &str, x_label: &str, values: &[f32], bins: usize) -> String {
    if values.is_empty() {
        return format!("<p class=\"empty\">{}: no data</p>", escape(title));
    }
    let (lo, hi) = values
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let width = ((hi - lo) as f64 / bins as f64).max(1e-6);
    let mut counts = vec![0u64; bins];
    for &v in values {
        let i = (((v - lo) as f64 / width) as usize).min(bins - 1);
        counts[i] += 1;
    }
    // Drawn as a step outline over the bins, plotters' line series in bar shape.
    let mut points = Vec::with_capacity(bins * 2 + 2);
    for (i, &c) in counts.iter().enumerate() {
        let x = f64::from(lo) + i as f64 * width;
        points.push((x, c as f64));
        points.push((x + width, c as f64));
    }
    chart(title, x_label, "requests", &[Series::line("", points)])
}

/// CDF points of an HDR histogram of nanoseconds, in milliseconds.
pub fn histogram_cdf(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let total = h.len().max(1) as f64;
    let mut seen = 0u64;
    let points: Vec<(f64, f64)> = h
        .iter_recorded()
        .map(|v| {
            seen += v.count_at_value();
            (v.value_iterated_to() as f64 / 1e6, seen as f64 / total)
        })
        .collect();
    thin(&points, CDF_POINTS)
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1260px;color:#222}\
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}\
.grid{display:flex;flex-wrap:wrap;gap:12px}.grid>*{flex:0 0 600px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.empty{color:#888;font-style:italic}\
.note{color:#555;font-size:13px}";

/// Opens a page: doctype, head with inline style, title.
pub fn page_start(title: &str, subtitle: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p class=\"note\">{s}</p>\n",
        t = escape(title),
        s = escape(subtitle)
    )
}

pub fn section(out: &mut String, id: &str, title: &str, note: &str, body: &[String]) {
    let _ = write!(out, "<section id=\"{id}\">\n<h2>{}</h2>\n", escape(title));
    if !note.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    let _ = writeln!(
        out,
        "<div class=\"grid\">\n{}\n</div>\n</section>",
        body.join("\n")
    );
}

/// The summary as two tables: headline figures, then one row per distribution.
pub fn summary_tables(s: &Summary) -> String {
    let mut t = String::from("<table>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(t, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&v));
    };
    for f in crate::headline::FIGURES {
        let Some(v) = f.format(s) else { continue };
        row(f.label, v);
        if f.key == "requests_failed" {
            for (kind, n) in &s.by_error_kind {
                let first = s.first_error_by_kind.get(kind).map_or("", String::as_str);
                row(
                    &format!("  failed: {kind}"),
                    format!("{n} (first: {first})"),
                );
            }
        }
    }
    row(
        "Input length exact (server usage)",
        s.input_length_match.describe(),
    );
    row("Output length exact", s.output_length_match.describe());
    t.push_str("</table>\n<table>\n<tr><th>metric (ms)</th><th>count</th><th>mean</th><th>median</th><th>std</th><th>min</th>");
    for p in &s.percentiles {
        let _ = write!(t, "<th>{}</th>", crate::stats::percentile_key(*p));
    }
    t.push_str("<th>max</th></tr>\n");
    for (key, _, d) in s.metrics() {
        let Some(d) = d else { continue };
        let _ = write!(t, "<tr><td>{key}</td><td>{}</td>", d.count);
        for v in [d.mean, d.median, d.std, d.min] {
            let _ = write!(t, "<td>{v:.3}</td>");
        }
        for p in &s.percentiles {
            let _ = write!(t, "<td>{:.3}</td>", d.percentile(*p).unwrap_or(f64::NAN));
        }
        let _ = writeln!(t, "<td>{:.3}</td></tr>", d.max);
    }
    t.push_str("</table>");
    t
}

/// Plot points of (run seconds, ms) pairs.
pub(super) fn scatter(v: &[(f32, f32)]) -> Vec<(f64, f64)> {
    v.iter()
        .map(|&(x, y)| (f64::from(x), f64::from(y)))
        .collect()
}

/// (run seconds, value) of per-second buckets.
pub(super) fn per_second(series: &[f64]) -> Vec<(f64, f64)> {
    series
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as f64, v))
        .collect()
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

    let mut ttft: Vec<f32> = data.ttft.iter().map(|p| p.1).collect();
    let mut e2el: Vec<f32> = data.e2el.iter().map(|p| p.1).collect();
    let cdf_chart = |name: &str, points: Vec<(f64, f64)>| {
        chart(
            &format!("{name} CDF"),
            "ms",
            "fraction of requests",
            &[Series::line("", points)],
        )
    };
    let itl_points = histogram_cdf(itl);
    section(
        &mut out,
        "latency-cdfs",
        "Latency CDFs",
        "TTFT = first token - sent; TPOT = (E2EL - TTFT) / (output tokens - 1); ITL = gap between content chunks; E2EL = last byte - sent.",
        &[
            cdf_chart("TTFT", cdf(&mut ttft, CDF_POINTS)),
            cdf_chart("TPOT", cdf(&mut data.tpot, CDF_POINTS)),
            chart("ITL CDF", "ms", "fraction of chunks", &[Series::line("", itl_points)]),
            cdf_chart("E2EL", cdf(&mut e2el, CDF_POINTS)),
        ],
    );
    section(
        &mut out,
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
    let ps = &data.per_second;
    section(
        &mut out,
        "throughput-over-time",
        "Throughput over time",
        "Per second of the run: requests the trace scheduled vs requests sent and completed; output tokens received.",
        &[
            chart(
                "Requests per second",
                "run time (s)",
                "req/s",
                &[
                    Series::line("scheduled", per_second(&ps.scheduled)),
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
    if let Some(targets) = &summary.server {
        super::server::section_of(&mut out, targets, data);
    }
    section(
        &mut out,
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
        &mut out,
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
    let mut errors: Vec<Series> = ps
        .errors
        .iter()
        .map(|(kind, v)| Series::line(kind, per_second(v)))
        .collect();
    if errors.is_empty() {
        let zeros = vec![0.0; ps.scheduled.len().max(ps.completed.len()).max(1)];
        errors.push(Series::line("no failures", per_second(&zeros)));
    }
    section(
        &mut out,
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
    out.push_str("</body>\n</html>\n");
    out
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
        let _ = writeln!(t, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&v));
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
