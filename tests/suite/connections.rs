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
