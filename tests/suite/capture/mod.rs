//! `llmreplay capture`: a replay sent through the proxy to a mock comes back as a trace equal
//! to its source in every length and in which records share which blocks; no byte of a
//! prompt, tool argument or header value is kept; an upstream out of reach, a client that
//! leaves mid-answer, a slow client and a 100 MiB body are records, and the proxy serves on;
//! a signal ends it with the answers in flight written.

mod conversations;
mod fidelity;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// `llmreplay capture` in a child process on a free loopback port; killed when dropped.
struct CaptureProcess {
    child: Child,
    addr: String,
}

impl CaptureProcess {
    fn start(upstream: &str, output: &Path, args: &[&str]) -> CaptureProcess {
        Self::start_for("qwen3", upstream, output, args)
    }

    /// The capture of a server of tokenizer family `family`.
    fn start_for(family: &str, upstream: &str, output: &Path, args: &[&str]) -> CaptureProcess {
        let mut capture = bin();
        capture
            .args(["capture", "--listen", "127.0.0.1:0", "--upstream", upstream])
            .arg("--tokenizer")
            .arg(tokenizer(family))
            .arg("--output")
            .arg(output)
            .args(args)
            .stderr(Stdio::piped());
        let (child, addr) = spawn_listening(&mut capture, "capturing on ");
        CaptureProcess { child, addr }
    }

    /// Waits for it to end by itself (`--max-requests`), at most a minute; its status and
    /// what it said.
    fn finish(mut self) -> (ExitStatus, String) {
        let until = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < until, "capture did not end");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut said = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        (status, said)
    }
}

impl Drop for CaptureProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `llmreplay replay --quiet` in dialect `api` through `capture` (add the trace and options
/// with `.args`).
fn replay_through(capture: &CaptureProcess, api: &str) -> std::process::Command {
    let mut cmd = bin();
    cmd.args(["replay", "--quiet", "--model", "m", "--api", api])
        .args(["--endpoint", &format!("http://{}", capture.addr)]);
    cmd
}

/// Runs `cmd`, which must exit 0 (else its stderr is the failure's message).
fn ran(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    out
}

/// One request on its own connection (it asks the server to close after the answer); the
/// whole answer.
fn ask(addr: &str, path: &str, headers: &str, body: &str) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{headers}\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
}

fn first_records(n: usize, dir: &Path) -> (PathBuf, Vec<Value>) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/traces/mooncake_conversation_500.jsonl"),
    )
    .unwrap();
    let records: Vec<Value> = text
        .lines()
        .take(n)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let path = dir.join("source.jsonl");
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, records)
}

fn lengths(r: &Value) -> (u64, u64) {
    (
        r["input_length"].as_u64().unwrap(),
        r["output_length"].as_u64().unwrap(),
    )
}

