//! Connections that never starve a server. A server with a fixed pool of HTTP workers
//! (llama.cpp's llama-server: a worker holds one keep-alive connection until it closes or
//! idles out) serves nothing on a connection beyond its pool. Idle connections opened ahead
//! of need must not take those workers from the requests.

use serde_json::json;

use crate::common;
use common::{read_jsonl, replay_against, temp_dir, MockProcess};

const MOCK_TTFT_MS: f64 = 20.0;
/// Half the mock's keep-alive: what a request waiting for a busy worker would exceed.
const STARVED_MS: f64 = 2500.0;

#[test]
fn default_connections_leave_a_four_worker_server_free_for_the_requests() {
    let dir = temp_dir("workers");
    let trace = dir.join("t.jsonl");
    // A steady trickle, then a pause longer than the server's keep-alive, then more: the
    // connections held idle across the pause must not be the ones the next requests wait on.
    let times: Vec<u64> = (0..12)
        .map(|i| i * 100)
        .chain((0..6).map(|i| 7000 + i * 100))
        .collect();
    let lines: Vec<String> = times
        .iter()
        .map(|t| json!({"timestamp": t, "text_input": "a b c", "output_length": 5}).to_string())
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let mock = MockProcess::start(&[
        "--http-workers",
        "4",
        "--keep-alive-s",
        "5",
        "--ttft-ms",
        &MOCK_TTFT_MS.to_string(),
        "--itl-ms",
        "1",
    ]);
    let out = dir.join("run");
    let status = replay_against(&mock, &trace, &out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), times.len());
    for r in &records {
        assert_eq!(r["status"], 200, "{r}");
        let ttft = r["ttft_ms"].as_f64().unwrap();
        // A starved request waits for a worker's 5 s keep-alive to run out: half of that
        // is a bound no busy machine reaches, and the mock's TTFT one no request beats.
        assert!(
            (MOCK_TTFT_MS..STARVED_MS).contains(&ttft),
            "record {}: TTFT {ttft} ms for a configured {MOCK_TTFT_MS} ms",
            r["index"]
        );
    }
}
