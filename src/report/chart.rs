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
    let drawn = if log_x {
        draw(
            &mut svg,
            title,
            x_label,
            y_label,
            series,
            (x0..x1 * 1.05).log_scale(),
            y,
        )
    } else {
        let pad = (x1 - x0) * 0.02;
        draw(&mut svg, title, x_label, y_label, series, x0..x1 + pad, y)
    };
    match drawn {
        Ok(()) => format!("<figure>{svg}{}</figure>", legend(series)),
        Err(e) => format!("{EMPTY}{}: {}</p>", escape(title), escape(&e)),
    }
}

fn draw<X>(
    svg: &mut String,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x: X,
    y: Range<f64>,
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
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
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
            Mark::Dots => {
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
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "-0" {
        s = "0".into();
    }
    format!("{s}{unit}")
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
