//! The plots' tests: synthetic reports (several sizes and repetitions,
//! both tools, a failed run) drawn and read back as XML, and the committed
//! report of a real run.

use super::*;
use serde_json::json;

/// A tool's values as bench.json has them.
fn values(runs: &[f64], failed: usize) -> serde_json::Value {
    let median = crate::bench::judgement::median(runs);
    json!({ "median": median, "min": null, "max": null, "runs": runs,
            "failed": failed, "printed_inf": 0, "setup_ms": [], "setup_ms_median": null })
}

/// A report of `test` at 64 B, 4 KiB, 64 KiB and 1 MiB, three
/// repetitions, perftest's 4 KiB run 2 failed: 11 perftest runs, 12 of
/// ours.
fn report(test: &str, program: &str, hosts: usize, delay: Option<u32>) -> serde_json::Value {
    let bw = test.contains("_bw");
    let results: Vec<_> = [64u64, 4096, 65536, 1 << 20]
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let base = if bw {
                2.0 * (i + 1) as f64
            } else {
                10f64.powi(i as i32 + 1)
            };
            let pt: Vec<f64> = if size == 4096 {
                vec![base, base * 1.1]
            } else {
                vec![base, base * 1.1, base * 0.9]
            };
            json!({
                "test": test, "perftest_program": program, "size": size, "iters": 100,
                "metric": if bw { "BW average [MB/sec]" } else { "t_typical [usec]" },
                "better": if bw { "higher" } else { "lower" },
                "perftest": values(&pt, usize::from(size == 4096)),
                "ours": values(&[base * 1.05, base * 0.95, base * 1.2], 0),
                "ratio_ours_perftest": 1.0, "pairs": 3, "pairs_ours_better": 2,
                "target": 1.0, "meets_target": true,
            })
        })
        .collect();
    json!({
        "route": "native path", "kernel": "6.1", "hosts": hosts, "delay_ms": delay,
        "iters": { "bandwidth": 100, "latency": 100 }, "reps": 3, "tx_depth": 128,
        "inline": null, "raw_dir": "/nowhere", "results": results,
    })
}

/// `value` parsed as a report and `test` drawn: the SVG text.
fn svg_of(value: serde_json::Value, test: &str) -> String {
    let report: Report = serde_json::from_value(value).expect("a report");
    render(&report, test).expect("drawn")
}

/// The texts of the document, trimmed (plotters puts each on its own
/// line inside `<text>`).
fn texts(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect()
}

/// The elements `tag` filled with `color`.
fn filled<'a>(
    doc: &'a roxmltree::Document,
    tag: &'a str,
    color: RGBColor,
) -> impl Iterator<Item = roxmltree::Node<'a, 'a>> + 'a {
    let fill = format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2);
    doc.descendants()
        .filter(move |n| n.has_tag_name(tag) && n.attribute("fill") == Some(fill.as_str()))
}

/// The run markers of each tool: perftest's circles of radius
/// [`MARKER`] (the legend's is larger), ours' triangles less the
/// legend's one.
fn run_markers<'a>(doc: &'a roxmltree::Document) -> (Vec<roxmltree::Node<'a, 'a>>, usize) {
    let circles: Vec<_> = filled(doc, "circle", PERFTEST)
        .filter(|n| n.attribute("r") == Some(&MARKER.to_string()))
        .collect();
    let triangles = filled(doc, "polygon", OURS).count();
    (circles, triangles - 1)
}

/// The numbers of the polyline stroked with `color` that has `points`
/// vertices (the median line; the legend's has 2).
fn median_line(doc: &roxmltree::Document, color: RGBColor, points: usize) -> bool {
    let stroke = format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2);
    doc.descendants().any(|n| {
        n.has_tag_name("polyline")
            && n.attribute("stroke") == Some(stroke.as_str())
            && n.attribute("points")
                .is_some_and(|p| p.split_whitespace().count() == points)
    })
}

#[test]
fn a_bandwidth_plot_has_its_title_series_runs_and_axes() {
    let svg = svg_of(report("write_bw", "ib_write_bw", 2, Some(5)), "write_bw");
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = texts(&doc);
    let has = |s: &str| texts.iter().any(|t| t.contains(s));
    assert!(
        has("write_bw: bandwidth — perftest ib_write_bw vs ours"),
        "{texts:?}"
    );
    assert!(has("two hosts") && has("5 ms netem delay"), "{texts:?}");
    assert!(has("3 repetitions"), "{texts:?}");
    // The legend names both series, the axes their quantity and unit.
    assert!(
        texts.contains(&"perftest (ib_write_bw)".to_string()),
        "{texts:?}"
    );
    assert!(texts.contains(&"ours (perf)".to_string()), "{texts:?}");
    assert!(has("message size [bytes, log2 scale]"), "{texts:?}");
    assert!(
        has("BW average [MB/s") && has("higher is better"),
        "{texts:?}"
    );
    for tick in ["64 B", "4 KiB", "64 KiB", "1 MiB"] {
        assert!(
            texts.contains(&tick.to_string()),
            "tick {tick} in {texts:?}"
        );
    }
    // One marker per run: 11 of perftest's (one failed), 12 of ours.
    let (circles, triangles) = run_markers(&doc);
    assert_eq!((circles.len(), triangles), (11, 12));
    // A line through the medians of each, one vertex per size.
    assert!(median_line(&doc, PERFTEST, 4) && median_line(&doc, OURS, 4));
    // The failed run is said, not silently left out.
    assert!(
        has("not drawn: perftest (ib_write_bw) 1 run failed at 4 KiB"),
        "{texts:?}"
    );
}

