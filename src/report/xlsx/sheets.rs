//! The sheets made from the summary and run.json: Summary, Per-endpoint, Server metrics and
//! Configuration.

use rust_xlsxwriter::{Format, Worksheet};
use serde_json::Value;

use super::{text, xerr};
use crate::error::Result;
use crate::stats::{percentile_key, SessionSummary, Summary};

/// Number formats, made once per book.
pub struct Formats {
    pub bold: Format,
    pub int: Format,
    pub real: Format,
    pub share: Format,
}

impl Formats {
    pub fn new() -> Formats {
        Formats {
            bold: Format::new().set_bold(),
            int: Format::new().set_num_format("#,##0"),
            real: Format::new().set_num_format("#,##0.000"),
            share: Format::new().set_num_format("0.00%"),
        }
    }

    /// Whole numbers without decimals, others with three.
    fn number(&self, v: f64) -> &Format {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            &self.int
        } else {
            &self.real
        }
    }
}

/// Writes `v` (nothing for None) with the format its value calls for.
fn number(sheet: &mut Worksheet, f: &Formats, row: u32, col: u16, v: Option<f64>) -> Result<()> {
    match v {
        Some(v) if v.is_finite() => sheet
            .write_number_with_format(row, col, v, f.number(v))
            .map(|_| ())
            .map_err(xerr),
        _ => Ok(()),
    }
}

/// Writes `values` into `row` from column `first` on, each as [`number`] writes it.
fn numbers(
    sheet: &mut Worksheet,
    f: &Formats,
    row: u32,
    first: u16,
    values: impl IntoIterator<Item = Option<f64>>,
) -> Result<()> {
    for (c, v) in values.into_iter().enumerate() {
        number(sheet, f, row, first + c as u16, v)?;
    }
    Ok(())
}

fn header(sheet: &mut Worksheet, f: &Formats, row: u32, names: &[String]) -> Result<()> {
    for (c, h) in names.iter().enumerate() {
        sheet
            .write_string_with_format(row, c as u16, h, &f.bold)
            .map_err(xerr)?;
    }
    Ok(())
}

/// Headline figures (name, value), then one row per distribution.
pub fn summary(sheet: &mut Worksheet, f: &Formats, s: &Summary, dropped: u64) -> Result<()> {
    let mut pairs: Vec<(String, f64)> = crate::headline::FIGURES
        .iter()
        .filter_map(|fig| (fig.value)(s).map(|v| (fig.key.to_string(), v)))
        .collect();
    pairs.push(("requests_total".into(), s.total as f64));
    for (kind, n) in &s.by_error_kind {
        pairs.push((format!("failed_{kind}"), *n as f64));
    }
    let (input, output) = (&s.input_length_match, &s.output_length_match);
    pairs.push(("input_length_checked".into(), input.checked as f64));
    pairs.push(("input_length_exact".into(), input.exact as f64));
    pairs.push(("output_length_checked".into(), output.checked as f64));
    pairs.push(("output_length_exact".into(), output.exact as f64));
    if dropped > 0 {
        pairs.push(("requests_not_in_sheet (row limit)".into(), dropped as f64));
    }
    let mut row = 0u32;
    // The verdict first, as summary.txt opens with it: the word, then a reason a row.
    if let Some(v) = &s.verdict {
        sheet
            .write_string_with_format(row, 0, "verdict", &f.bold)
            .map_err(xerr)?;
        sheet
            .write_string_with_format(row, 1, v.word(), &f.bold)
            .map_err(xerr)?;
        for r in &v.reasons {
            row += 1;
            text(sheet, row, 0, format!("verdict: {}", r.key))?;
            text(sheet, row, 1, &r.text)?;
        }
        row += 2;
    }
    for (k, v) in &pairs {
        text(sheet, row, 0, k)?;
        number(sheet, f, row, 1, Some(*v))?;
        row += 1;
    }
    row += 1;
    let mut names: Vec<String> = ["metric (ms)", "count", "mean", "median", "std", "min"]
        .map(String::from)
        .into();
    names.extend(s.percentiles.list.iter().map(|p| percentile_key(*p)));
    names.push("max".into());
    header(sheet, f, row, &names)?;
    for (l, d) in s.metrics() {
        let Some(d) = d else { continue };
        row += 1;
        text(sheet, row, 0, l.key)?;
        let mut values = vec![d.count as f64, d.mean, d.median, d.std, d.min];
        values.extend(
            s.percentiles
                .list
                .iter()
                .map(|p| d.percentile(*p).unwrap_or(f64::NAN)),
        );
        values.push(d.max);
        for (c, v) in values.into_iter().enumerate() {
            let format = if c == 0 { &f.int } else { &f.real };
            if v.is_finite() {
                sheet
                    .write_number_with_format(row, 1 + c as u16, v, format)
                    .map_err(xerr)?;
            }
        }
        // A percentile too few samples hold says so rather than leaving its cell empty.
        for (c, p) in s.percentiles.list.iter().enumerate() {
            if !d.holds(*p) {
                text(sheet, row, 6 + c as u16, d.not_held())?;
            }
        }
    }
    if let Some(sessions) = &s.sessions {
        conversations(sheet, f, row + 2, sessions)?;
    }
    sheet.set_column_width(0, 36).map_err(xerr)?;
    sheet
        .set_column_range_width(1, names.len() as u16, 11)
        .map_err(xerr)?;
    Ok(())
}

