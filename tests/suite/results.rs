//! Results: summary figures against independently computed references, timing against the
//! mock's settings, report.html / results.xlsx contents, `report DIR` and `report A B`.

use std::path::{Path, PathBuf};

use calamine::{open_workbook, Reader, Xlsx};
use clap::Parser;
use serde_json::{json, Value};

use llmreplay::cli::{Cli, Command};

use crate::common;
use common::{bin, read_jsonl, temp_dir};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summary")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts two numbers agree within an absolute and a relative tolerance.
fn close(what: &str, got: &Value, want: &Value, abs: f64, rel: f64) {
    let (g, w) = (got.as_f64().unwrap_or(f64::NAN), want.as_f64().unwrap());
    assert!(
        (g - w).abs() <= abs + rel * w.abs(),
        "{what}: got {g}, reference {w}"
    );
}

/// The figures of tests/fixtures/summary/requests.jsonl equal numpy's (reference.json, made by
/// make_reference.py beside it): exact statistics to 1e-6 ms (record times round-trip through
/// integer nanoseconds), ITL to 0.1 % (HDR histograms, 3 significant digits).
#[test]
fn fixture_summary_matches_numpy_reference() {
    let dir = temp_dir("fixture");
    std::fs::copy(fixture().join("requests.jsonl"), dir.join("requests.jsonl")).unwrap();
    let cli = Cli::parse_from([
        "llmreplay",
        "report",
        dir.to_str().unwrap(),
        "--goodput",
        "ttft:60",
        "tpot:8",
        "e2el:900",
        "--percentiles",
        "99.9",
        // numpy's figures for every percentile, however few samples lie beyond it.
        "--bound",
        "tail-samples=0",
    ]);
    let Command::Report(args) = cli.command else {
        panic!("report")
    };
    let opts = llmreplay::plan::render_options(&args.results).unwrap();
    let summary = llmreplay::report::render(&dir, &dir.join("requests.jsonl"), &opts)
        .unwrap()
        .to_json();
    let reference = read_json(&fixture().join("reference.json"));
    assert_eq!(summary["requests"], reference["requests"]);
    let lengths = &summary["input_length_match"];
    for (key, want) in reference["input_length_match"].as_object().unwrap() {
        assert_eq!(&lengths[key], want, "input_length_match.{key}");
    }
    // Its tokens, and how many the server's counts were off, from the records themselves.
    let records = read_jsonl(&dir.join("requests.jsonl"));
    let checked = records.iter().filter(|r| {
        r["error"].is_null() && r["input_tokens"].is_u64() && r["prompt_tokens"].is_u64()
    });
    let (target, off) = checked.fold((0, 0), |(t, o), r| {
        let (want, got) = (
            r["input_tokens"].as_u64().unwrap(),
            r["prompt_tokens"].as_u64().unwrap(),
        );
        (t + want, o + want.abs_diff(got))
    });
    assert_eq!(
        (&lengths["target_tokens"], &lengths["abs_diff_tokens"]),
        (&json!(target), &json!(off))
    );
    for key in [
        "input_tokens",
        "output_tokens",
        "good_requests",
        "late_sends",
    ] {
        assert_eq!(summary[key], reference[key], "{key}");
    }
    for key in [
        "duration_s",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "goodput",
        "max_output_tokens_per_s",
    ] {
        close(key, &summary[key], &reference[key], 1e-6, 1e-9);
    }
    for metric in [
        "ttft_ms",
        "ttft_from_schedule_ms",
        "tpot_ms",
        "e2el_ms",
        "drift_ms",
    ] {
        for (stat, w) in reference[metric].as_object().unwrap() {
            close(
                &format!("{metric}.{stat}"),
                &summary[metric][stat],
                w,
                1e-6,
                0.0,
            );
        }
    }
    // ITL: HDR histograms (3 significant digits) report a percentile as the sample at its
    // rank, so each must lie between numpy's `lower` and `higher` samples (within 0.1 %).
    for metric in ["itl_ms", "token_itl_ms"] {
        let want = &reference[metric];
        for stat in ["mean", "std", "min", "max"] {
            close(
                &format!("{metric}.{stat}"),
                &summary[metric][stat],
                &want[stat],
                1e-6,
                1e-3,
            );
        }
        for (stat, bracket) in want["brackets"].as_object().unwrap() {
            let got = summary[metric][stat].as_f64().unwrap();
            let (lo, hi) = (bracket[0].as_f64().unwrap(), bracket[1].as_f64().unwrap());
            assert!(
                got >= lo * (1.0 - 1e-3) && got <= hi * (1.0 + 1e-3),
                "{metric}.{stat}: {got} outside [{lo}, {hi}]"
            );
        }
    }
    // Re-rendered files agree with what was returned.
    assert_eq!(read_json(&dir.join("summary.json")), summary);
}

