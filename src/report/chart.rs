//! The pages' charts: SVG drawn with plotters and inlined, each with its legend below it in
//! HTML (a legend inside the plot area covers data wherever it is put), tick labels written
//! as a reader writes numbers (`120k`, `0.5`, never `120000.0`), and CDFs on a logarithmic
//! axis when their curves' medians are more than 10x apart (run A 100x faster than run B is
//! still a curve, not a vertical line at the left edge).

use std::fmt::Write as _;
use std::ops::Range;

use hdrhistogram::Histogram;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::data::thin;
use super::parts::{escape, EMPTY};

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
/// CDFs whose medians are this many times apart are drawn on a logarithmic axis.
const LOG_SPAN: f64 = 10.0;

/// How a series is drawn.
#[derive(Clone, Copy, PartialEq)]
pub enum Mark {
    Line,
    Dots,
    /// A wide pale band: a reference that a thin line drawn over it (e.g. "sent" over
    /// "scheduled") leaves visible where the two agree.
    Band,
    /// Large dots for a few values at whole-number x (per round): nothing is drawn between
    /// them, and the x axis labels whole numbers only.
    Points,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
}

impl Series {
    pub fn line(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series::new(name, points, Mark::Line)
    }

    pub fn dots(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series::new(name, points, Mark::Dots)
    }

    pub fn band(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series::new(name, points, Mark::Band)
    }

    /// Values at whole-number x: see [`Mark::Points`].
    pub fn points(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series::new(name, points, Mark::Points)
    }

    fn new(name: &str, points: Vec<(f64, f64)>, mark: Mark) -> Series {
        Series {
            name: name.into(),
            points,
            mark,
        }
    }
}

fn empty(title: &str) -> String {
    format!("{EMPTY}{}</p>", escape(title))
}

/// An x-y chart on linear axes, with its legend; an [`EMPTY`] note when there is nothing.
pub fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    plot(title, x_label, y_label, series, false)
}

/// A CDF chart: as [`chart`], on a logarithmic x axis when its curves' medians lie more than
/// [`LOG_SPAN`] apart (run A 100x faster than run B); values below half the lowest curve's
/// first percentile are drawn at that floor.
pub fn cdf_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let at = |s: &Series, q: f64| s.points.iter().find(|p| p.1 >= q).map(|p| p.0);
    let medians: Vec<f64> = series.iter().filter_map(|s| at(s, 0.5)).collect();
    let lo = medians.iter().copied().fold(f64::MAX, f64::min);
    let hi = medians.iter().copied().fold(f64::MIN, f64::max);
    if !(lo > 0.0 && hi / lo > LOG_SPAN) {
        return plot(title, x_label, y_label, series, false);
    }
    let floor = series
        .iter()
        .filter_map(|s| at(s, 0.01))
        .filter(|&x| x > 0.0)
        .fold(lo, f64::min)
        / 2.0;
    let lifted: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().map(|&(x, y)| (x.max(floor), y)).collect(),
            mark: s.mark,
        })
        .collect();
    plot(
        title,
        &format!("{x_label} (log scale)"),
        y_label,
        &lifted,
        true,
    )
}

fn plot(title: &str, x_label: &str, y_label: &str, series: &[Series], log_x: bool) -> String {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return empty(title);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    let mut svg = String::new();
    let y = y0..y1 * 1.05;
    let whole_x = series.iter().any(|s| s.mark == Mark::Points);
    let ticks = Ticks {
        x: match whole_x {
            true => Step::Whole,
            false => Step::Span(x1 - x0),
        },
        y: Step::Span(y1 * 1.05 - y0),
    };
    let drawn = if log_x {
        draw(
            &mut svg,
            (title, x_label, y_label),
            series,
            (x0..x1 * 1.05).log_scale(),
            y,
            ticks,
        )
    } else if whole_x {
        let x = x0 - 0.5..x1 + 0.5;
        draw(&mut svg, (title, x_label, y_label), series, x, y, ticks)
    } else {
        let pad = (x1 - x0) * 0.02;
        let x = x0..x1 + pad;
        draw(&mut svg, (title, x_label, y_label), series, x, y, ticks)
    };
    match drawn {
        Ok(()) => format!("<figure>{svg}{}</figure>", legend(series)),
        Err(e) => format!("{EMPTY}{}: {}</p>", escape(title), escape(&e)),
    }
}

/// What the tick labels of an axis must tell apart.
#[derive(Clone, Copy)]
enum Step {
    /// Ticks across this span: as many decimals as the span needs (175.2, not 175).
    Span(f64),
    /// Whole numbers only (rounds); ticks between them are left blank.
    Whole,
}