/// The Summary sheet's conversations, from `row` on: the lines summary.txt and report.html
/// show (label, text), then one row of numbers per round (turn number).
fn conversations(
    sheet: &mut Worksheet,
    f: &Formats,
    mut row: u32,
    s: &SessionSummary,
) -> Result<()> {
    header(sheet, f, row, &["conversations".into()])?;
    for (label, value) in s.lines() {
        row += 1;
        let label = label.trim_end_matches(':');
        text(sheet, row, 0, label)?;
        text(sheet, row, 1, value)?;
    }
    row += 2;
    let names = [
        "round",
        "requests",
        "planned_hit_share",
        "observed_hit_share",
        "diff_points",
        "planned_cached_tokens",
        "cached_tokens",
    ];
    header(sheet, f, row, &names.map(String::from))?;
    for r in &s.rounds {
        row += 1;
        let counts = [Some(f64::from(r.turn)), Some(r.requests as f64)];
        numbers(sheet, f, row, 0, counts)?;
        for (c, share) in [(2, r.planned_share()), (3, r.observed_share())] {
            if let Some(v) = share {
                sheet
                    .write_number_with_format(row, c, v, &f.share)
                    .map_err(xerr)?;
            }
        }
        let rest = [
            r.diff_points(),
            Some(r.planned_cached as f64),
            Some(r.observed_cached as f64),
        ];
        numbers(sheet, f, row, 4, rest)?;
    }
    Ok(())
}

/// One row per endpoint: its requests, latencies, throughput and prefix-cache hits.
pub fn per_endpoint(sheet: &mut Worksheet, f: &Formats, s: &Summary) -> Result<()> {
    let names = [
        "endpoint",
        "requests",
        "ok",
        "failed",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "e2el_p50_ms",
        "e2el_p99_ms",
        "output_tok_per_s",
        "active_s",
        "prompt_tokens",
        "cached_tokens",
        "expected_cached_tokens",
        "observed_hit_share",
        "expected_hit_share",
    ]
    .map(String::from);
    header(sheet, f, 0, &names)?;
    for (i, e) in s.per_endpoint.iter().enumerate() {
        let row = i as u32 + 1;
        text(sheet, row, 0, &e.endpoint)?;
        let prefix = &e.prefix;
        let counts = [e.requests, e.ok, e.failed].map(|n| Some(n as f64));
        let rest = [
            Some(e.output_throughput),
            Some(e.duration_s),
            Some(prefix.prompt_tokens() as f64),
            prefix.cached_tokens().map(|n| n as f64),
            prefix.expected_cached_tokens().map(|n| n as f64),
        ];
        let values = counts
            .into_iter()
            .chain(e.latency_percentiles())
            .chain(rest);
        numbers(sheet, f, row, 1, values)?;
        for (c, share) in [prefix.observed_share(), prefix.expected_share()]
            .into_iter()
            .enumerate()
        {
            if let Some(v) = share {
                sheet
                    .write_number_with_format(row, 13 + c as u16, v, &f.share)
                    .map_err(xerr)?;
            }
        }
    }
    sheet.set_column_width(0, 30).map_err(xerr)?;
    sheet
        .set_column_range_width(1, names.len() as u16 - 1, 12)
        .map_err(xerr)?;
    sheet.set_freeze_panes(1, 1).map_err(xerr)?;
    Ok(())
}