/// Replays `records` short text requests against the in-process mock and returns the run dir.
fn small_run(name: &str, ttft_ms: &str, itl_ms: &str, extra: &[&str]) -> PathBuf {
    let dir = temp_dir(name);
    let trace = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..30)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "hello world {i}", "input_length": 3, "output_length": 20}}"#,
                i * 40
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = dir.join("run");
    let mut argv = vec![
        "llmreplay",
        "replay",
        "--mock",
        "--quiet",
        "--trace",
        trace.to_str().unwrap(),
        "--mock-ttft-ms",
        ttft_ms,
        "--mock-itl-ms",
        itl_ms,
        "--output",
        out.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    let Command::Replay(args) = Cli::parse_from(argv).command else {
        panic!("replay")
    };
    llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
        .unwrap();
    out
}

/// TTFT and ITL are what the mock was told to take: never less (the mock sleeps that long),
/// and far from what a wrong measurement reads (TTFT to the last token is 50 + 5 x (n - 1)
/// ms; a gap per chunk of several tokens is a multiple of 5 ms). How close to the mock's
/// times they come is measured by scripts/bench-timing-truth.sh, not here: a busy machine
/// adds its own delay.
#[test]
fn mock_timing_is_measured_from_the_send_and_per_token() {
    // Judged by identities and by what the mock cannot do (answer before its configured
    // time), never by an upper margin a busy machine breaks.
    let run = small_run("timing", "50", "5", &[]);
    let s = read_json(&run.join("summary.json"));
    assert_eq!(s["requests"]["ok"], 30);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-3;
    for r in read_jsonl(&run.join("requests.jsonl")) {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no {k} in {r}"));
        // From the send: TTFT ends at the first token and starts at the send, not the schedule.
        assert!(
            close(f("ttft_ms"), f("first_token_ms") - f("sent_ms")),
            "{r}"
        );
        assert!(close(
            f("ttft_from_schedule_ms"),
            f("first_token_ms") - f("scheduled_ms")
        ));
        assert!(
            close(f("drift_ms"), f("sent_ms") - f("scheduled_ms")),
            "{r}"
        );
        // The mock writes no token before its time: 50 ms, then 19 gaps of 5 ms.
        assert!(
            f("ttft_ms") >= 50.0,
            "TTFT {} for a 50 ms mock",
            f("ttft_ms")
        );
        assert!(
            f("e2el_ms") >= 50.0 + 19.0 * 5.0,
            "E2EL {} for 20 tokens",
            f("e2el_ms")
        );
        // Per token: TPOT spreads the time after the first token over the other 19.
        assert_eq!(r["output_tokens"], 20, "{r}");
        let per_token = (f("e2el_ms") - f("ttft_ms")) / 19.0;
        assert!(
            close(f("tpot_ms"), per_token),
            "TPOT {} vs {per_token}",
            f("tpot_ms")
        );
    }
    assert!(s["ttft_ms"]["min"].as_f64().unwrap() >= 50.0);
}

