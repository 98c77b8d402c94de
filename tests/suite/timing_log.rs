//! `mock --timing-log` and run.json's `clock`: the server's own times and the client's records
//! on one clock (CLOCK_MONOTONIC), so that the timing-truth benchmark can compare them.

use crate::common;

use common::{read_jsonl, temp_dir, text_trace, MockProcess};
use serde_json::Value;

/// Causality across the two processes: each request reaches the mock after the client sent
/// it, and the client reads each token after the mock wrote it. A client time 0 put on the
/// wrong clock (or off by more than the 1 ms allowed for reading two clocks) breaks it.
#[test]
fn the_mocks_timing_log_and_the_records_share_a_clock() {
    let dir = temp_dir("timing-log");
    let trace = text_trace(&dir, 30, 20, 5);
    let log = dir.join("timing.jsonl");
    let mock = MockProcess::start(&[
        "--timing-log",
        log.to_str().unwrap(),
        "--ttft-ms",
        "30",
        "--itl-ms",
        "10",
    ]);
    let out = dir.join("run");
    let status = common::replay_against(&mock, &trace, &out)
        .arg("--record-itl")
        .status()
        .unwrap();
    assert!(status.success());
    drop(mock);
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let t0 = run["clock"]["t0_monotonic_ns"].as_f64().unwrap();
    assert!(run["clock"]["end"]["monotonic_ns"].as_f64().unwrap() > t0);
    let on_clock = |ms: &Value| t0 + ms.as_f64().unwrap() * 1e6;
    let server: std::collections::HashMap<u64, Value> = read_jsonl(&log)
        .into_iter()
        .map(|l| (l["index"].as_u64().unwrap(), l))
        .collect();
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!((records.len(), server.len()), (30, 30));
    const SLACK_NS: f64 = 1e6;
    for r in &records {
        let s = &server[&r["index"].as_u64().unwrap()];
        let ns = |k: &str| s[k].as_f64().unwrap();
        let chunks: Vec<f64> = s["chunks_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(s["chunks_tokens"].as_array().unwrap().last().unwrap(), 5);
        assert!(
            ns("received_ns") + 29e6 < chunks[0],
            "the mock's 30 ms TTFT: {s}"
        );
        assert!(
            on_clock(&r["sent_ms"]) <= ns("received_ns") + SLACK_NS,
            "{r} {s}"
        );
        assert!(
            chunks[0] <= on_clock(&r["first_token_ms"]) + SLACK_NS,
            "{r} {s}"
        );
        assert!(
            ns("last_byte_ns") <= on_clock(&r["end_ms"]) + SLACK_NS,
            "{r} {s}"
        );
        // The client's TTFT holds the server's (the interval around it, so never shorter),
        // and is the same event: not a second later (a measurement from another instant).
        let ttft_client = r["ttft_ms"].as_f64().unwrap();
        let ttft_server = (chunks[0] - ns("received_ns")) / 1e6;
        assert!(
            ttft_client >= ttft_server - 2.0 * SLACK_NS / 1e6 && ttft_client < ttft_server + 1000.0,
            "{r} {s}"
        );
    }
}
