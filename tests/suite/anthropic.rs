//! Anthropic Messages (`--api anthropic-messages`, `POST /v1/messages`): exact prompt and
//! output lengths against the mock, streamed and not, and the documented stream's events read
//! as a real server sends them (paced, so that TTFT and ITL come from `content_block_delta`).

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use common::{mooncake, path, read_jsonl, replay_in_process, temp_dir, tokenizer};
use llmreplay::mock::{MockConfig, MockServer, PromptCounting};

/// Synthetic prompts through the chat template, against the in-process mock of `--mock`:
/// every record's prompt is exactly its `input_length` tokens and its answer its
/// `output_length`, streamed (a `content_block_delta` per token) and not.
#[test]
fn exact_lengths_against_the_mock_streamed_and_not() {
    let trace = mooncake("conversation_trace.jsonl");
    for stream in [true, false] {
        let out = temp_dir(&format!("anthropic-{stream}")).join("run");
        let mut args: Vec<String> = [
            "--mock",
            "--api",
            "anthropic-messages",
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--trace",
            path(&trace),
            "--max-requests",
            "40",
            "--time-scale",
            "50",
            "--output",
            path(&out),
        ]
        .map(String::from)
        .into();
        if !stream {
            args.push("--no-stream".into());
        }
        let outcome = replay_in_process(&args);
        assert_eq!(outcome.summary.ok, 40, "stream={stream}");
        for r in read_jsonl(&out.join("requests.jsonl")) {
            assert_eq!(
                r["prompt_tokens"], r["input_tokens"],
                "stream={stream}: {r}"
            );
            assert_eq!(
                r["output_tokens"], r["output_tokens_target"],
                "stream={stream}: {r}"
            );
            let chunks = if stream {
                r["output_tokens"].clone()
            } else {
                Value::from(0)
            };
            assert_eq!(r["chunks"], chunks, "stream={stream}: {r}");
        }
    }
}

/// A stand-alone mock that counts with the real tokenizer and keeps a prefix cache: the
/// prompt's tokens come back split as Anthropic splits them (`input_tokens` and
/// `cache_read_input_tokens`), and llmreplay adds them up again and records the cached ones.
#[test]
fn cached_tokens_come_back_as_cache_reads_and_the_prompt_adds_up() {
    let dir = tokenizer("qwen3");
    let (tok, file) = llmreplay::prompt::load_tokenizer(&dir).unwrap();
    let counter = llmreplay::prompt::PromptCounter::new(tok, &file, None).unwrap();
    let cfg = MockConfig {
        counting: PromptCounting::Tokenizer(Arc::new(counter)),
        prefix_cache: Some((100_000, 16)),
        keep_bodies: 1,
        ..MockConfig::default()
    };
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out = temp_dir("anthropic-cache").join("run");
    let endpoint = format!("http://{}/v1/messages", mock.addr());
    let args: Vec<String> = [
        "--endpoint",
        &endpoint,
        "--tokenizer",
        path(&dir),
        "--trace",
        path(&mooncake("conversation_trace.jsonl")),
        "--max-requests",
        "40",
        "--time-scale",
        "50",
        "--output",
        path(&out),
    ]
    .map(String::from)
    .into();
    assert_eq!(replay_in_process(&args).summary.ok, 40);
    let stats = mock.stop().unwrap();
    assert_eq!(stats.requests_of("anthropic-messages"), 40);
    let body: Value = serde_json::from_str(&stats.bodies[0].1).unwrap();
    assert_eq!(stats.bodies[0].0, "/v1/messages");
    assert!(body["messages"][0]["content"].is_string() && body["max_tokens"].is_u64());
    let mut cached = 0;
    for r in read_jsonl(&out.join("requests.jsonl")) {
        assert_eq!(r["prompt_tokens"], r["input_tokens"], "{r}");
        let hit = r["cached_tokens"].as_u64().expect("cache reads reported");
        assert!(hit <= r["prompt_tokens"].as_u64().unwrap(), "{r}");
        cached += hit;
    }
    assert!(cached > 0, "the conversation's turns share their prefixes");
}

/// A server that answers every request with the fixture's events, one write per event with
/// `GAP` before each, then closes.
fn paced_server(events: Vec<String>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut seen = Vec::new();
            let mut buf = [0u8; 8192];
            while !String::from_utf8_lossy(&seen).contains("\"stream\":true}") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = conn.write_all(head.as_bytes());
            for event in &events {
                std::thread::sleep(GAP);
                let _ = conn.write_all(event.as_bytes());
            }
        }
    });
    format!("http://{addr}/v1/messages")
}

const GAP: Duration = Duration::from_millis(30);

#[test]
fn the_documented_stream_gives_ttft_and_itl_from_content_deltas_and_its_usage() {
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/stream.sse"
    ))
    .unwrap();
    let events: Vec<String> = fixture
        .split_inclusive("\n\n")
        .map(str::to_string)
        .collect();
    // The event (0-based) of each chunk of output, from the fixture itself.
    let output: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.contains("\"thinking_delta\"")
                || e.contains("\"text_delta\"")
                || (e.contains("\"input_json_delta\"") && !e.contains("\"partial_json\":\"\""))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(output.len(), 4);
    let endpoint = paced_server(events);
    let dir = temp_dir("anthropic-fixture");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"text_input\": \"the capital of France?\", \"output_length\": 9}\n",
    )
    .unwrap();
    let out = dir.join("run");
    let args: Vec<String> = [
        "--endpoint",
        &endpoint,
        "--model",
        "fixture-model",
        "--trace",
        path(&trace),
        "--record-itl",
        "--output",
        path(&out),
    ]
    .map(String::from)
    .into();
    let outcome = replay_in_process(&args);
    assert_eq!(outcome.summary.ok, 1);
    let r: Value = read_jsonl(&out.join("requests.jsonl")).remove(0);
    assert_eq!(r["chunks"], 4, "{r}");
    assert_eq!(
        (
            &r["prompt_tokens"],
            &r["cached_tokens"],
            &r["output_tokens"]
        ),
        (&Value::from(60), &Value::from(48), &Value::from(9)),
        "{r}"
    );
    // The server writes event i no sooner than (i + 1) GAPs after the request came, and a
    // read can only be late, never early: so each chunk's time is at least its own event's,
    // the first token is the first delta's event (not the head or message_start), and each
    // chunk is an event of its own. (Gaps between two reads are not bounded below: a read
    // delayed on a busy machine shortens the next gap.)
    let gap_ms = GAP.as_secs_f64() * 1e3;
    let sent = r["sent_ms"].as_f64().unwrap();
    let ttft = r["ttft_ms"].as_f64().unwrap();
    assert!(ttft >= (output[0] + 1) as f64 * gap_ms, "{r}");
    let times: Vec<f64> = r["chunk_times_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(times.len(), 4);
    for (k, t) in times.iter().enumerate() {
        assert!(
            t - sent >= (output[k] + 1) as f64 * gap_ms,
            "chunk {k}: {r}"
        );
    }
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{r}");
}
