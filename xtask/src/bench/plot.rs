//! SVG plots of `bench.json`: one per test (row name such as `write_bw` or
//! `send_lat_async`), its metric against the message size, perftest and
//! ours, every run as a small marker and a line through the medians.
//!
//! A stream row's plot has a third series, its TCP reference (`rstream -T
//! s`), on the right of ours.
//!
//! One plot per test rather than one per metric: the tests of a metric
//! differ by an order of magnitude (read_bw against write_bw, 64 B
//! against 1 MiB latency), and a test is what a table row names and what
//! a reader compares — two tools, their spread and their medians. Four
//! tests on one axis would be eight series and hide the spread.
//!
//! The plots are drawn from `bench.json` itself, read back (see
//! [`write_from_json`]): a bench run and `--plot-only PATH` take the same
//! path, so an old report's plots can be drawn again without a VM.
//!
//! Both axes are logarithmic: the size doubles from point to point (log2,
//! labelled in bytes/KiB/MiB), and the metric spans three orders of
//! magnitude over the default sizes (latency 10 µs to 30 ms), where a
//! linear axis would flatten every small size onto zero.

use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Deserialize;

use super::table::size_name;
use crate::Result;

/// The members of `bench.json` the plots read (written by
/// [`super::json_report`]); the others are ignored.
#[derive(Debug, Deserialize)]
pub(super) struct Report {
    /// Reports from before `--hosts` have neither member: one host, no
    /// delay.
    #[serde(default = "one_host")]
    hosts: usize,
    delay_ms: Option<u32>,
    reps: usize,
    results: Vec<Row>,
}

fn one_host() -> usize {
    1
}

/// One test at one size.
#[derive(Debug, Deserialize)]
struct Row {
    test: String,
    perftest_program: String,
    size: u64,
    /// `higher` (bandwidth) or `lower` (latency).
    better: String,
    perftest: Values,
    ours: Values,
    /// Stream rows only: the TCP reference.
    #[serde(default)]
    tcp: Option<Values>,
}

/// One tool's values for a test and size.
#[derive(Debug, Deserialize)]
struct Values {
    median: Option<f64>,
    /// Every run that gave a value, in the order they ran.
    runs: Vec<f64>,
    #[serde(default)]
    failed: usize,
    #[serde(default)]
    printed_inf: usize,
}

/// Size of every plot in pixels: wide enough for a title of ~80
/// characters at the title's size.
const SIZE: (u32, u32) = (960, 600);
/// Okabe–Ito blue and vermillion: told apart with any colour vision, and
/// the markers' shapes differ too (circle, triangle) for greyscale.
const PERFTEST: RGBColor = RGBColor(0x00, 0x72, 0xB2);
const OURS: RGBColor = RGBColor(0xD5, 0x5E, 0x00);
/// Okabe–Ito bluish green, squares: the stream rows' TCP reference.
const TCP: RGBColor = RGBColor(0x00, 0x9E, 0x73);
/// A run's marker: radius (circle) or size (triangle), in pixels; the
/// legend's markers are one pixel larger so that tests can count the runs'
/// markers apart.
const MARKER: i32 = 4;
/// Where a run's marker sits beside its size, in pixels: perftest's runs
/// to the left, ours to the right, the first [`GAP_PX`] from the size and
/// each next one [`STEP_PX`] further out (a strip per tool), so that runs
/// with equal values, or perftest's and ours, do not hide each other.
const GAP_PX: f64 = 5.0;
const STEP_PX: f64 = 5.0;
/// The chart's margins and the value axis's label area, in pixels: what
/// [`SIZE`] leaves for the plotting area is what turns [`GAP_PX`] into
/// octaves of the size axis.
const MARGIN_LEFT: u32 = 20;
const MARGIN_RIGHT: u32 = 30;
const Y_LABELS: u32 = 90;
const FONT: &str = "sans-serif";

