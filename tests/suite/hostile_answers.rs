//! Answers that are not answers: a success status whose body yields no output token, or that
//! the dialect cannot read, is a typed failure (`empty` or `protocol`) with the body's first
//! bytes in its message, and a run of nothing else fails.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;
use common::{bin, canned_server, read_jsonl, temp_dir, text_trace};

fn run(endpoint: &str, dir: &Path, name: &str, extra: &[&str]) -> (Output, Vec<Value>, Value) {
    let out = dir.join(name);
    let output = bin()
        .args(["replay", "--quiet", "--model", "m", "--endpoint", endpoint])
        .arg("--trace")
        .arg(text_trace(dir, 5, 1, 4))
        .arg("--output")
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    let records = read_jsonl(&out.join("requests.jsonl"));
    let summary = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).unwrap_or_else(|_| "{}".into()),
    )
    .unwrap();
    (output, records, summary)
}

/// Every record failed with `kind`, its message holding `excerpt`; the summary counts them and
/// the run's exit status says nothing succeeded.
fn all_failed(case: &str, got: (Output, Vec<Value>, Value), kind: &str, excerpt: &str) {
    let (output, records, summary) = got;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(records.len(), 5, "{case}: {stderr}");
    for r in &records {
        assert_eq!(r["error"]["kind"], kind, "{case}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(excerpt), "{case}: {message}");
    }
    assert_eq!(summary["requests"]["ok"], 0, "{case}");
    assert_eq!(summary["requests"]["by_error_kind"][kind], 5, "{case}");
    assert_eq!(
        output.status.code(),
        Some(llmreplay::NO_SUCCESS_EXIT_CODE),
        "{case}: {stderr}"
    );
    assert!(stderr.contains("no request succeeded"), "{case}: {stderr}");
}

fn head(content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn a_stream_of_only_done_is_empty() {
    let dir = temp_dir("answers-done");
    let url = canned_server(|_| head("text/event-stream", b"data: [DONE]\n\n"));
    let got = run(&format!("{url}/v1/chat/completions"), &dir, "run", &[]);
    all_failed("[DONE] only", got, "empty", "[DONE]");
}

#[test]
fn an_html_page_with_a_200_is_a_protocol_error_streamed_or_not() {
    let dir = temp_dir("answers-html");
    let url = canned_server(|_| head("text/html", b"<html><body>Welcome to nginx!</body></html>"));
    let endpoint = format!("{url}/v1/chat/completions");
    let got = run(&endpoint, &dir, "stream", &[]);
    all_failed("html, stream", got, "protocol", "Welcome to nginx");
    let got = run(&endpoint, &dir, "whole", &["--no-stream"]);
    all_failed("html, whole body", got, "protocol", "Welcome to nginx");
}

#[test]
fn gzip_bytes_with_a_200_are_a_protocol_error() {
    let dir = temp_dir("answers-gzip");
    let url = canned_server(|_| {
        head(
            "application/json",
            &[
                0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, b'x', b'y',
            ],
        )
    });
    let endpoint = format!("{url}/v1/completions");
    let got = run(&endpoint, &dir, "whole", &["--no-stream"]);
    all_failed("gzip body", got, "protocol", "not openai-completions JSON");
}

#[test]
fn a_json_answer_without_text_or_usage_is_empty() {
    let dir = temp_dir("answers-nothing");
    let url = canned_server(|_| {
        head(
            "application/json",
            br#"{"choices":[{"message":{"content":""}}],"usage":{"prompt_tokens":3,"completion_tokens":0}}"#,
        )
    });
    let got = run(
        &format!("{url}/v1/chat/completions"),
        &dir,
        "run",
        &["--no-stream"],
    );
    all_failed("no text", got, "empty", "completion_tokens");
}

/// The TGI dialect pointed at a server that answers OpenAI chunks on every path reads no token
/// in its events; the chat dialect reads every one.
#[test]
fn the_tgi_dialect_against_an_openai_server_is_empty() {
    let dir = temp_dir("answers-tgi");
    let url = canned_server(|_| {
        let mut body = String::new();
        for word in ["a", "b", "c", "d"] {
            body += &format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" {word}\"}}}}]}}\n\n"
            );
        }
        body += "data: [DONE]\n\n";
        head("text/event-stream", body.as_bytes())
    });
    let got = run(&url, &dir, "tgi", &["--api", "tgi"]);
    all_failed("tgi at openai", got, "empty", "4 were asked for");
    let (output, records, _) = run(&format!("{url}/v1/chat/completions"), &dir, "chat", &[]);
    assert!(output.status.success());
    assert!(records
        .iter()
        .all(|r| r["error"].is_null() && r["output_tokens"] == 4));
}

/// A 500 whose message carries terminal escapes (retitle, clear the screen, a bidirectional
/// override) and runs long: every text output shows it whole and escaped, and not one raw
/// control byte reaches the terminal, summary.txt or report.html.
#[test]
fn a_server_message_with_terminal_escapes_is_shown_whole_and_escaped() {
    let dir = temp_dir("answers-ansi");
    const TAIL: &str = "the-end-of-a-long-message";
    let url = canned_server(|_| {
        let body = format!(
            "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mout of memory\u{202e} {} {TAIL}",
            "x".repeat(120)
        );
        let mut r = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body.as_bytes());
        r
    });
    let out = dir.join("run");
    let output = bin()
        .args(["replay", "--model", "m", "--endpoint"])
        .arg(format!("{url}/v1/chat/completions"))
        .arg("--trace")
        .arg(text_trace(&dir, 5, 1, 4))
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let shown = "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{1b}[31mout of memory\\u{202e} ";
    let texts = [
        ("stdout", output.stdout.clone()),
        ("stderr", output.stderr.clone()),
        (
            "summary.txt",
            std::fs::read(out.join("summary.txt")).unwrap(),
        ),
        (
            "report.html",
            std::fs::read(out.join("report.html")).unwrap(),
        ),
    ];
    for (name, bytes) in texts {
        let text = String::from_utf8_lossy(&bytes);
        let raw = text
            .chars()
            .find(|&c| (c.is_control() && c != '\n') || c == '\u{202e}');
        assert_eq!(raw, None, "{name} carries a raw control character: {text}");
        if name != "report.html" {
            assert!(text.contains(shown), "{name}: {text}");
            assert!(
                text.contains(TAIL),
                "{name} shows the whole message: {text}"
            );
        }
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("out of memory"),
        "report.html names the error"
    );
}

