//! Timeouts that each mean one thing: silence before the answer starts is waited out on a live
//! server (until --first-token-timeout) and ends as `endpoint-down` within --stall-timeout on
//! one that has gone away, as llama-server does on SIGTERM (listener closed, queued
//! connections held open and silent).

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::common;
use common::{read_jsonl, replay_against, temp_dir, MockProcess};

fn write_trace(path: &Path, times_ms: &[u64]) {
    let lines: Vec<String> = times_ms
        .iter()
        .map(|t| format!(r#"{{"timestamp": {t}, "text_input": "a b c", "output_length": 3}}"#))
        .collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

fn kinds(records: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for r in records {
        let kind = r["error"]["kind"].as_str().unwrap_or("ok").to_string();
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
}

#[test]
fn a_server_shutting_down_gracefully_ends_the_run_as_endpoint_down_within_the_stall_timeout() {
    let dir = temp_dir("graceful-shutdown");
    let trace = dir.join("t.jsonl");
    // Eight at once (two generate, the rest queue; the fourth arrival shuts the mock down),
    // then four more that find the connections the first two leave idle, or none.
    write_trace(&trace, &[0, 0, 0, 0, 0, 0, 0, 0, 1500, 1500, 1500, 1500]);
    let mock = MockProcess::start(&[
        "--max-running",
        "2",
        "--graceful-shutdown-after",
        "4",
        "--ttft-ms",
        "100",
        "--itl-ms",
        "10",
    ]);
    let out = dir.join("run");
    let started = Instant::now();
    let output = replay_against(&mock, &trace, &out)
        .args(["--stall-timeout", "1"])
        .output()
        .unwrap();
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 12, "{stderr}");
    let kinds = kinds(&records);
    // The two generating finished; those queued when it shut down never get an answer.
    assert_eq!(kinds.get("ok"), Some(&2), "{kinds:?}");
    assert!(
        kinds.get("endpoint-down").copied().unwrap_or(0) >= 2,
        "{kinds:?}"
    );
    assert!(
        !kinds.contains_key("timeout"),
        "nothing waited out a timeout: {kinds:?}"
    );
    let down = records
        .iter()
        .find(|r| r["error"]["kind"] == "endpoint-down")
        .unwrap();
    let message = down["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("takes no new connection") && message.contains("--stall-timeout"),
        "{message}"
    );
    // The request timeout (600 s) is not what ended it.
    assert!(wall.as_secs() < 60, "took {wall:?}");
}

/// A server that answers the head at once and the first token after 3 s (a long queue):
/// every request is kept, though it is silent for three stall timeouts.
#[test]
fn a_live_server_slow_to_its_first_token_is_waited_for_until_the_first_token_timeout() {
    let dir = temp_dir("slow-first-token");
    let trace = dir.join("t.jsonl");
    write_trace(&trace, &[0, 0, 0, 100]);
    let mock = MockProcess::start(&["--ttft-ms", "3000", "--itl-ms", "5"]);
    let out = dir.join("run");
    let output = replay_against(&mock, &trace, &out)
        .args(["--stall-timeout", "1", "--first-token-timeout", "60"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(kinds(&records).get("ok"), Some(&4), "{stderr}");
    // Each waited through the mock's 3 s, well past the 1 s stall timeout. (Not >= 3000: the
    // client stamps a send after its write returns, and a preemption there, on a busy
    // machine, makes a TTFT read a little short of the mock's.)
    let ttfts: Vec<f64> = records
        .iter()
        .map(|r| r["ttft_ms"].as_f64().unwrap())
        .collect();
    assert!(ttfts.iter().all(|&t| t >= 2500.0), "{ttfts:?}");
}

/// A server whose engine hung behind a live listener: it takes every connection, answers a
/// request's head (200, a stream) and then nothing, not even `GET /health`. Past
/// --stall-timeout the probe finds it unanswering, and the silent requests end as
/// `endpoint-down` saying why, not after the 600 s request timeout.
#[test]
fn a_hung_server_that_still_takes_connections_ends_as_endpoint_down() {
    use std::io::{Read, Write};
    let dir = temp_dir("hung-engine");
    let trace = dir.join("t.jsonl");
    write_trace(&trace, &[0, 0, 50]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let health_asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let asked = std::sync::Arc::clone(&health_asked);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut conn in listener.incoming().flatten() {
            conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 8192];
            let n = conn.read(&mut buf).unwrap_or(0);
            if buf[..n].starts_with(b"GET /health") {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            } else if n > 0 {
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                      transfer-encoding: chunked\r\n\r\n",
                );
            }
            held.push(conn); // open and silent
        }
    });
    let out = dir.join("run");
    let output = common::bin()
        .args(["replay", "--quiet", "--model", "m", "--endpoint", &url])
        .args(["--stall-timeout", "1", "--trace", common::path(&trace)])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 3, "{stderr}");
    assert_eq!(
        kinds(&records).get("endpoint-down"),
        Some(&3),
        "{records:?}"
    );
    let message = records[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("answered no GET /health within 1.0 s") && message.contains(&url),
        "{message}"
    );
    assert!(health_asked.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}