#[derive(Clone, Copy)]
struct Ticks {
    x: Step,
    y: Step,
}

impl Step {
    fn label(self, v: f64) -> String {
        match self {
            Step::Whole if (v - v.round()).abs() > 1e-9 => String::new(),
            Step::Whole => tick(v.round()),
            Step::Span(span) => tick_across(v, span),
        }
    }
}

fn draw<X>(
    svg: &mut String,
    (title, x_label, y_label): (&str, &str, &str),
    series: &[Series],
    x: X,
    y: Range<f64>,
    ticks: Ticks,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| ticks.x.label(*v))
        .y_label_formatter(&|v| ticks.y.label(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| err(&e))?;
    // Bands first, so the lines they stand behind stay on top.
    let mut order: Vec<(usize, &Series)> = series.iter().enumerate().collect();
    order.sort_by_key(|(_, s)| s.mark != Mark::Band);
    for (i, s) in order {
        let color = COLORS[i % COLORS.len()];
        match s.mark {
            Mark::Line => c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            )),
            Mark::Band => c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.mix(0.3).stroke_width(9),
            )),
            Mark::Dots => c.draw_series(
                thin(&s.points, MAX_POINTS)
                    .into_iter()
                    .map(|p| Circle::new(p, 2, color.mix(0.5).filled())),
            ),
            Mark::Points => c.draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 4, color.mix(0.8).filled())),
            ),
        }
        .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

/// The legend under a chart: a swatch in each series' colour and mark, and its name; none
/// for a single unnamed series.
fn legend(series: &[Series]) -> String {
    if series.len() < 2 && series.first().is_none_or(|s| s.name.is_empty()) {
        return String::new();
    }
    let mut out = String::from("<figcaption class=\"legend\">");
    for (i, s) in series.iter().enumerate() {
        let RGBColor(r, g, b) = COLORS[i % COLORS.len()];
        let style = match s.mark {
            Mark::Line => format!("height:3px;background:rgb({r},{g},{b})"),
            Mark::Band => format!("height:9px;background:rgba({r},{g},{b},0.3)"),
            Mark::Dots | Mark::Points => {
                format!("height:7px;width:7px;border-radius:50%;background:rgb({r},{g},{b})")
            }
        };
        let _ = write!(
            out,
            "<span><i style=\"{style}\"></i>{}</span>",
            escape(&s.name)
        );
    }
    out.push_str("</figcaption>");
    out
}

/// A tick label: at most three significant decimals, no trailing zeros, thousands as `k`
/// and millions as `M`, below a thousandth as `1e-4`.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if a > 0.0 && a < 1e-3 {
        return format!("{v:.0e}");
    }
    let (scaled, unit) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let decimals = match scaled.abs() {
        x if x >= 100.0 || x == 0.0 => 0,
        x if x >= 10.0 => 1,
        x if x >= 1.0 => 2,
        _ => 3,
    };
    format!("{}{unit}", trimmed(scaled, decimals))
}

/// A tick label on an axis whose ticks span `span`: as [`tick`], with the decimals that tell
/// neighbouring ticks apart (about a tenth of the span each), so a narrow range reads
/// "175.2 175.4", not "175 175"; a thousands or millions unit is dropped where the ticks
/// would need more than two decimals of it.
pub fn tick_across(v: f64, span: f64) -> String {
    let step = span.abs() / 10.0;
    if !(step > 0.0 && step.is_finite()) {
        return tick(v);
    }
    let unit = match v.abs() {
        a if a >= 1e6 => 1e6,
        a if a >= 1e4 => 1e3,
        _ => 1.0,
    };
    let needed = |unit: f64| (-(step / unit).log10()).ceil().max(0.0) as usize;
    if unit > 1.0 && needed(unit) > 2 {
        return trimmed(v, needed(1.0).min(9));
    }
    let plain = tick(v);
    let shown = plain.trim_end_matches(['k', 'M']);
    let have = shown.split_once('.').map_or(0, |(_, d)| d.len());
    if needed(unit) <= have || v.abs() < 1e-3 && v != 0.0 {
        return plain;
    }
    let suffix = &plain[shown.len()..];
    format!("{}{suffix}", trimmed(v / unit, needed(unit).min(9)))
}

