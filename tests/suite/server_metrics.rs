//! The servers' own view: exposition fixtures of vLLM, SGLang, llama.cpp's server and TGI read
//! into common names, and a replay that scrapes the mock's /metrics (and a dead target) while
//! it runs.

use crate::common;

use std::path::PathBuf;

use common::{read_jsonl, temp_dir, text_trace, MockProcess};
use llmreplay::server_metrics::families::select;
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/metrics")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn each_servers_families_get_the_common_names() {
    /// (fixture, the server it shows, the common names it gives)
    type Case = (&'static str, &'static str, &'static [(&'static str, f64)]);
    let cases: [Case; 5] = [
        (
            "vllm.txt",
            "vllm",
            &[
                ("running", 21.0),
                ("waiting", 3.0),
                ("kv_cache_usage", 0.6),
                ("prefix_cache_queries", 2.0e6),
                ("prefix_cache_hits", 1.5e6),
                ("preemptions", 5.0),
                ("prompt_tokens", 2.0e6),
                ("generation_tokens", 90000.0),
            ],
        ),
        (
            "sglang.txt",
            "sglang",
            &[
                ("running", 31.0),
                ("waiting", 7.0),
                ("kv_cache_usage", 0.44),
                ("prefix_cache_hit_rate", 0.71),
                ("prefix_cache_queries", 8.8e6),
                ("prefix_cache_hits", 6.2e6),
                ("prompt_tokens", 8.8e6),
                ("generation_tokens", 1.1e6),
            ],
        ),
        (
            "llamacpp.txt",
            "llama.cpp",
            &[
                ("running", 2.0),
                ("waiting", 5.0),
                ("prompt_tokens_computed", 33065.0),
                ("generation_tokens", 7801.0),
            ],
        ),
        (
            // A real server's: its cache counter gives the hits, and with the evaluated
            // tokens the queries and all prompt tokens.
            "llamacpp-cached.txt",
            "llama.cpp",
            &[
                ("running", 0.0),
                ("waiting", 0.0),
                ("prompt_tokens_computed", 35548.0),
                ("prefix_cache_hits", 39580.0),
                ("prefix_cache_queries", 35548.0 + 39580.0),
                ("prompt_tokens", 35548.0 + 39580.0),
                ("generation_tokens", 1143.0),
            ],
        ),
        ("tgi.txt", "tgi", &[("running", 32.0), ("waiting", 14.0)]),
    ];
    for (file, server, expected) in cases {
        let s = select(&fixture(file), &[]).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(s.server, Some(server), "{file}");
        for (name, value) in expected {
            let got = s.values.get(*name).copied();
            assert!(
                got.is_some_and(|g| (g - value).abs() < 1e-9 * value.abs().max(1.0)),
                "{file}: {name} = {got:?}, expected {value}"
            );
        }
        assert_eq!(
            s.values.len(),
            expected.len(),
            "{file}: only the families it has: {:?}",
            s.values
        );
    }
    // --metric: any series, a histogram by its count or sum, a summary's too.
    let extra = [
        "tgi_request_duration".to_string(),
        "tgi_request_duration_sum".to_string(),
        "tgi_batch_inference_duration_count".to_string(),
        "tgi_request_success".to_string(),
    ];
    let s = select(&fixture("tgi.txt"), &extra).unwrap();
    let v = |k: &str| s.values[k];
    assert_eq!(v("tgi_request_duration"), 1040.0);
    assert_eq!(v("tgi_request_duration_sum"), 1337.25);
    assert_eq!(v("tgi_batch_inference_duration_count"), 10000.0);
    assert_eq!(v("tgi_request_success"), 1040.0);
    // Typed counters among them are marked, so the summary gives their increase.
    assert_eq!(s.counters, ["tgi_request_success"]);
    let s = select(
        &fixture("llamacpp-cached.txt"),
        &[
            "llamacpp:n_decode_total".into(),
            "llamacpp:requests_processing".into(),
        ],
    )
    .unwrap();
    assert_eq!(s.counters, ["llamacpp:n_decode_total"]);
}

