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

/// A client that stops with hundreds of connections queued for a worker: each freed worker
/// takes the next, finds it closed and frees itself again. The mock closes them one after
/// another (it recursed once each and overflowed its stack at about 180) and still answers.
#[test]
fn the_mock_survives_a_client_leaving_with_hundreds_of_queued_connections() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let mock = MockProcess::start(&["--http-workers", "4", "--keep-alive-s", "5"]);
    let body = r#"{"model":"m","prompt":"a b","max_tokens":1}"#;
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let ask = |s: &mut TcpStream| {
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // Four connections hold the four workers; 500 more wait behind them.
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&mock.addr).unwrap())
        .collect();
    for s in &mut held {
        assert!(ask(s).starts_with("HTTP/1.1 200"));
    }
    let queued: Vec<TcpStream> = (0..500)
        .map(|_| TcpStream::connect(&mock.addr).unwrap())
        .collect();
    // One more answer: the mock has seen the queue (it accepts before it reads).
    assert!(ask(&mut held[0]).starts_with("HTTP/1.1 200"));
    drop(queued);
    drop(held);
    let mut fresh = TcpStream::connect(&mock.addr).expect("the mock is still listening");
    let answer = ask(&mut fresh);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

/// llama-server may close a keep-alive connection, unread, when a request follows the
/// previous answer at once. The mock does that to every request on a reused connection
/// (`drop-reused`): each such request is sent again, once, on a fresh connection, and its
/// record says when. Nothing fails, and the resent records are exactly the mock's drops.
#[test]
fn a_request_a_reused_connection_drops_unanswered_is_resent_on_a_fresh_one() {
    let dir = temp_dir("drop-reused");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| {
            json!({"timestamp": i * 30, "text_input": "a b c", "output_length": 3}).to_string()
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let log = dir.join("faults.jsonl");
    let mock = MockProcess::start(&[
        "--ttft-ms",
        "2",
        "--fault",
        "drop-reused:1",
        "--fault-log",
        log.to_str().unwrap(),
    ]);
    let out = dir.join("run");
    let status = replay_against(&mock, &trace, &out).status().unwrap();
    drop(mock);
    assert!(status.success());
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 20);
    assert!(records.iter().all(|r| r["status"] == 200), "{records:?}");
    let mut dropped: Vec<u64> = read_jsonl(&log)
        .iter()
        .map(|f| {
            assert_eq!(f["fault"], "drop-reused");
            f["index"].as_u64().unwrap()
        })
        .collect();
    dropped.sort();
    let mut resent: Vec<u64> = records
        .iter()
        .filter(|r| r.get("resent_ms").is_some())
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    resent.sort();
    assert!(!dropped.is_empty(), "connections were reused");
    // Each drop was resent once: on a fresh connection, which the mock answers.
    assert_eq!(resent, dropped);
    for r in records.iter().filter(|r| r.get("resent_ms").is_some()) {
        assert!(r["resent_ms"].as_f64() >= r["sent_ms"].as_f64(), "{r}");
        assert!(
            r["first_token_ms"].as_f64() > r["resent_ms"].as_f64(),
            "{r}"
        );
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["resent"], dropped.len() as u64);
    let _ = std::fs::remove_dir_all(&dir);
}