#[test]
fn a_latency_plot_says_microseconds_and_one_host() {
    let svg = svg_of(
        report("send_lat_async", "ib_send_lat", 1, None),
        "send_lat_async",
    );
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let texts = texts(&doc);
    let has = |s: &str| texts.iter().any(|t| t.contains(s));
    assert!(
        has("send_lat_async: latency — perftest ib_send_lat vs ours"),
        "{texts:?}"
    );
    assert!(has("one host") && !has("delay"), "{texts:?}");
    assert!(has("t_typical latency [µs], lower is better"), "{texts:?}");
    assert!(
        texts.contains(&"ours (perf --async)".to_string()),
        "{texts:?}"
    );
    assert_eq!(run_markers(&doc).0.len(), 11);
}

#[test]
fn runs_sit_in_run_order_beside_their_size() {
    // One size; perftest's runs 1, 3, 2 and ours' 5, 4, 6.
    let mut r = report("write_bw", "ib_write_bw", 1, None);
    r["results"] = json!([{
        "test": "write_bw", "perftest_program": "ib_write_bw", "size": 4096,
        "better": "higher", "perftest": values(&[1.0, 3.0, 2.0], 0),
        "ours": values(&[5.0, 4.0, 6.0], 0),
    }]);
    let svg = svg_of(r, "write_bw");
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let num = |n: &roxmltree::Node, a: &str| -> i32 {
        n.attribute(a)
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    let mut circles: Vec<(i32, i32)> = run_markers(&doc)
        .0
        .iter()
        .map(|n| (num(n, "cx"), num(n, "cy")))
        .collect();
    circles.sort();
    // Left to right in the order they ran; a higher value higher up.
    let ys: Vec<i32> = circles.iter().map(|c| c.1).collect();
    assert!(ys[1] < ys[2] && ys[2] < ys[0], "{circles:?}");
    // Every perftest marker left of ours (the legend's triangle is the
    // one in the top 100 pixels).
    let ours_left = filled(&doc, "polygon", OURS)
        .filter_map(|n| {
            let first = n.attribute("points")?.split_whitespace().next()?;
            let (x, y) = first.split_once(',')?;
            (y.parse::<i32>().ok()? > 100).then_some(x.parse::<i32>().ok()?)
        })
        .min()
        .expect("ours' markers");
    assert!(
        circles.iter().all(|c| c.0 < ours_left),
        "{circles:?} vs {ours_left}"
    );
}

#[test]
fn plots_are_written_beside_the_report() {
    let dir = std::env::temp_dir().join(format!("xtask-plot-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("a scratch directory");
    let json = dir.join("bench.json");
    let mut r = report("write_bw", "ib_write_bw", 1, None);
    let lat = report("write_lat", "ib_write_lat", 1, None);
    r["results"]
        .as_array_mut()
        .expect("results")
        .extend(lat["results"].as_array().expect("results").iter().cloned());
    fs::write(&json, r.to_string()).expect("written");
    let written = write_from_json(&json).expect("plotted");
    assert_eq!(
        written,
        [
            dir.join("bench-write_bw.svg"),
            dir.join("bench-write_lat.svg")
        ]
    );
    for p in &written {
        let svg = fs::read_to_string(p).expect("an SVG");
        roxmltree::Document::parse(&svg).expect("well-formed XML");
    }
    // What is not a report is refused, naming the file.
    fs::write(&json, "{\"results\": 3}").expect("written");
    let e = write_from_json(&json).unwrap_err().to_string();
    assert!(
        e.contains("bench.json") && e.contains("not a bench report"),
        "{e}"
    );
    // A report from before --hosts: one host.
    let mut old_report = report("write_bw", "ib_write_bw", 1, None);
    let fields = old_report.as_object_mut().expect("an object");
    fields.remove("hosts");
    fields.remove("delay_ms");
    fs::write(&json, old_report.to_string()).expect("written");
    write_from_json(&json).expect("plotted");
    let svg = fs::read_to_string(dir.join("bench-write_bw.svg")).expect("an SVG");
    assert!(svg.contains("one host"), "{svg}");
    let e = write_from_json(&dir.join("none.json"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cannot read") && e.contains("none.json"),
        "{e}"
    );
    fs::remove_dir_all(&dir).expect("cleaned up");
}

#[test]
fn the_committed_report_draws_every_run() {
    // The benchmark document's plots come from this report (`cargo xtask bench
    // --plot-only xtask/doc/bench.json`): every run of it is a marker.
    // So do the stream rows' (`xtask/doc/bench-stream.json`), TCP's runs
    // the squares of run size.
    for text in [
        include_str!("../../../doc/bench.json"),
        include_str!("../../../doc/bench-stream.json"),
    ] {
        let report: Report = serde_json::from_str(text).expect("a report");
        for test in report.tests() {
            let svg = render(&report, test).expect("drawn");
            let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
            let rows: Vec<&Row> = report.results.iter().filter(|r| r.test == test).collect();
            let count =
                |tool: Tool| -> usize { rows.iter().map(|&r| tool.values(r).runs.len()).sum() };
            let (circles, triangles) = run_markers(&doc);
            assert_eq!(
                (circles.len(), triangles),
                (count(Tool::Perftest), count(Tool::Ours)),
                "{test}"
            );
            let side = (2 * MARKER).to_string();
            let squares = filled(&doc, "rect", TCP)
                .filter(|n| n.attribute("width") == Some(side.as_str()))
                .count();
            assert_eq!(squares, count(Tool::Tcp), "{test}");
        }
    }
}

#[test]
fn the_report_written_is_the_report_read() {
    // json_report's values, read back as the plots read them.
    let mut cell = crate::bench::judgement::Cell::default();
    cell.push(1, 2.0);
    cell.push(2, 4.0);
    cell.failed = 1;
    let text = crate::bench::json_report::values_json(&cell);
    let v: Values = serde_json::from_str(&text).expect("readable");
    assert_eq!((v.runs, v.median, v.failed), (vec![2.0, 4.0], Some(3.0), 1));
}

#[test]
fn ticks_and_paths() {
    assert_eq!(
        size_ticks(&[64, 4096, 65536, 1 << 20]),
        [64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0]
    );
    assert_eq!(size_ticks(&[8]), [8.0]);
    assert_eq!(
        size_ticks(&[100, 4096]),
        [100.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0]
    );
    assert_eq!(
        value_ticks(2.7, 68.0),
        [3.0, 5.0, 7.0, 10.0, 20.0, 30.0, 50.0]
    );
    assert_eq!(
        value_ticks(1.0, 1000.0),
        [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
    );
    // The narrowest range a plot has (one value, padded by 1.25 both
    // ways) still gets four labels.
    assert_eq!(value_ticks(8.0, 12.5), [8.0, 9.0, 10.0, 12.0]);
    assert!(value_ticks(0.0, 1.0).is_empty());
    assert_eq!(number_text(0.5), "0.5");
    assert_eq!(number_text(20000.0), "20000");
    assert_eq!(
        svg_path(Path::new("target/bench.json"), "send_lat"),
        Path::new("target/bench-send_lat.svg")
    );
}

#[test]
fn a_stream_plot_has_rstream_ours_and_tcp() {
    let mut r = report("stream_bw", "rstream", 1, None);
    for (i, row) in r["results"].as_array_mut().unwrap().iter_mut().enumerate() {
        let base = 3.0 * (i + 1) as f64;
        row["tcp"] = values(&[base, base * 1.5], 0);
    }
    let svg = svg_of(r, "stream_bw");
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let texts = texts(&doc);
    let has = |s: &str| texts.iter().any(|t| t.contains(s));
    assert!(
        has("stream_bw: throughput — rstream vs ours, TCP for reference"),
        "{texts:?}"
    );
    for name in [
        "rstream (librdmacm)",
        "ours (rdma_safe::stream)",
        "TCP (rstream -T s)",
    ] {
        assert!(texts.contains(&name.to_string()), "{name} in {texts:?}");
    }
    assert!(has("throughput, both ways [MB/s"), "{texts:?}");
    // Every run a marker: 11 of rstream's, 12 of ours, 8 TCP squares
    // (and the legend's, one pixel larger).
    let (circles, triangles) = run_markers(&doc);
    assert_eq!((circles.len(), triangles), (11, 12));
    let squares: Vec<_> = filled(&doc, "rect", TCP).collect();
    let side = (2 * MARKER).to_string();
    let runs = squares
        .iter()
        .filter(|n| n.attribute("width") == Some(side.as_str()))
        .count();
    assert_eq!((runs, squares.len()), (8, 9), "{svg}");
    assert!(median_line(&doc, TCP, 4));
    // TCP's markers sit right of ours at each size: the rightmost square
    // is right of every triangle.
    let x_of = |n: &roxmltree::Node| -> f64 {
        n.attribute("x")
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    let right_square = squares.iter().map(x_of).fold(f64::MIN, f64::max);
    let right_triangle = filled(&doc, "polygon", OURS)
        .filter_map(|n| {
            let first = n.attribute("points")?.split_whitespace().next()?;
            first.split_once(',')?.0.parse::<f64>().ok()
        })
        .fold(f64::MIN, f64::max);
    assert!(
        right_square > right_triangle,
        "{right_square} vs {right_triangle}"
    );
}