#[test]
fn a_replay_through_the_capture_comes_back_as_its_own_trace() {
    let dir = temp_dir("capture-round-trip");
    let (source, records) = first_records(30, &dir);
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "0"]);
    let captured = dir.join("captured.jsonl");
    // The source's block size, so that its ids and the capture's can be compared.
    let capture = CaptureProcess::start(
        &mock.url(),
        &captured,
        &["--max-requests", "30", "--block-size", "512"],
    );
    ran(replay_through(&capture, "openai-completions")
        .arg("--tokenizer")
        .arg(tokenizer("qwen3"))
        .args(["--time-scale", "20", "--trace"])
        .arg(&source)
        .arg("--output")
        .arg(dir.join("run")));
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    assert!(said.contains("capture: 30 requests in"), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), records.len());
    // Every length as the source's (the source's pairs are distinct: they name the record).
    let by_lengths: HashMap<(u64, u64), &Value> = records.iter().map(|r| (lengths(r), r)).collect();
    assert_eq!(by_lengths.len(), records.len());
    let pairs: Vec<(&Value, &Value)> = lines
        .iter()
        .map(|c| {
            let source = by_lengths
                .get(&lengths(c))
                .unwrap_or_else(|| panic!("no source record of the lengths of {c}"));
            (*source, c)
        })
        .collect();
    fidelity::share_as_their_sources(&pairs);
    // In arrival order, with what the proxy saw; no text.
    let times: Vec<f64> = lines
        .iter()
        .map(|l| l["timestamp"].as_f64().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]) && times[0] == 0.0,
        "{times:?}"
    );
    // Seconds (Qwen-Bailian's form), as the source's ms were sent at --time-scale 20: the
    // last source record is at 1.2 s of trace time.
    assert!(times[29] < 1.0, "{times:?}");
    for l in &lines {
        // The source has no conversations, and shared blocks make none.
        assert_eq!(
            (&l["parent_chat_id"], &l["turn"]),
            (&Value::from(-1), &Value::from(1)),
            "{l}"
        );
        assert_eq!(l["block_size"], 512, "{l}");
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(l["api"], "openai-completions");
        assert!(
            l["ttft_ms"].as_f64().is_some() && l["e2el_ms"].as_f64().is_some(),
            "{l}"
        );
        assert!(l.get("text_input").is_none() && l.get("prompt").is_none());
    }
    // And the capture replays: it is a trace, read at the block size it names.
    ran(replay_mock(&captured, &dir.join("again")).args([
        "--time-scale",
        "20",
        "--tokenizer",
        path(&tokenizer("qwen3")),
    ]));
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("again/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["format"], "bailian", "{run}");
    assert_eq!(run["block_size"], 512, "{run}");
    // Another block size than the one the ids cover is refused, naming the field.
    let refused = replay_mock(&captured, &dir.join("refused"))
        .args([
            "--block-size",
            "16",
            "--tokenizer",
            path(&tokenizer("qwen3")),
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("captured.jsonl:1: field `block_size`"),
        "{said}"
    );
}

#[test]
fn no_byte_of_a_prompt_tool_argument_or_header_value_is_kept() {
    let dir = temp_dir("capture-canary");
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3"))]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "2"]);
    let chat = serde_json::json!({
        "model": "m", "max_tokens": 4, "stream": true,
        "messages": [
            {"role": "system", "content": "You are CANARY-system."},
            {"role": "user", "content": "What is the weather in CANARY-city?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\": \"CANARY-argument\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "CANARY-result"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather",
            "description": "CANARY-description", "parameters": {"type": "object"}}}],
    });
    let headers = "authorization: Bearer CANARY-token\r\nx-team: CANARY-header\r\n";
    let answer = ask(
        &capture.addr,
        "/v1/chat/completions",
        headers,
        &chat.to_string(),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let completion = r#"{"model": "m", "max_tokens": 3, "prompt": "CANARY-completion"}"#;
    let answer = ask(&capture.addr, "/v1/completions", headers, completion);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let trace = std::fs::read_to_string(&captured).unwrap();
    assert_eq!(trace.lines().count(), 2, "{trace}\n{said}");
    for l in read_jsonl(&captured) {
        assert!(l["input_length"].as_u64().unwrap() > 3, "{l}");
        assert!(!l["hash_ids"].as_array().unwrap().is_empty(), "{l}");
    }
    for (what, text) in [("the trace", &trace), ("what it said", &said)] {
        assert!(!text.contains("CANARY"), "{what} holds text: {text}");
    }
}

#[test]
fn an_upstream_out_of_reach_is_a_502_and_a_record_and_the_proxy_serves_on() {
    let dir = temp_dir("capture-refused");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&upstream, &captured, &["--max-requests", "2"]);
    let body = r#"{"model": "m", "max_tokens": 3, "prompt": "hello there"}"#;
    for _ in 0..2 {
        let answer = ask(&capture.addr, "/v1/completions", "", body);
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(
            answer.contains("llmreplay capture: the upstream"),
            "{answer}"
        );
    }
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(
            (l["status"].as_u64(), l["error"].as_str()),
            (Some(502), Some("connect")),
            "{l}"
        );
        assert_eq!(
            l["output_length"], 3,
            "a failed request is replayed asking what it asked"
        );
    }
}

#[test]
fn a_client_that_leaves_mid_answer_ends_its_upstream_request_and_is_recorded() {
    let dir = temp_dir("capture-client-gone");
    // Long answers: the client leaves after the first event.
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "20"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "2"]);
    let body = r#"{"model": "m", "max_tokens": 500, "stream": true, "prompt": "tell a story"}"#;
    {
        let mut conn = TcpStream::connect(&capture.addr).unwrap();
        write!(
            conn,
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut first = [0u8; 256];
        let n = conn.read(&mut first).unwrap();
        assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    } // gone
    let short = r#"{"model": "m", "max_tokens": 2, "prompt": "and another"}"#;
    let answer = ask(&capture.addr, "/v1/completions", "", short);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the proxy serves on: {answer}"
    );
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["error"], "cancelled", "{}", lines[0]);
    assert_eq!(lines[0]["output_length"], 500);
    assert!(lines[1].get("error").is_none(), "{}", lines[1]);
}