/// `v` with `decimals`, trailing zeros (and a bare point) dropped, `-0` as `0`.
fn trimmed(v: f64, decimals: usize) -> String {
    let mut s = format!("{v:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// A bar chart of counts per bin.
pub fn histogram(title: &str, x_label: &str, values: &[f32], bins: usize) -> String {
    if values.is_empty() {
        return empty(title);
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

/// CDF points of an HDR histogram of nanoseconds, in milliseconds (its maximum included).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_as_numbers() {
        let cases = [
            (120000.0, "120k"),
            (0.0, "0"),
            (2.5, "2.5"),
            (10.0, "10"),
            (0.125, "0.125"),
            (35.0, "35"),
            (1500.0, "1500"),
            (2_500_000.0, "2.5M"),
            (-5.0, "-5"),
            (0.0001, "1e-4"),
        ];
        for (v, want) in cases {
            assert_eq!(tick(v), want, "{v}");
        }
    }

    /// Neighbouring ticks of a narrow range read apart (the "175 175 175 176").
    #[test]
    fn ticks_across_a_narrow_range_are_told_apart() {
        let labels = |from: f64, step: f64, span: f64| -> Vec<String> {
            (0..=10)
                .map(|i| tick_across(from + f64::from(i) * step, span))
                .collect()
        };
        for (from, step, span) in [
            (175.0, 0.2, 2.0),
            (175.0, 0.02, 0.2),
            (0.5, 0.001, 0.01),
            (175_000.0, 2.0, 20.0),
            (2_000_000.0, 100.0, 1000.0),
        ] {
            let got = labels(from, step, span);
            let mut unique = got.clone();
            unique.dedup();
            assert_eq!(unique.len(), got.len(), "{got:?}");
        }
        assert_eq!(tick_across(175.2, 2.0), "175.2");
        assert_eq!(tick_across(120_000.0, 100_000.0), "120k");
        assert_eq!(tick_across(175_002.0, 20.0), "175002");
        assert_eq!(
            tick_across(2.5, 10.0),
            "2.5",
            "wide ranges keep tick()'s own digits"
        );
        assert_eq!(Step::Whole.label(2.5), "");
        assert_eq!(Step::Whole.label(3.0), "3");
    }

    /// The text labels of a drawn chart, title and axis names left out.
    fn labels(page: &str) -> Vec<String> {
        page.split("</text>")
            .filter_map(|t| t.rsplit_once('>').map(|(_, l)| l.trim().to_string()))
            .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .collect()
    }

    #[test]
    fn drawn_charts_label_narrow_ranges_apart_and_rounds_by_whole_numbers() {
        let narrow: Vec<(f64, f64)> = (0..50)
            .map(|i| (1000.0 + f64::from(i), 175.0 + f64::from(i) * 0.02))
            .collect();
        let page = chart("t", "s", "ms", &[Series::line("", narrow)]);
        let got = labels(&page);
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert!(got.len() > 6 && unique.len() == got.len(), "{got:?}");

        let rounds: Vec<(f64, f64)> = (1..=4).map(|t| (f64::from(t), 50.0)).collect();
        let page = chart("t", "round", "%", &[Series::points("planned", rounds)]);
        // The series' colour strokes no line (the axes are black polylines).
        assert!(
            !page.contains("stroke=\"#1F77B4\""),
            "rounds are dots, not lines"
        );
        assert_eq!(page.matches("<circle").count(), 4);
        let x: Vec<String> = labels(&page)
            .into_iter()
            .filter(|l| l.contains('.'))
            .collect();
        assert!(x.is_empty(), "no fractional round: {x:?}");
        for round in ["1", "2", "3", "4"] {
            assert!(labels(&page).iter().any(|l| l == round), "{round}");
        }
    }

    #[test]
    fn a_cdf_spanning_decades_goes_on_a_log_axis_and_legends_sit_below() {
        let a: Vec<(f64, f64)> = (1..=50)
            .map(|i| (f64::from(i), f64::from(i) / 50.0))
            .collect();
        let b: Vec<(f64, f64)> = a.iter().map(|&(x, y)| (x * 1000.0, y)).collect();
        let page = cdf_chart(
            "TTFT CDF",
            "ms",
            "fraction",
            &[Series::line("A", a.clone()), Series::line("B", b)],
        );
        assert!(page.contains("ms (log scale)"));
        assert!(page.contains("<figcaption class=\"legend\">"));
        assert!(
            page.find("</svg>") < page.find("<figcaption"),
            "legend below the plot"
        );
        let narrow = cdf_chart("TTFT CDF", "ms", "fraction", &[Series::line("A", a)]);
        assert!(!narrow.contains("log scale"));
        assert!(chart("x", "s", "n", &[]).starts_with(EMPTY));
    }
}
