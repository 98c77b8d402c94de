//! The pages a team reads, from a run that has conversations, warm-up requests, prefix-cache
//! hits, two endpoints and scraped metrics: results.xlsx read back with calamine (its sheets,
//! the Requests rows in index order with a column for every record field, the Per-endpoint,
//! Server-metrics and Configuration sheets) and report.html's per-endpoint section, legends
//! and tick labels.

use crate::common;

use std::path::Path;

use calamine::{open_workbook, Data, Range, Reader, Xlsx};
use common::{path, read_jsonl, temp_dir, tokenizer, MockProcess};
use serde_json::Value;

fn column(range: &Range<Data>, name: &str) -> usize {
    let header: Vec<String> = range
        .rows()
        .next()
        .unwrap()
        .iter()
        .map(|c| c.to_string())
        .collect();
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

fn cells(range: &Range<Data>, name: &str) -> Vec<Data> {
    let c = column(range, name);
    range.rows().skip(1).map(|r| r[c].clone()).collect()
}

fn number(d: &Data) -> Option<f64> {
    match d {
        Data::Float(f) => Some(*f),
        Data::Int(i) => Some(*i as f64),
        _ => None,
    }
}

#[test]
fn the_workbook_and_the_report_show_each_endpoint_and_every_request_in_index_order() {
    let dir = temp_dir("results-book");
    // Conversations started 1 ms apart whose turns come 50 ms apart: the first turns of all
    // end before any second turn is sent, so requests.jsonl is not in index order.
    let records: Vec<String> = common::bailian_chains(6, 0.001, 0.05, 4)
        .iter()
        .map(Value::to_string)
        .collect();
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, records.join("\n")).unwrap();
    let a = MockProcess::start(&["--cache-blocks", "1000", "--ttft-ms", "1"]);
    let b = MockProcess::start(&["--cache-blocks", "1000", "--ttft-ms", "1"]);
    let out = dir.join("run");
    let status = common::bin()
        .args([
            "replay",
            "--quiet",
            "--trace",
            path(&trace),
            "--output",
            path(&out),
        ])
        .args([
            "--endpoint",
            &a.url(),
            "--endpoint",
            &b.url(),
            "--route",
            "session",
        ])
        .args([
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--warmup-requests",
            "2",
        ])
        .args(["--scrape-server", "--scrape-interval", "0.05"])
        .status()
        .unwrap();
    assert!(status.success());

    let mut book: Xlsx<_> = open_workbook(out.join("results.xlsx")).unwrap();
    assert_eq!(
        book.sheet_names(),
        [
            "Summary",
            "Requests",
            "Per-endpoint",
            "Server metrics",
            "Configuration"
        ]
    );

    let records = read_jsonl(&out.join("requests.jsonl"));
    let mut indices: Vec<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    let completion_order = indices.clone();
    indices.sort_unstable();
    assert_ne!(
        completion_order, indices,
        "the run must end out of index order"
    );
    let requests = book.worksheet_range("Requests").unwrap();
    let sheet_indices: Vec<u64> = cells(&requests, "index")
        .iter()
        .map(|c| number(c).unwrap() as u64)
        .collect();
    assert_eq!(
        sheet_indices, indices,
        "rows in index order, one per request"
    );

    // Each row holds its own record's fields (looked up by index).
    let by_index = |i: u64| records.iter().find(|r| r["index"] == i).unwrap();
    for field in [
        "cached_tokens",
        "expected_cached_tokens",
        "first_token_ms",
        "end_ms",
        "chat_id",
        "parent_chat_id",
        "turn",
        "input_tokens",
        "prompt_tokens",
    ] {
        for (row, cell) in cells(&requests, field).iter().enumerate() {
            let want = by_index(sheet_indices[row])[field].as_f64();
            assert_eq!(
                number(cell),
                want,
                "{field} of index {}",
                sheet_indices[row]
            );
        }
    }
    let sessions = cells(&requests, "session_id");
    for (row, cell) in sessions.iter().enumerate() {
        assert_eq!(
            cell.to_string(),
            by_index(sheet_indices[row])["session_id"].as_str().unwrap()
        );
    }
    let warmup = cells(&requests, "warmup");
    let warm: Vec<u64> = warmup
        .iter()
        .zip(&sheet_indices)
        .filter(|(c, _)| **c == Data::Bool(true))
        .map(|(_, i)| *i)
        .collect();
    let want_warm: Vec<u64> = indices
        .iter()
        .copied()
        .filter(|&i| by_index(i)["warmup"] == true)
        .collect();
    assert_eq!((warm.len(), &warm), (2, &want_warm));
    assert!(cells(&requests, "cached_tokens")
        .iter()
        .any(|c| number(c) > Some(0.0)));

    let per_endpoint = book.worksheet_range("Per-endpoint").unwrap();
    let endpoints: Vec<String> = cells(&per_endpoint, "endpoint")
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(endpoints.len(), 2);
    let counts: Vec<f64> = cells(&per_endpoint, "requests")
        .iter()
        .filter_map(number)
        .collect();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        counts.iter().sum::<f64>(),
        summary["requests"]["total"].as_f64().unwrap()
    );
    for e in summary["per_endpoint"].as_array().unwrap() {
        let row = endpoints
            .iter()
            .position(|u| u == e["endpoint"].as_str().unwrap())
            .unwrap();
        assert_eq!(Some(counts[row]), e["requests"].as_f64());
        let share = number(&cells(&per_endpoint, "observed_hit_share")[row]);
        assert_eq!(share, e["prefix_cache"]["observed_hit_share"].as_f64());
    }

    let server = book.worksheet_range("Server metrics").unwrap();
    let series: Vec<String> = cells(&server, "series")
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert!(!series.is_empty());
    assert!(cells(&server, "target")
        .iter()
        .all(|t| !t.to_string().is_empty()));

    let config = book.worksheet_range("Configuration").unwrap();
    let settings: Vec<(String, String)> = config
        .rows()
        .skip(1)
        .map(|r| (r[0].to_string(), r[1].to_string()))
        .collect();
    let setting = |k: &str| {
        settings
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(setting("trace").as_deref(), Some(path(&trace)));
    assert_eq!(setting("fleet.1.url"), Some(b.url()));
    assert_eq!(setting("warmup_requests").as_deref(), Some("2"));

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let endpoints_section = &html[html.find("<section id=\"endpoints\">").unwrap()..];
    let endpoints_section = &endpoints_section[..endpoints_section.find("</section>").unwrap()];
    for url in [a.url(), b.url()] {
        assert!(
            endpoints_section.contains(&format!("<tr><td>{url}</td>")),
            "{url}"
        );
    }
    for title in [
        "TTFT CDF by endpoint",
        "E2EL CDF by endpoint",
        "Completions per second by endpoint",
    ] {
        assert!(endpoints_section.contains(title), "{title}");
    }
    // Legends are HTML below the plots, never drawn inside them; ticks read as numbers.
    for svg in html.split("<svg").skip(1) {
        let svg = &svg[..svg.find("</svg>").unwrap()];
        assert!(!svg.contains(".0</text>"), "a tick label like 120000.0");
        assert!(!svg.contains(&a.addr), "a legend drawn over the plot");
    }
    assert!(html.matches("<figcaption class=\"legend\">").count() >= 5);

    let summary_sheet = book.worksheet_range("Summary").unwrap();
    let keys: Vec<String> = summary_sheet.rows().map(|r| r[0].to_string()).collect();
    for key in ["requests_ok", "ttft_ms", "e2el_ms", "input_length_exact"] {
        assert!(keys.iter().any(|k| k == key), "Summary lacks {key}");
    }
    // The conversations, as summary.txt shows them, and each round's numbers as summary.json
    // has them.
    let row_of = |label: &str| {
        let at = keys.iter().position(|k| k == label);
        at.unwrap_or_else(|| panic!("Summary lacks {label}: {keys:?}"))
    };
    let started = row_of("Sessions started / finished / cut");
    assert_eq!(
        summary_sheet.get((started, 1)).unwrap().to_string(),
        "6 / 6 / 0"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rounds = summary["sessions"]["rounds"].as_array().unwrap();
    assert!(!rounds.is_empty());
    let first = row_of("round") + 1;
    for (i, round) in rounds.iter().enumerate() {
        let cell = |c: usize| number(summary_sheet.get((first + i, c)).unwrap());
        assert_eq!(cell(0), round["turn"].as_f64(), "{round}");
        assert_eq!(cell(1), round["requests"].as_f64(), "{round}");
        assert_eq!(cell(3), round["observed_hit_share"].as_f64(), "{round}");
        assert_eq!(cell(6), round["cached_tokens"].as_f64(), "{round}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_records_file_alone_gets_a_book_without_configuration() {
    // `report client.jsonl` of trace-replayer's field names: the rows still in index order.
    let dir = temp_dir("results-book-alone");
    let line = |i: u64, sent: u64| {
        format!(
            r#"{{"index": "{i}", "status": "200", "s_time": "{sent}.000", "e_time": "{}.000", "first_token_time": "10", "input_length": "3", "output_length": "4"}}"#,
            sent + 40
        )
    };
    let lines = [line(2, 20), line(0, 0), line(1, 10)];
    let file = dir.join("client.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = dir.join("report");
    let o = common::bin()
        .args(["report", path(&file), "--output", path(&out)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut book: Xlsx<_> = open_workbook(Path::new(&out).join("results.xlsx")).unwrap();
    assert_eq!(book.sheet_names(), ["Summary", "Requests", "Per-endpoint"]);
    let requests = book.worksheet_range("Requests").unwrap();
    let order: Vec<f64> = cells(&requests, "index")
        .iter()
        .filter_map(number)
        .collect();
    assert_eq!(order, [0.0, 1.0, 2.0]);
    let _ = std::fs::remove_dir_all(&dir);
}
