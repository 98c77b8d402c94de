//! The pieces every page of the report is made of: HTML escaping, a titled section, and
//! the per-second and scatter series the charts take.

use std::fmt::Write as _;

/// The marker of an empty chart: [`section`] gathers these into one line.
pub const EMPTY: &str = "<p class=\"empty\">";

/// `s` with HTML's special characters escaped, and control and bidirectional characters
/// (a server's model name, an error it wrote) as their Rust escapes.
pub fn escape(s: &str) -> String {
    crate::printable::printable_lines(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A titled section: its note, then its tables and charts side by side; charts with nothing
/// to draw are named on one line below instead of each holding a chart's place.
pub fn section(out: &mut String, id: &str, title: &str, note: &str, body: &[String]) {
    let _ = write!(out, "<section id=\"{id}\">\n<h2>{}</h2>\n", escape(title));
    if !note.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    let (empty, drawn): (Vec<&String>, Vec<&String>) =
        body.iter().partition(|b| b.starts_with(EMPTY));
    if !drawn.is_empty() {
        let drawn: Vec<&str> = drawn.iter().map(|b| b.as_str()).collect();
        let _ = writeln!(out, "<div class=\"grid\">\n{}\n</div>", drawn.join("\n"));
    }
    if !empty.is_empty() {
        let names: Vec<&str> = empty
            .iter()
            .map(|b| b[EMPTY.len()..].trim_end_matches("</p>"))
            .collect();
        let _ = writeln!(out, "{EMPTY}No data to draw: {}.</p>", names.join("; "));
    }
    out.push_str("</section>\n");
}

/// Plot points of (run seconds, ms) pairs.
pub fn scatter(v: &[(f32, f32)]) -> Vec<(f64, f64)> {
    v.iter()
        .map(|&(x, y)| (f64::from(x), f64::from(y)))
        .collect()
}

/// (run seconds, value) of per-second buckets.
pub fn per_second(series: &[f64]) -> Vec<(f64, f64)> {
    per_second_over(series, series.len())
}

/// [`per_second`] over the run's first `seconds` seconds: zeros after the series' last
/// bucket, so a line falls back to zero instead of ending where its events did.
pub fn per_second_over(series: &[f64], seconds: usize) -> Vec<(f64, f64)> {
    (0..seconds.max(series.len()))
        .map(|i| (i as f64, series.get(i).copied().unwrap_or(0.0)))
        .collect()
}