/// A run with `--scrape-server` against a mock with a prefix cache and `--max-running 2`,
/// and a `--server-metrics` target where nothing listens: the dead target is recorded as
/// failed scrapes, the run completes, and the mock's counters over the run equal what the
/// records say (every cached token, every generated token), its queue shows.
#[test]
fn a_replay_scrapes_each_target_and_survives_a_dead_one() {
    let dir = temp_dir("server-metrics");
    // 40 requests 20 ms apart, 8 tokens each at 20 ms a token: about 4 in flight, 2 run.
    let trace = text_trace(&dir, 40, 20, 8);
    let mock = MockProcess::start(&[
        "--cache-blocks",
        "100000",
        "--max-running",
        "2",
        "--ttft-ms",
        "20",
        "--itl-ms",
        "20",
    ]);
    // A port that was just free: connecting is refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/metrics", dead.local_addr().unwrap());
    drop(dead);
    let out = dir.join("run");
    let output = common::replay_against(&mock, &trace, &out)
        .args([
            "--scrape-server",
            "--scrape-interval",
            "0.1",
            "--server-metrics",
            &dead_url,
            "--metric",
            "vllm:no_such_series",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    // A --metric series the target does not have is said, not silently absent.
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("has no series vllm:no_such_series"), "{err}");

    let lines = read_jsonl(&out.join("server_metrics.jsonl"));
    let mock_url = format!("{}/metrics", mock.url());
    let of = |url: &str| -> Vec<&Value> { lines.iter().filter(|l| l["target"] == url).collect() };
    let (live, gone) = (of(&mock_url), of(&dead_url));
    assert!(
        live.len() >= 3,
        "a baseline, scrapes during the run, a last one: {}",
        live.len()
    );
    assert!(!gone.is_empty() && gone.iter().all(|l| l["error"].is_string()));
    assert!(live.iter().all(|l| l["server"] == "vllm"), "{live:?}");
    // The baseline precedes the first send; the last scrape follows the last answer.
    let records = read_jsonl(&out.join("requests.jsonl"));
    let first_sent = records
        .iter()
        .filter_map(|r| r["sent_ms"].as_f64())
        .fold(f64::MAX, f64::min);
    let last_end = records
        .iter()
        .filter_map(|r| r["end_ms"].as_f64())
        .fold(0.0, f64::max);
    assert!(live[0]["t_s"].as_f64().unwrap() * 1000.0 < first_sent);
    assert!(live.last().unwrap()["t_s"].as_f64().unwrap() * 1000.0 > last_end);

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let targets = summary["server_metrics"].as_array().unwrap();
    let target = |url: &str| targets.iter().find(|t| t["target"] == url).unwrap();
    let dead_summary = target(&dead_url);
    assert_eq!(dead_summary["failed_scrapes"], dead_summary["scrapes"]);
    // Typed: what failed, not an OS error number; the missing baseline is marked.
    assert_eq!(dead_summary["first_error"], "connection refused");
    assert_eq!(dead_summary["baseline_error"], "connection refused");
    assert!(
        err.contains("the baseline scrape failed (connection refused)"),
        "{err}"
    );
    assert!(live[0]["baseline"] == true && gone[0]["baseline"] == true);
    assert!(target(&mock_url)["baseline_error"].is_null());

    let series = &target(&mock_url)["series"];
    let sum = |key: &str| records.iter().filter_map(|r| r[key].as_u64()).sum::<u64>() as f64;
    assert_eq!(
        series["prefix_cache_hits"]["increase"],
        sum("cached_tokens")
    );
    assert_eq!(
        series["generation_tokens"]["increase"],
        sum("output_tokens")
    );
    assert!(
        series["running"]["max"].as_f64().unwrap() <= 2.0,
        "{series}"
    );
    assert!(
        series["waiting"]["max"].as_f64().unwrap() >= 1.0,
        "{series}"
    );
    // The observed share is the records' (cached_tokens); the counters' share is beside it.
    let p = &summary["prefix_cache"];
    assert_eq!(p["observed_from"], "cached_tokens");
    assert!(p["server_counter_hit_share"].as_f64().is_some(), "{p}");
    // Targets are numbered as given: --server-metrics URLs, then the endpoints'.
    let raw = std::fs::read_to_string(out.join("server_metrics_raw/target-1-last.txt")).unwrap();
    assert!(raw.starts_with(&format!("# {mock_url}\n")), "{raw}");
    assert!(raw.contains("vllm:num_requests_running"), "{raw}");
    assert!(!out.join("server_metrics_raw/target-0-first.txt").exists());
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(table.contains(&format!("Server {mock_url}:")), "{table}");
    assert!(table.contains("Server queue, max (any target):"), "{table}");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("id=\"server-metrics\"") && page.contains("Queue and running requests"));
}

/// A server whose HTTP workers each hold one connection (llama.cpp's, `mock --http-workers`)
/// serves the first connections it accepts. The scraper's connection is opened, and its
/// baseline taken, before any load connection, and kept: no scrape queues behind the load,
/// though the run holds more connections than the server has workers.
#[test]
fn scrapes_keep_their_worker_on_a_thread_per_connection_server() {
    let dir = temp_dir("scrape-workers");
    // 20 requests in the first second: the client opens a connection for each before the
    // start, far more than the mock's 3 workers.
    let trace = text_trace(&dir, 40, 50, 4);
    let mock = MockProcess::start(&[
        "--http-workers",
        "3",
        "--keep-alive-s",
        "30",
        "--ttft-ms",
        "5",
        "--itl-ms",
        "5",
    ]);
    let out = dir.join("run");
    let status = common::replay_against(&mock, &trace, &out)
        .args(["--scrape-server", "--scrape-interval", "0.1"])
        .status()
        .unwrap();
    assert!(status.success());
    let lines = read_jsonl(&out.join("server_metrics.jsonl"));
    assert!(lines.len() >= 3, "{}", lines.len());
    let failed: Vec<&Value> = lines.iter().filter(|l| !l["error"].is_null()).collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(lines[0]["baseline"], true);
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.iter().filter(|r| r["error"].is_null()).count(), 40);
}