/// An error event after the first tokens ends the request as failed in every dialect, in the
/// shapes the servers document: Anthropic's `event: error` (`{"type": "error", ...}`, spaces
/// after the colons as in its documentation), OpenAI-style `{"object": "error", ...}` (vLLM)
/// and `{"error": {...}}`.
#[test]
fn an_error_event_after_the_first_tokens_fails_the_request_in_every_dialect() {
    let dir = temp_dir("answers-error-event");
    let anthropic = canned_server(|_| {
        let mut body = String::from(
            "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"usage\": {\"input_tokens\": 3, \"output_tokens\": 1}}}\n\n\
             event: content_block_start\ndata: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n",
        );
        for word in ["a", "b"] {
            body += &format!(
                "event: content_block_delta\ndata: {{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {{\"type\": \"text_delta\", \"text\": \" {word}\"}}}}\n\n"
            );
        }
        body += "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        head("text/event-stream", body.as_bytes())
    });
    let got = run(&format!("{anthropic}/v1/messages"), &dir, "anthropic", &[]);
    all_failed("anthropic error event", got, "http", "Overloaded");
    let object_error: fn(&[u8]) -> Vec<u8> =
        |_| chat_stream_ending_in(r#"{"object": "error", "message": "boom", "code": 500}"#);
    let error_object: fn(&[u8]) -> Vec<u8> =
        |_| chat_stream_ending_in(r#"{ "error": {"message": "boom", "code": 500}}"#);
    for (case, answer) in [
        ("object error", object_error),
        ("error object", error_object),
    ] {
        let endpoint = format!("{}/v1/chat/completions", canned_server(answer));
        let got = run(&endpoint, &dir, case, &[]);
        all_failed(case, got, "http", "boom");
    }
}

/// Two chat chunks, then `error` as an event.
fn chat_stream_ending_in(error: &str) -> Vec<u8> {
    let mut body = String::new();
    for word in ["a", "b"] {
        body += &format!(
            "data: {{\"choices\": [{{\"index\": 0, \"delta\": {{\"content\": \" {word}\"}}}}]}}\n\n"
        );
    }
    body += &format!("data: {error}\n\ndata: [DONE]\n\n");
    head("text/event-stream", body.as_bytes())
}

/// A model name with control characters reaches neither the terminal nor a page as it is: a
/// server naming one in `/v1/models` is refused with the name escaped, and one given with
/// `--model` is escaped in report.html.
#[test]
fn a_model_name_with_control_characters_is_never_shown_raw() {
    let dir = temp_dir("answers-model-escape");
    let url = canned_server(|_| {
        head(
            "application/json",
            br#"{"data":[{"id":"evil\u001b]0;owned\u0007\u001b[2J"}]}"#,
        )
    });
    let o = bin()
        .args([
            "replay",
            "--endpoint",
            &format!("{url}/v1/chat/completions"),
        ])
        .arg("--trace")
        .arg(text_trace(&dir, 2, 1, 4))
        .arg("--output")
        .arg(dir.join("refused"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(r"evil\u{1b}]0;owned\u{7}"), "{stderr}");
    assert!(!stderr.contains('\u{1b}') && !String::from_utf8_lossy(&o.stdout).contains('\u{1b}'));

    let out = dir.join("given");
    let o = bin()
        .args(["replay", "--mock", "--model", "m\u{1b}[2Jx"])
        .arg("--trace")
        .arg(text_trace(&dir, 2, 1, 4))
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains(r"m\u{1b}[2Jx"), "the model is shown, escaped");
    assert!(!html.contains('\u{1b}'));
}