/// Reads the report at `json` and writes one SVG per test next to it
/// ([`svg_path`]); returns the files written, in the report's test order.
pub(super) fn write_from_json(json: &Path) -> Result<Vec<PathBuf>> {
    let text =
        fs::read_to_string(json).map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let report: Report = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a bench report: {e}", json.display()))?;
    let mut written = Vec::new();
    for test in report.tests() {
        let svg = render(&report, test)?;
        let path = svg_path(json, test);
        fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// `<dir>/<stem>-<test>.svg` for the report `<dir>/<stem>.json`: beside it,
/// named after it, e.g. `target/bench-write_bw.svg`.
fn svg_path(json: &Path, test: &str) -> PathBuf {
    let stem = json
        .file_stem()
        .map_or("bench".into(), |s| s.to_string_lossy());
    json.with_file_name(format!("{stem}-{test}.svg"))
}

impl Report {
    /// The tests in the order the report first names them.
    fn tests(&self) -> Vec<&str> {
        let mut tests: Vec<&str> = Vec::new();
        for r in &self.results {
            if !tests.contains(&r.test.as_str()) {
                tests.push(&r.test);
            }
        }
        tests
    }

    /// Where the runs ran, for the subtitle.
    fn hosts_text(&self) -> String {
        let mut s = match self.hosts {
            2 => "two hosts (servers on A, clients on B, across the link)".to_string(),
            _ => "one host (rxe0 talking to itself)".to_string(),
        };
        if let Some(ms) = self.delay_ms {
            s += &format!(", {ms} ms netem delay on each host's link");
        }
        s
    }
}

/// Which tool of a row.
#[derive(Debug, Clone, Copy)]
enum Tool {
    Perftest,
    Ours,
    /// A stream row's TCP reference.
    Tcp,
}

/// No values: what a row without a TCP reference has for it.
static NONE: Values = Values {
    median: None,
    runs: Vec::new(),
    failed: 0,
    printed_inf: 0,
};

impl Tool {
    fn values(self, r: &Row) -> &Values {
        match self {
            Tool::Perftest => &r.perftest,
            Tool::Ours => &r.ours,
            Tool::Tcp => r.tcp.as_ref().unwrap_or(&NONE),
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Tool::Perftest => PERFTEST,
            Tool::Ours => OURS,
            Tool::Tcp => TCP,
        }
    }

    /// The slot of run `i` of `n` in its strip: counted outwards from the
    /// size, so that perftest's strip (on the left) is reversed and both
    /// read left to right in the order the runs ran; TCP's strip follows
    /// ours on the right, a slot after the widest strip (`most` runs).
    fn slot(self, i: usize, n: usize, most: usize) -> f64 {
        match self {
            Tool::Perftest => (n - 1 - i) as f64,
            Tool::Ours => i as f64,
            Tool::Tcp => (most + 1 + i) as f64,
        }
    }

    /// The x position of this tool's `slot`-th point at `size` (a run's
    /// [`Tool::slot`], or a fraction for the ends of the median's dash), on an axis with
    /// `octave_px` pixels per doubling: the size moved to the tool's side,
    /// see [`GAP_PX`].
    fn x(self, size: u64, slot: f64, octave_px: f64) -> f64 {
        let side = match self {
            Tool::Perftest => -1.0,
            Tool::Ours | Tool::Tcp => 1.0,
        };
        size as f64 * (side * (GAP_PX + slot * STEP_PX) / octave_px).exp2()
    }
}

/// The plot of `test` as an SVG document.
fn render(report: &Report, test: &str) -> Result<String> {
    let rows: Vec<&Row> = report.results.iter().filter(|r| r.test == test).collect();
    let first = rows
        .first()
        .ok_or_else(|| format!("bench plot: no results for {test}"))?;
    let bw = first.better == "higher";
    let mut svg = String::new();
    draw(report, test, &rows, bw, &mut svg)
        .map_err(|e| format!("bench plot of {test}: cannot draw: {e}"))?;
    Ok(svg)
}

/// What a run's value may be on a log axis: finite and above zero.
fn plottable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// Draws the plot of `rows` (one test) into `svg`.
fn draw(
    report: &Report,
    test: &str,
    rows: &[&Row],
    bw: bool,
    svg: &mut String,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let first = rows[0];
    let stream = rows.iter().any(|r| r.tcp.is_some());
    let tools: &[Tool] = if stream {
        &[Tool::Perftest, Tool::Ours, Tool::Tcp]
    } else {
        &[Tool::Perftest, Tool::Ours]
    };
    let ours_program = if stream {
        "rdma_safe::stream"
    } else if test.ends_with("_async") {
        "perf --async"
    } else if test.ends_with("_cm") {
        "perf -R"
    } else {
        "perf"
    };
    let mut names = vec![
        if stream {
            "rstream (librdmacm)".to_string()
        } else {
            format!("perftest ({})", first.perftest_program)
        },
        format!("ours ({ours_program})"),
    ];
    if stream {
        names.push("TCP (rstream -T s)".to_string());
    }

    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let title = if stream {
        format!(
            "{test}: {} — rstream vs ours, TCP for reference",
            if bw {
                "throughput"
            } else {
                "ping-pong latency"
            }
        )
    } else {
        format!(
            "{test}: {} — perftest {} vs ours",
            if bw { "bandwidth" } else { "latency" },
            first.perftest_program
        )
    };
    let area = root.titled(&title, (FONT, 26).into_font().style(FontStyle::Bold))?;
    let area = area.titled(
        &format!(
            "{}; {} repetitions per tool and size{}",
            report.hosts_text(),
            report.reps,
            // Three names fill the legend's row: its note comes up here.
            if stream {
                "; markers: runs, lines: medians"
            } else {
                ""
            }
        ),
        (FONT, 18).into_font().color(&RGBColor(0x40, 0x40, 0x40)),
    )?;
    // The legend is a row of its own above the chart, not a box inside
    // it, so that it never covers a point.
    let (legend, chart_area) = area.split_vertically(34);
    let text = (FONT, 17).into_font();
    let mut x = 90;
    for (tool, name) in tools.iter().zip(&names) {
        let y = 16;
        legend.draw(&PathElement::new(
            [(x, y), (x + 36, y)],
            tool.color().stroke_width(2),
        ))?;
        // The legend's marker is one pixel larger than a run's (tests
        // count the runs' markers by their size).
        let style = tool.color().mix(0.75).filled();
        match tool {
            Tool::Perftest => legend.draw(&Circle::new((x + 18, y), MARKER + 1, style))?,
            Tool::Ours => legend.draw(&TriangleMarker::new((x + 18, y), MARKER + 2, style))?,
            Tool::Tcp => {
                let h = MARKER + 1;
                legend.draw(&Rectangle::new(
                    [(x + 18 - h, y - h), (x + 18 + h, y + h)],
                    style,
                ))?
            }
        }
        legend.draw(&Text::new(name.as_str(), (x + 44, y - 9), text.clone()))?;
        x += 44 + 9 * name.len() as i32 + 30;
    }
    if !stream {
        legend.draw(&Text::new(
            "markers: every run · lines: medians",
            (x + 10, 7),
            text.clone().color(&RGBColor(0x40, 0x40, 0x40)),
        ))?;
    }

    // The ranges: every size, every plottable value, with room around.
    let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
    let (smin, smax) = (
        sizes.iter().copied().min().unwrap_or(1) as f64,
        sizes.iter().copied().max().unwrap_or(1) as f64,
    );
    let values: Vec<f64> = rows
        .iter()
        .flat_map(|r| {
            tools.iter().flat_map(move |t| {
                let v = t.values(r);
                v.runs.iter().copied().chain(v.median)
            })
        })
        .filter(|&v| plottable(v))
        .collect();
    let (vmin, vmax) = match (
        values.iter().copied().reduce(f64::min),
        values.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => (lo, hi),
        // Nothing to draw: an empty chart with a decade, and the note
        // below says why.
        _ => (1.0, 10.0),
    };
    // Room on both sides of the sizes for the widest strip of runs: `pad`
    // octaves of an axis `span + 2 pad` octaves wide over `width` pixels
    // hold `strip` pixels when pad >= strip * span / (width - 2 strip); at
    // least 0.6 octave (a test of one size, the atomics' 8 B, gets 1.2).
    let width = f64::from(SIZE.0 - MARGIN_LEFT - MARGIN_RIGHT - Y_LABELS);
    let most_runs = rows
        .iter()
        .flat_map(|r| tools.iter().map(move |t| t.values(r).runs.len()))
        .max()
        .unwrap_or(1);
    // The right side holds ours and, for a stream row, TCP after a slot.
    let slots = if stream { 2 * most_runs + 1 } else { most_runs };
    let strip = GAP_PX + slots.saturating_sub(1) as f64 * STEP_PX + 2.0 * f64::from(MARKER);
    let span = (smax / smin).log2();
    let pad = (strip * span / (width - 2.0 * strip)).max(0.6);
    let x_range = (smin * (-pad).exp2())..(smax * pad.exp2());
    let octave_px = width / (span + 2.0 * pad);
    let y_range = (vmin / 1.25)..(vmax * 1.25);
    let x_ticks = size_ticks(&sizes);
    let y_ticks = value_ticks(y_range.start, y_range.end);

    let mut chart = ChartBuilder::on(&chart_area)
        .margin_left(MARGIN_LEFT)
        .margin_right(MARGIN_RIGHT)
        .margin_top(10)
        // Below the axis: room for the line that says what is not drawn.
        .margin_bottom(28)
        .x_label_area_size(60)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(
            x_range.log_scale().base(2.0).with_key_points(x_ticks),
            y_range.log_scale().with_key_points(y_ticks),
        )?;
    let y_desc = match (stream, bw) {
        (false, true) => "BW average [MB/s, MB = 2^20 B], higher is better",
        (false, false) => "t_typical latency [µs], lower is better",
        (true, true) => "throughput, both ways [MB/s, MB = 2^20 B], higher is better",
        (true, false) => "usec/xfer: half a round trip [µs], lower is better",
    };
    chart
        .configure_mesh()
        .x_desc("message size [bytes, log2 scale]")
        .y_desc(y_desc)
        .x_label_formatter(&|v| size_name(v.round() as u64))
        .y_label_formatter(&|v| number_text(*v))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 16))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(0xDD, 0xDD, 0xDD))
        .draw()?;

    for &tool in tools {
        // The line through the medians (sizes without one are skipped), at
        // the true sizes: both tools' lines share their x, so the gap
        // between them is the gap between the medians; a line from strip
        // to strip would show perftest ahead wherever the metric climbs.
        let medians: Vec<(u64, f64, usize)> = rows
            .iter()
            .filter_map(|r| {
                let v = tool.values(r);
                let m = v.median?;
                plottable(m).then_some((r.size, m, v.runs.len()))
            })
            .collect();
        chart.draw_series(LineSeries::new(
            medians.iter().map(|&(size, m, _)| (size as f64, m)),
            tool.color().stroke_width(2),
        ))?;
        // And a dash at the median across the tool's strip of runs, to
        // read the median against the runs it is the median of.
        chart.draw_series(medians.iter().map(|&(size, m, n)| {
            let first = tool
                .slot(0, n, most_runs)
                .min(tool.slot(n - 1, n, most_runs));
            let ends = [first - 0.6, first + n as f64 - 0.4]
                .map(|slot| (tool.x(size, slot, octave_px), m));
            PathElement::new(ends, tool.color().stroke_width(2))
        }))?;
        // Every run's value, one marker each: perftest a circle, ours a
        // triangle, so that shape tells them apart too.
        let runs = rows.iter().flat_map(|r| {
            let n = tool.values(r).runs.len();
            tool.values(r)
                .runs
                .iter()
                .enumerate()
                .filter(|&(_, &v)| plottable(v))
                .map(move |(i, &v)| (tool.x(r.size, tool.slot(i, n, most_runs), octave_px), v))
        });
        let style = tool.color().mix(0.75).filled();
        match tool {
            Tool::Perftest => {
                chart.draw_series(runs.map(|at| Circle::new(at, MARKER, style)))?;
            }
            Tool::Ours => {
                chart.draw_series(runs.map(|at| TriangleMarker::new(at, MARKER + 1, style)))?;
            }
            Tool::Tcp => {
                let half = [(-MARKER, -MARKER), (MARKER, MARKER)];
                chart.draw_series(
                    runs.map(|at| EmptyElement::at(at) + Rectangle::new(half, style)),
                )?;
            }
        }
    }

    // What is not drawn, said under the chart rather than left out.
    let missing = missing_text(rows, tools, &names);
    if !missing.is_empty() {
        root.draw(&Text::new(
            missing,
            (20, SIZE.1 as i32 - 22),
            (FONT, 15).into_font().color(&RGBColor(0x80, 0x20, 0x20)),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// The runs a plot leaves out, e.g. `not drawn: perftest (ib_send_lat)
/// 1 run printed inf at 64 B`; empty when every run is drawn.
fn missing_text(rows: &[&Row], tools: &[Tool], names: &[String]) -> String {
    let mut parts = Vec::new();
    for r in rows {
        for (tool, name) in tools.iter().zip(names) {
            let v = tool.values(r);
            let dropped = v.runs.iter().filter(|&&x| !plottable(x)).count();
            for (n, what) in [
                (v.failed, "failed"),
                (v.printed_inf, "printed inf"),
                (dropped, "gave no positive value"),
            ] {
                if n > 0 {
                    let runs = if n == 1 { "run" } else { "runs" };
                    parts.push(format!("{name} {n} {runs} {what} at {}", size_name(r.size)));
                }
            }
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("not drawn: {}", parts.join("; "))
    }
}

/// The size axis's labels: powers of two between the smallest and largest
/// size, every `step`-th so that at most 8 are labelled, and every
/// measured size.
fn size_ticks(sizes: &[u64]) -> Vec<f64> {
    let lo = sizes.iter().copied().min().unwrap_or(1).max(1);
    let hi = sizes.iter().copied().max().unwrap_or(1).max(1);
    let (e_lo, e_hi) = (lo.ilog2(), hi.next_power_of_two().ilog2());
    let step = (e_hi - e_lo).div_ceil(7).max(1);
    let mut ticks: Vec<u64> = (e_lo..=e_hi)
        .step_by(step as usize)
        .map(|e| 1u64 << e)
        .filter(|&p| p >= lo && p <= hi)
        .chain(sizes.iter().copied())
        .collect();
    ticks.sort_unstable();
    ticks.dedup();
    ticks.into_iter().map(|s| s as f64).collect()
}

/// The value axis's labels between `lo` and `hi`: 1-2-5 per decade, or the
/// first finer series that gives five, so that a narrow range (latency
/// within 10%) still has numbers to read it by.
fn value_ticks(lo: f64, hi: f64) -> Vec<f64> {
    const SERIES: [&[f64]; 4] = [
        &[1.0, 2.0, 5.0],
        &[1.0, 2.0, 3.0, 5.0, 7.0],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[
            1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0,
        ],
    ];
    if !(lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let mut ticks = Vec::new();
    for mantissas in SERIES {
        ticks = (lo.log10().floor() as i32..=hi.log10().ceil() as i32)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|&v| v >= lo && v <= hi)
            .collect();
        if ticks.len() >= 5 {
            break;
        }
    }
    ticks
}

/// A tick's number: no trailing zeros (`0.5`, `2`, `1.2`, `20000`).
fn number_text(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests;