#[test]
fn an_upstream_reset_mid_answer_is_a_record_and_the_next_request_is_served() {
    let dir = temp_dir("capture-reset");
    // Every answer is cut after half its tokens, the connection reset.
    let mock = MockProcess::start(&["--fault", "reset-mid-stream:1"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "2"]);
    let body = r#"{"model": "m", "max_tokens": 40, "stream": true, "prompt": "cut me off"}"#;
    for _ in 0..2 {
        let answer = ask(&capture.addr, "/v1/completions", "", body);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            !answer.contains("[DONE]"),
            "the cut reaches the client as it is: {answer}"
        );
    }
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert_eq!(l["error"], "reset", "{l}");
        assert_eq!(l["output_length"], 40, "replayed asking what it asked: {l}");
    }
}

#[test]
fn a_body_larger_than_the_proxy_takes_is_refused_with_413_and_the_proxy_serves_on() {
    let dir = temp_dir("capture-huge-body");
    let mock = MockProcess::start(&[]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "1"]);
    // The head announces 300 MiB; nothing of it needs to be sent for the answer.
    let mut conn = TcpStream::connect(&capture.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        300u64 << 20
    )
    .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let answer = ask(
        &capture.addr,
        "/v1/completions",
        "",
        r#"{"model": "m", "prompt": "ok"}"#,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    assert_eq!(read_jsonl(&captured).len(), 1);
}

#[test]
fn a_request_the_upstream_drops_on_a_kept_alive_connection_goes_again_once() {
    let dir = temp_dir("capture-drop-reused");
    // The mock closes a kept-alive connection unanswered when its next request comes, as
    // llama-server may.
    let mock = MockProcess::start(&["--fault", "drop-reused:1"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "6"]);
    let trace = text_trace(&dir, 6, 50, 4);
    let run = replay_through(&capture, "openai-completions")
        .args(["--connections", "1", "--num-sender", "1", "--trace"])
        .arg(&trace)
        .arg("--output")
        .arg(dir.join("run"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{said}");
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 6);
    for l in &lines {
        assert_eq!(
            (l["status"].as_u64(), l.get("error")),
            (Some(200), None),
            "{l}"
        );
    }
    let records = read_jsonl(&dir.join("run/requests.jsonl"));
    assert!(records.iter().all(|r| r["error"].is_null()), "{records:?}");
}

#[test]
fn a_signal_ends_the_capture_with_the_answers_in_flight_written() {
    let dir = temp_dir("capture-signal");
    // An answer of 40 tokens, 25 ms apart: still streaming when the signal comes.
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "25"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &[]);
    let body = r#"{"model": "m", "max_tokens": 40, "stream": true, "prompt": "count to forty"}"#;
    let mut conn = TcpStream::connect(&capture.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    let n = conn.read(&mut first).unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        unsafe { libc::kill(capture.child.id() as i32, libc::SIGINT) },
        0
    );
    let mut rest = String::new();
    let _ = conn.read_to_string(&mut rest);
    assert!(
        rest.contains("[DONE]"),
        "the answer in flight ends whole: {rest}"
    );
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    assert!(said.contains("capture: 1 requests in"), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (&lines[0]["status"], lines[0].get("error")),
        (&Value::from(200), None)
    );
}

