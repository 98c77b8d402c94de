//! Every API dialect, streamed and not, against the mock: the bodies the mock received say
//! what was asked, and the records say what came back. A full API URL picks its dialect.

use clap::Parser;
use serde_json::{json, Value};

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::{MockConfig, MockServer, MockStats};

const RECORDS: u64 = 12;
const OUTPUT: u64 = 6;

/// Replays a small text trace against a fresh in-process mock; returns the records and what
/// the mock saw.
fn run(name: &str, endpoint: impl Fn(&str) -> String, extra: &[&str]) -> (Vec<Value>, MockStats) {
    let dir = temp_dir(name);
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| {
            json!({"timestamp": i * 10, "text_input": "one two three four five",
                   "input_length": 5, "output_length": OUTPUT})
            .to_string()
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let cfg = MockConfig {
        ttft_ns: 2_000_000,
        itl_ns: 2_000_000, // gaps a loaded machine does not swallow: the chunks stay apart
        keep_bodies: 100,
        ..MockConfig::default()
    };
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out = dir.join("run");
    let mut args: Vec<String> = ["llmreplay", "replay", "--quiet", "--endpoint"]
        .map(String::from)
        .into();
    args.push(endpoint(&mock.addr().to_string()));
    args.extend(["--trace".into(), trace.display().to_string()]);
    args.extend(["--output".into(), out.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let cli = llmreplay::cli::Cli::parse_from(args);
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    let outcome =
        llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
            .unwrap();
    assert_eq!(outcome.summary.ok, RECORDS, "{name}");
    (
        read_jsonl(&out.join("requests.jsonl")),
        mock.stop().unwrap(),
    )
}

#[test]
fn each_api_streamed_and_not_sends_its_body_and_reads_its_answer() {
    for api in ["openai-chat", "openai-completions", "tgi"] {
        for stream in [true, false] {
            let what = format!("{api} stream={stream}");
            let mut extra = vec!["--api", api];
            if !stream {
                extra.push("--no-stream");
            }
            let (records, stats) = run(
                &format!("dialect-{api}-{stream}"),
                |addr| format!("http://{addr}"),
                &extra,
            );
            let per_dialect = (
                stats.requests_of("openai-chat"),
                stats.requests_of("openai-completions"),
                stats.requests_of("tgi"),
            );
            let expected = match api {
                "openai-chat" => (RECORDS, 0, 0),
                "openai-completions" => (0, RECORDS, 0),
                _ => (0, 0, RECORDS),
            };
            assert_eq!(per_dialect, expected, "{what}");
            let (path, body) = &stats.bodies[0];
            let body: Value = serde_json::from_str(body).unwrap();
            match api {
                "openai-chat" => {
                    assert_eq!(path, "/v1/chat/completions");
                    assert_eq!(body["messages"][0]["content"], "one two three four five");
                    assert_eq!(
                        (&body["max_tokens"], &body["min_tokens"]),
                        (&json!(OUTPUT), &json!(OUTPUT))
                    );
                    assert_eq!(body["ignore_eos"], true);
                    assert_eq!(body["stream"], stream, "{what}");
                }
                "openai-completions" => {
                    assert_eq!(path, "/v1/completions");
                    assert_eq!(body["prompt"], "one two three four five");
                    assert_eq!(body["max_tokens"], OUTPUT);
                    assert_eq!(body["stream"], stream, "{what}");
                }
                _ => {
                    assert_eq!(
                        path,
                        if stream {
                            "/generate_stream"
                        } else {
                            "/generate"
                        }
                    );
                    assert_eq!(body["inputs"], "one two three four five");
                    assert_eq!(body["parameters"]["max_new_tokens"], OUTPUT);
                    assert_eq!(body["parameters"]["details"], true);
                    assert!(body.get("model").is_none(), "TGI bodies name no model");
                }
            }
            if stream && api != "tgi" {
                assert_eq!(body["stream_options"]["include_usage"], true, "{what}");
            }
            for r in &records {
                assert_eq!(r["status"], 200, "{what}: {r}");
                assert_eq!(r["output_tokens"], OUTPUT, "{what}: {r}");
                let (ttft, e2el) = (
                    r["ttft_ms"].as_f64().unwrap(),
                    r["e2el_ms"].as_f64().unwrap(),
                );
                if stream {
                    assert_eq!(r["chunks"], OUTPUT, "{what}: one token per chunk");
                    // Equal when a late mock's tokens all come in one read (a busy machine).
                    assert!(ttft >= 2.0 && ttft <= e2el, "{what}: {r}");
                } else {
                    assert_eq!(
                        ttft, e2el,
                        "{what}: a whole answer's first token is its end"
                    );
                }
                // OpenAI servers report the prompt's tokens; TGI's stream does not.
                let prompt = if api == "tgi" { Value::Null } else { json!(5) };
                assert_eq!(r["prompt_tokens"], prompt, "{what}: {r}");
            }
        }
    }
}

/// trace-replayer's habit: the endpoint is the whole API URL, and no --api is given.
#[test]
fn a_full_api_url_picks_its_dialect() {
    for (path, expected) in [
        ("/generate_stream", (0, 0, RECORDS)),
        ("/v1/completions", (0, RECORDS, 0)),
        ("/v1/chat/completions", (RECORDS, 0, 0)),
    ] {
        let (records, stats) = run(
            &format!("full-url{}", path.replace('/', "-")),
            |addr| format!("http://{addr}{path}"),
            &[],
        );
        assert_eq!(
            (
                stats.requests_of("openai-chat"),
                stats.requests_of("openai-completions"),
                stats.requests_of("tgi")
            ),
            expected,
            "{path}"
        );
        assert!(
            records.iter().all(|r| r["output_tokens"] == OUTPUT),
            "{path}"
        );
    }
}

/// A recorded conversation's images, written by the trace in either form, go to each dialect
/// in its own (OpenAI `image_url` parts, Anthropic `image` blocks), and the mock takes both.
#[test]
fn images_are_sent_in_the_form_of_the_dialect() {
    let dir = temp_dir("images");
    let trace = dir.join("images.jsonl");
    let openai =
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    let anthropic =
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}});
    let lines = [
        json!({"timestamp": 0, "output_length": 3, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"}, openai]}]}),
        json!({"timestamp": 5, "output_length": 3, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "And in this one?"}, anthropic]}]}),
    ];
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&trace, text.join("\n")).unwrap();
    for (api, kind, form) in [
        ("openai-chat", "image_url", ["image_url", "url"]),
        ("anthropic-messages", "image", ["source", "type"]),
    ] {
        let out = dir.join(api);
        let ran = common::replay_mock(&trace, &out)
            .args(["--api", api, "--save-prompts"])
            .output()
            .unwrap();
        assert!(
            ran.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let records = read_jsonl(&out.join("requests.jsonl"));
        assert!(
            records
                .iter()
                .all(|r| r["status"] == 200 && r["error"].is_null()),
            "{api}"
        );
        for sent in read_jsonl(&out.join("prompts.jsonl")) {
            let image = &sent["messages"][0]["content"][1];
            assert_eq!(image["type"], kind, "{api}: {sent}");
            assert!(!image[form[0]][form[1]].is_null(), "{api}: {image}");
        }
    }
}