/// One row per scraped series of each target: mean, max, last and a counter's increase.
pub fn server_metrics(sheet: &mut Worksheet, f: &Formats, s: &Summary) -> Result<()> {
    let names = [
        "target",
        "server",
        "series",
        "mean",
        "max",
        "last",
        "increase",
        "scrapes",
        "failed_scrapes",
    ]
    .map(String::from);
    header(sheet, f, 0, &names)?;
    let mut row = 0u32;
    for t in s.server.iter().flatten() {
        for name in t.points.keys() {
            let Some(series) = t.series(name) else {
                continue;
            };
            row += 1;
            text(sheet, row, 0, &t.target)?;
            if let Some(server) = &t.server {
                text(sheet, row, 1, server)?;
            }
            text(sheet, row, 2, name)?;
            let values = [
                Some(series.mean),
                Some(series.max),
                Some(series.last),
                series.increase,
                Some(t.scrapes as f64),
                Some(t.failed as f64),
            ];
            numbers(sheet, f, row, 3, values)?;
        }
    }
    for (c, w) in [30.0, 10.0, 44.0].into_iter().enumerate() {
        sheet.set_column_width(c as u16, w).map_err(xerr)?;
    }
    sheet.set_column_range_width(3, 8, 12).map_err(xerr)?;
    sheet.set_freeze_panes(1, 0).map_err(xerr)?;
    Ok(())
}

/// run.json flattened: one row per setting, its path (`fleet.0.url`) and value.
pub fn configuration(sheet: &mut Worksheet, f: &Formats, run: &Value) -> Result<()> {
    header(sheet, f, 0, &["setting".into(), "value".into()])?;
    let mut rows = Vec::new();
    flatten(String::new(), run, &mut rows);
    for (i, (key, value)) in rows.iter().enumerate() {
        let row = i as u32 + 1;
        text(sheet, row, 0, key)?;
        match value {
            Value::Number(n) => number(sheet, f, row, 1, n.as_f64())?,
            Value::Bool(b) => {
                sheet.write_boolean(row, 1, *b).map_err(xerr)?;
            }
            Value::String(s) => {
                text(sheet, row, 1, s)?;
            }
            Value::Null => {}
            other => {
                text(sheet, row, 1, other.to_string())?;
            }
        }
    }
    sheet.set_column_width(0, 36).map_err(xerr)?;
    sheet.set_column_width(1, 60).map_err(xerr)?;
    sheet.set_freeze_panes(1, 0).map_err(xerr)?;
    Ok(())
}

/// Leaves of `v` with their dotted paths; an empty object or list is a leaf.
fn flatten(path: String, v: &Value, out: &mut Vec<(String, Value)>) {
    let join = |k: &str| match path.is_empty() {
        true => k.to_string(),
        false => format!("{path}.{k}"),
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                flatten(join(k), v, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                flatten(join(&i.to_string()), v, out);
            }
        }
        leaf => out.push((path, leaf.clone())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_json_flattens_to_dotted_paths() {
        let mut rows = Vec::new();
        let run = serde_json::json!({"a": 1, "fleet": [{"url": "u"}], "e": {}, "n": null});
        super::flatten(String::new(), &run, &mut rows);
        let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "e", "fleet.0.url", "n"]);
    }
}