#[test]
fn a_slow_client_and_a_100_mb_body_hold_up_nobody_and_are_recorded() {
    let dir = temp_dir("capture-slow-and-big");
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "0"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&mock.url(), &captured, &["--max-requests", "3"]);
    // A client that sends its head and stalls (a slowloris).
    let slow_body = r#"{"model": "m", "max_tokens": 2, "ignore_eos": true, "prompt": "slow"}"#;
    let mut slow = TcpStream::connect(&capture.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(slow, "POST /v1/completions HTTP/1.1\r\nhost: x\r\n").unwrap();
    // Meanwhile a body of 100 MiB (a short prompt beside 100 MiB of other fields) goes
    // through whole, and so does a small one.
    let big = format!(
        r#"{{"model": "m", "max_tokens": 3, "ignore_eos": true, "prompt": "big", "user": "{}"}}"#,
        "x".repeat(100 << 20)
    );
    let answer = ask(&capture.addr, "/v1/completions", "", &big);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    let small = r#"{"model": "m", "max_tokens": 4, "ignore_eos": true, "prompt": "small"}"#;
    let answer = ask(&capture.addr, "/v1/completions", "", small);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The slow client's request, finished a few bytes at a time, is answered too.
    let rest = format!(
        "connection: close\r\ncontent-length: {}\r\n\r\n{slow_body}",
        slow_body.len()
    );
    for piece in rest.as_bytes().chunks(7) {
        slow.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    let mut outputs: Vec<u64> = lines
        .iter()
        .map(|l| {
            assert_eq!(
                (&l["status"], l.get("error")),
                (&Value::from(200), None),
                "{l}"
            );
            // The big body's prompt is its `prompt`, not its size.
            assert!(l["input_length"].as_u64().unwrap() < 20, "{l}");
            l["output_length"].as_u64().unwrap()
        })
        .collect();
    outputs.sort_unstable();
    assert_eq!(outputs, [2, 3, 4]);
}

#[test]
fn client_connections_take_the_upstreams_in_turn() {
    let dir = temp_dir("capture-upstreams");
    let (one, two) = (MockProcess::start(&[]), MockProcess::start(&[]));
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(
        &one.url(),
        &captured,
        &["--upstream", &two.url(), "--max-requests", "4"],
    );
    let body = r#"{"model": "m", "max_tokens": 5, "ignore_eos": true, "prompt": "hi"}"#;
    for _ in 0..4 {
        let answer = ask(&capture.addr, "/v1/completions", "", body);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    assert_eq!(read_jsonl(&captured).len(), 4);
    // Each server generated for two of the four connections (its own counter says so).
    for mock in [&one, &two] {
        let mut conn = TcpStream::connect(mock.url().trim_start_matches("http://")).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut metrics = String::new();
        let _ = conn.read_to_string(&mut metrics);
        let generated = metrics
            .lines()
            .find(|l| l.starts_with("vllm:generation_tokens_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok());
        assert_eq!(generated, Some(10.0), "{metrics}");
    }
}

#[test]
fn clients_may_speak_https_to_the_capture() {
    let dir = temp_dir("capture-tls");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "0"]);
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(
        &mock.url(),
        &captured,
        &[
            "--max-requests",
            "5",
            "--tls-cert",
            path(&cert),
            "--tls-key",
            path(&key),
        ],
    );
    let trace = text_trace(&dir, 5, 20, 4);
    ran(bin()
        .args([
            "replay",
            "--quiet",
            "--model",
            "m",
            "--api",
            "openai-completions",
        ])
        .args(["--endpoint", &format!("https://{}", capture.addr)])
        .args(["--ca-cert", path(&cert), "--trace"])
        .arg(&trace)
        .arg("--output")
        .arg(dir.join("run")));
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 5);
    assert!(
        lines
            .iter()
            .all(|l| l["status"] == 200 && l.get("error").is_none()),
        "{lines:?}"
    );
}

#[test]
fn a_chunked_request_body_goes_upstream_unchanged_and_is_read_whole() {
    let dir = temp_dir("capture-chunked");
    // An upstream of our own: it keeps the bytes it is sent and answers with its own count.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", upstream.local_addr().unwrap());
    let mut request = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          transfer-encoding: chunked\r\n\r\n"
        .to_vec();
    for piece in [
        r#"{"model": "m", ""#,
        r#"max_tokens": 2, "prompt": "#,
        r#""chunked"}"#,
    ] {
        request.extend(format!("{:x}\r\n{piece}\r\n", piece.len()).bytes());
    }
    request.extend(b"0\r\n\r\n");
    let expected = request.len();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = vec![0u8; expected];
        conn.read_exact(&mut got).unwrap();
        let body = r#"{"choices": [{"index": 0, "text": "ok go", "finish_reason": "length"}], "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}"#;
        write!(
            conn,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        got
    });
    let captured = dir.join("captured.jsonl");
    let capture = CaptureProcess::start(&url, &captured, &["--max-requests", "1"]);
    let mut conn = TcpStream::connect(&capture.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    conn.write_all(&request).unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("ok go"),
        "{answer}"
    );
    assert_eq!(
        server.join().unwrap(),
        request,
        "the bytes the upstream got"
    );
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 1, "{said}");
    // Read whole: the server's count, and our own of the prompt `chunked`.
    assert_eq!(
        (&lines[0]["input_length"], &lines[0]["output_length"]),
        (&Value::from(7), &Value::from(2))
    );
    assert!(
        lines[0]["input_length_counted"]
            .as_u64()
            .is_some_and(|n| n < 7),
        "{}",
        lines[0]
    );
}