/// Checks that every tag is closed in order (void elements aside): enough to catch a broken
/// page, without an HTML parser.
fn assert_well_formed(html: &str) {
    const VOID: [&str; 2] = ["meta", "br"];
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let close = rest.find('>').expect("an unclosed '<'");
        let tag = &rest[..close];
        rest = &rest[close + 1..];
        if tag.starts_with('!') || tag.starts_with('?') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack.pop().unwrap_or_default();
            assert_eq!(top, name.trim(), "</{name}> closes <{top}>");
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '/')
            .collect();
        if !tag.ends_with('/') && !VOID.contains(&name.as_str()) {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

#[test]
fn report_html_and_xlsx_hold_every_view() {
    let run = small_run("html", "20", "2", &["--goodput", "ttft:100"]);
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert_well_formed(&html);
    for id in [
        "summary",
        "latency-cdfs",
        "latency-over-time",
        "throughput-over-time",
        "drift-histogram",
        "input-length-match",
        "errors-over-time",
    ] {
        assert!(
            html.contains(&format!("<section id=\"{id}\">")),
            "no {id} section"
        );
    }
    for title in [
        "TTFT CDF",
        "TPOT CDF",
        "ITL CDF",
        "E2EL CDF",
        "TTFT over the run",
        "E2EL over the run",
        "Requests per second",
        "Output tokens per second",
        "Send drift histogram",
        "Prompt tokens: target vs server",
        "Errors per second",
    ] {
        assert!(html.contains(title), "no plot titled {title}");
    }
    assert!(
        html.matches("<svg").count() >= 11,
        "every plot is an inline SVG"
    );
    let lower = html.to_lowercase();
    for remote in [
        "<script", "<link", "<img", "<iframe", "@import", "url(", "src=",
    ] {
        assert!(
            !lower.contains(remote),
            "report.html may load something: {remote}"
        );
    }
    // Every http(s) URL is an XML namespace or the endpoint name in the text, not a resource.
    for (i, _) in lower.match_indices("http") {
        let before = &lower[i.saturating_sub(7)..i];
        assert!(!before.contains("href="), "a link at {i}");
    }

    let mut book: Xlsx<_> = open_workbook(run.join("results.xlsx")).unwrap();
    assert_eq!(
        book.sheet_names(),
        vec!["Summary", "Requests", "Per-endpoint", "Configuration"]
    );
    let requests = book.worksheet_range("Requests").unwrap();
    assert_eq!(requests.height(), 31, "a header and one row per request");
    assert_eq!(requests.get((0, 0)).unwrap().to_string(), "index");
    let summary = book.worksheet_range("Summary").unwrap();
    let rows: Vec<String> = summary.rows().map(|r| r[0].to_string()).collect();
    for key in ["requests_ok", "goodput", "ttft_ms", "e2el_ms"] {
        assert!(rows.iter().any(|r| r == key), "Summary sheet lacks {key}");
    }
}

/// A text longer than a spreadsheet cell holds (here a 40,000-character model name) is cut
/// in results.xlsx with a note of its length; the run and its other outputs keep it whole.
#[test]
fn a_text_longer_than_a_cell_is_cut_in_the_workbook_and_whole_elsewhere() {
    let model = "m".repeat(40_000);
    let run = small_run("long-cell", "1", "1", &["--model", &model]);
    let config = read_json(&run.join("run.json"));
    assert_eq!(config["model"].as_str().map(str::len), Some(40_000));
    let mut book: Xlsx<_> = open_workbook(run.join("results.xlsx")).unwrap();
    let sheet = book.worksheet_range("Configuration").unwrap();
    let cell = sheet
        .rows()
        .find(|r| r[0] == "model")
        .map(|r| r[1].to_string())
        .expect("a model row");
    assert_eq!(cell.chars().count(), 32_767);
    assert!(
        cell.starts_with("mmmm") && cell.contains("cut: 40000 characters"),
        "{}",
        &cell[cell.len() - 80..]
    );
}

#[test]
fn report_rerenders_a_run_and_compares_two() {
    let a = small_run("cmp-a", "20", "2", &[]);
    let b = small_run("cmp-b", "40", "2", &[]);
    let live = read_json(&a.join("summary.json"));
    std::fs::remove_file(a.join("report.html")).unwrap();

    // Re-render: the same summary, and every file back.
    let out = bin()
        .args(["report", a.to_str().unwrap(), "--output-format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, live, "report DIR reproduces the run's summary");
    assert!(a.join("report.html").is_file());

    // Other SLOs change goodput only.
    let out = bin()
        .args([
            "report",
            a.to_str().unwrap(),
            "--output-format",
            "json",
            "--goodput",
            "ttft:0.001",
        ])
        .output()
        .unwrap();
    let strict: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(strict["goodput"], 0.0);
    assert_eq!(strict["ttft_ms"], live["ttft_ms"]);

    // Comparison: B's TTFT is about 20 ms longer.
    let out = bin()
        .args(["report", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("ttft_ms.mean"))
        .expect("a ttft_ms.mean row");
    let cells: Vec<f64> = row
        .split_whitespace()
        .skip(1)
        .take(2)
        .map(|c| c.parse().unwrap())
        .collect();
    // Each run's own mean, in the order given: not swapped, not merged.
    for (cell, run) in cells.iter().zip([&a, &b]) {
        let mean = read_json(&run.join("summary.json"))["ttft_ms"]["mean"]
            .as_f64()
            .unwrap();
        assert!((cell - mean).abs() <= 0.01 + mean * 1e-3, "{row}: {mean}");
    }
    // B's mock writes no token before 40 ms.
    assert!(cells[1] >= 40.0, "{row}");
    assert!(row.trim_end().ends_with('%'), "{row}");
    let page = std::fs::read_to_string(b.join("compare.html")).unwrap();
    assert_well_formed(&page);
    assert!(page.contains("comparison-table") && page.contains("TTFT CDF"));
}

/// trace-replayer's `--output-path FILE` alone: the records go to FILE and the full run
/// directory is written too (the run says where); FILE is not overwritten without --force;
/// --force clears the files of the earlier run.
#[test]
fn output_path_alone_keeps_the_run_directory_and_never_overwrites_silently() {
    let dir = temp_dir("output-path");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"timestamp": {i}, "text_input": "a b", "input_length": 2, "output_length": 2}}"#
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let run = |extra: &[&str]| {
        bin()
            .current_dir(&dir)
            .args(["replay", "--mock", "--quiet", "--trace", "t.jsonl"])
            .args(["--output-path", "client.jsonl"])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = run(&[]);
    assert!(first.status.success());
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(stderr.contains("results in llmreplay-results/"), "{stderr}");
    assert!(stderr.contains("requests also in client.jsonl"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("client.jsonl"))
            .unwrap()
            .lines()
            .count(),
        8
    );
    let runs: Vec<_> = std::fs::read_dir(dir.join("llmreplay-results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    for file in [
        "requests.jsonl",
        "summary.json",
        "report.html",
        "results.xlsx",
        "run.json",
    ] {
        assert!(runs[0].join(file).is_file(), "{file}");
    }
    // Again without --force: refused, naming the file.
    let again = run(&[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("client.jsonl"));
    // --force into the same directory clears the earlier run's files.
    let out = runs[0].to_str().unwrap().to_string();
    std::fs::write(runs[0].join("prompts.jsonl"), "stale\n").unwrap();
    std::fs::write(runs[0].join("notes.txt"), "mine\n").unwrap();
    assert!(run(&["--force", "--output", &out]).status.success());
    assert!(
        !runs[0].join("prompts.jsonl").exists(),
        "an earlier run's file is cleared"
    );
    assert!(
        runs[0].join("notes.txt").exists(),
        "the user's own file stays"
    );
}

/// `--record-format trace-replayer` writes the --output-path file with trace-replayer's field
/// names (strings, as it writes them), and `report FILE` reads it back into the same figures
/// as the run directory's own summary.
#[test]
fn trace_replayer_records_are_written_and_reported() {
    let dir = temp_dir("record-format");
    let trace = common::text_trace(&dir, 12, 5, 4);
    let out = dir.join("run");
    let status = bin()
        .current_dir(&dir)
        .args(["replay", "--mock", "--quiet", "--record-itl"])
        .arg("--trace")
        .arg(&trace)
        .arg("--output")
        .arg(&out)
        .args(["--output-path", "client.jsonl"])
        .args(["--record-format", "trace-replayer"])
        .status()
        .unwrap();
    assert!(status.success());
    let lines = read_jsonl(&dir.join("client.jsonl"));
    assert_eq!(lines.len(), 12);
    for l in &lines {
        for key in [
            "status",
            "s_time",
            "s_time_drift",
            "e_time",
            "span_time",
            "input_length",
            "output_length",
            "first_token_time",
            "total_time",
            "max_time_between_tokens",
        ] {
            assert!(l[key].is_string(), "{key} in {l}");
        }
        assert_eq!(l["status"], "200");
        let (s, e, span) = (
            l["s_time"].as_str().unwrap().parse::<f64>().unwrap(),
            l["e_time"].as_str().unwrap().parse::<f64>().unwrap(),
            l["span_time"].as_str().unwrap().parse::<f64>().unwrap(),
        );
        assert!((e - s - span).abs() < 0.0015, "{l}");
    }
    let report = bin()
        .current_dir(&dir)
        .args(["report", "client.jsonl", "--output-format", "json"])
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let theirs: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert!(dir.join("client-report/report.html").is_file());
    let ours: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(theirs["requests"]["ok"], ours["requests"]["ok"]);
    assert_eq!(theirs["output_tokens"], ours["output_tokens"]);
    // Times survive to a microsecond, TTFT to the whole millisecond trace-replayer keeps.
    let close =
        |a: &Value, b: &Value, tol: f64| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= tol;
    assert!(
        close(&theirs["duration_s"], &ours["duration_s"], 1e-5),
        "{theirs} {ours}"
    );
    assert!(close(
        &theirs["drift_ms"]["max"],
        &ours["drift_ms"]["max"],
        0.001
    ));
    assert!(close(
        &theirs["ttft_ms"]["p50"],
        &ours["ttft_ms"]["p50"],
        1.0
    ));
}
