//! Golden streams: each server's documented stream shapes (`tests/fixtures/streams/`, and
//! Anthropic's in `tests/fixtures/anthropic/`), read event by event through the sender's own
//! state machine with no socket (`llmreplay::sender::read_response`). Event k of a fixture
//! arrives k+1 ms after the send, so every time below is the fixture's own event order.
//!
//! What is judged, per dialect: TTFT is the first output of any kind (reasoning included, as
//! vLLM's benchmark and AIPerf define it), TTFO the first answer token after the reasoning,
//! reasoning and answer tokens, tool calls, usage and cached tokens.

use llmreplay::api::Api;
use llmreplay::record::RequestRecord;
use llmreplay::sender::read_response;

const SENT_NS: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// The fixture's events, one per read after the head, chunked as a server sends them.
fn read(path: &str, api: &str) -> RequestRecord {
    let api: Api = api.parse().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let mut reads = vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec(),
    ];
    for event in text.split_inclusive("\n\n") {
        reads.push(format!("{:x}\r\n{event}\r\n", event.len()).into_bytes());
    }
    reads.last_mut().unwrap().extend_from_slice(b"0\r\n\r\n");
    let timed = reads
        .iter()
        .enumerate()
        .map(|(k, r)| (&r[..], SENT_NS + k as u64 * MS));
    read_response(api, SENT_NS, None, timed)
}

/// What a fixture holds: the events (0-based) of its first output and first answer, its
/// chunks of output, tokens, reasoning tokens and tool calls, and its usage.
struct Holds {
    first_output: u64,
    first_answer: Option<u64>,
    chunks: u64,
    output_tokens: u64,
    reasoning_tokens: Option<u64>,
    tool_calls: Option<u64>,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    /// The server's own prompt time (llama.cpp's `timings.prompt_ms`).
    server_prefill_ms: Option<f64>,
}

/// A golden stream: its directory under tests/fixtures, file and dialect, and what it holds.
struct Golden {
    dir: &'static str,
    file: &'static str,
    api: &'static str,
    holds: Holds,
}

/// Every golden stream (SOURCE.md beside them says where each shape comes from).
const GOLDEN: &[Golden] = &[
    // vLLM since 0.10 streams thinking as `delta.reasoning`: it is output (TTFT at the first
    // reasoning delta, not 5 events later), and the answer's first token is the TTFO.
    Golden {
        dir: "streams",
        file: "vllm-reasoning.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 1,
            first_answer: Some(6),
            chunks: 11,
            output_tokens: 11,
            reasoning_tokens: Some(5),
            tool_calls: None,
            prompt_tokens: Some(1040),
            cached_tokens: Some(1024),
            server_prefill_ms: None,
        },
    },
    // vLLM's tool-call parser: the call's first delta has its id and name but no arguments
    // (not output); each argument piece is a chunk; usage with cached tokens.
    Golden {
        dir: "streams",
        file: "vllm-tool-calls.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 2,
            first_answer: None,
            chunks: 4,
            output_tokens: 28,
            reasoning_tokens: None,
            tool_calls: Some(1),
            prompt_tokens: Some(310),
            cached_tokens: Some(304),
            server_prefill_ms: None,
        },
    },
    // SGLang (and vLLM before 0.10, llama.cpp, DeepSeek's API) write `reasoning_content`,
    // with `null` beside it in the other field.
    Golden {
        dir: "streams",
        file: "sglang-reasoning.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 1,
            first_answer: Some(4),
            chunks: 5,
            output_tokens: 5,
            reasoning_tokens: Some(3),
            tool_calls: None,
            prompt_tokens: Some(980),
            cached_tokens: Some(960),
            server_prefill_ms: None,
        },
    },
    // An answer cut inside its thinking is a success with a TTFT and no TTFO, its reasoning
    // count the server's `completion_tokens_details.reasoning_tokens`.
    Golden {
        dir: "streams",
        file: "ended-in-thinking.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 1,
            first_answer: None,
            chunks: 4,
            output_tokens: 4,
            reasoning_tokens: Some(4),
            tool_calls: None,
            prompt_tokens: Some(20),
            cached_tokens: None,
            server_prefill_ms: None,
        },
    },
    // OpenAI's streamed parallel tool calls: argument deltas are output, each call is counted
    // once, and `reasoning_tokens: 0` from a model that does not reason is no reasoning.
    Golden {
        dir: "streams",
        file: "openai-tool-calls.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 2,
            first_answer: None,
            chunks: 3,
            output_tokens: 37,
            reasoning_tokens: None,
            tool_calls: Some(2),
            prompt_tokens: Some(82),
            cached_tokens: Some(0),
            server_prefill_ms: None,
        },
    },
    // A real llama-server's chat stream (captured with its timing): `content: null` first,
    // `timings` and cached tokens in the last event.
    Golden {
        dir: "streams",
        file: "llamacpp-chat.sse",
        api: "openai-chat",
        holds: Holds {
            first_output: 1,
            first_answer: None,
            chunks: 8,
            output_tokens: 8,
            reasoning_tokens: None,
            tool_calls: None,
            prompt_tokens: Some(34),
            cached_tokens: Some(33),
            server_prefill_ms: Some(16.247),
        },
    },
    // Its completions stream: `text` per event, usage in the last text event (empty text).
    Golden {
        dir: "streams",
        file: "llamacpp-completions.sse",
        api: "openai-completions",
        holds: Holds {
            first_output: 0,
            first_answer: None,
            chunks: 8,
            output_tokens: 8,
            reasoning_tokens: None,
            tool_calls: None,
            prompt_tokens: Some(5),
            cached_tokens: Some(4),
            server_prefill_ms: Some(14.678),
        },
    },
    // Its /v1/messages stream: Anthropic's events, the prompt split into `input_tokens` and
    // `cache_read_input_tokens`.
    Golden {
        dir: "streams",
        file: "llamacpp-messages.sse",
        api: "anthropic-messages",
        holds: Holds {
            first_output: 2,
            first_answer: None,
            chunks: 8,
            output_tokens: 8,
            reasoning_tokens: None,
            tool_calls: None,
            prompt_tokens: Some(34),
            cached_tokens: Some(33),
            server_prefill_ms: None,
        },
    },
    // TGI's /generate_stream: `data:` with no space, a token per event (the last one the
    // special end-of-sequence token, counted as generated_tokens counts it), no prompt count.
    Golden {
        dir: "streams",
        file: "tgi.sse",
        api: "tgi",
        holds: Holds {
            first_output: 0,
            first_answer: None,
            chunks: 8,
            output_tokens: 8,
            reasoning_tokens: None,
            tool_calls: None,
            prompt_tokens: None,
            cached_tokens: None,
            server_prefill_ms: None,
        },
    },
    // Anthropic Messages: a thinking block, then text, then a tool call.
    Golden {
        dir: "anthropic",
        file: "stream.sse",
        api: "anthropic-messages",
        holds: Holds {
            first_output: 3,
            first_answer: Some(7),
            chunks: 4,
            output_tokens: 9,
            reasoning_tokens: Some(1),
            tool_calls: Some(1),
            prompt_tokens: Some(60),
            cached_tokens: Some(48),
            server_prefill_ms: None,
        },
    },
];

fn golden(file: &str) -> &'static Golden {
    GOLDEN.iter().find(|g| g.file == file).unwrap()
}

fn path(g: &Golden) -> String {
    format!(
        "{}/tests/fixtures/{}/{}",
        env!("CARGO_MANIFEST_DIR"),
        g.dir,
        g.file
    )
}

/// Judges `r` against what `g` holds; `at(k)` is when event k arrived (ms after the send), or
/// at least when, for a record read over a socket.
fn judge(g: &Golden, r: &RequestRecord, at: impl Fn(u64) -> f64, exact: bool) {
    let (file, h) = (g.file, &g.holds);
    assert!(r.ok(), "{file}: {:?}", r.error);
    let same_or_after = |got: Option<f64>, want: Option<f64>, what: &str| match (got, want) {
        (Some(got), Some(want)) if !exact => assert!(got >= want, "{file}: {what} {got} < {want}"),
        _ => assert_eq!(got, want, "{file}: {what}"),
    };
    same_or_after(r.ttft_ms(), Some(at(h.first_output)), "TTFT");
    assert_eq!(r.chunks, h.chunks, "{file}: chunks");
    assert_eq!(r.output_tokens, Some(h.output_tokens), "{file}: output");
    assert_eq!(r.reasoning_tokens, h.reasoning_tokens, "{file}: reasoning");
    assert_eq!(r.tool_calls, h.tool_calls, "{file}: tool calls");
    assert_eq!(r.prompt_tokens, h.prompt_tokens, "{file}: prompt");
    assert_eq!(r.cached_tokens, h.cached_tokens, "{file}: cached");
    // Where its TTFT went, as the server timed it: the rest is outside the server.
    let server = r.server.as_ref().and_then(|s| s.prefill_ms);
    assert_eq!(server, h.server_prefill_ms, "{file}: server prefill");
    if let (Some(ttft), Some(prefill)) = (r.ttft_ms(), server) {
        assert_eq!(r.server_ttft_ms(), Some(prefill), "{file}");
        assert_eq!(r.ttft_outside_server_ms(), Some(ttft - prefill), "{file}");
    }
    match h.reasoning_tokens {
        // A reasoning answer has a TTFO at its first answer token, or none at all.
        Some(reasoning) => {
            same_or_after(r.ttfo_ms(), h.first_answer.map(&at), "TTFO");
            assert_eq!(r.ended_in_thinking(), h.first_answer.is_none(), "{file}");
            // Reasoning TPOT: the first output to the first answer token over the reasoning
            // tokens (the gaps between, when the answer ended in its thinking).
            if exact {
                let first = at(h.first_output);
                let tpot = match h.first_answer {
                    Some(a) => Some((at(a) - first) / reasoning as f64),
                    None => r.e2el_ms().map(|e| (e - first) / (reasoning - 1) as f64),
                };
                assert_eq!(r.tpot_reasoning_ms(), tpot, "{file}: reasoning TPOT");
            }
        }
        // Without reasoning the first output is the answer: no TTFO apart.
        None => assert_eq!((r.ttfo_ms(), r.first_answer_ns), (None, None), "{file}"),
    }
}

/// Read in this process through the sender's state machine: event k at k+1 ms.
fn check(file: &str) {
    let g = golden(file);
    let r = read(&path(g), g.api);
    judge(g, &r, |event| (event + 1) as f64, true);
}

#[test]
fn vllm_reasoning_deltas_are_output_and_the_answer_starts_the_ttfo() {
    check("vllm-reasoning.sse");
}

#[test]
fn vllm_tool_call_arguments_are_output_and_the_call_counted() {
    check("vllm-tool-calls.sse");
}

#[test]
fn sglang_reasoning_content_is_output_beside_null_content() {
    check("sglang-reasoning.sse");
}

#[test]
fn an_answer_that_ends_in_its_thinking_has_a_ttft_and_no_ttfo() {
    check("ended-in-thinking.sse");
}

#[test]
fn streamed_tool_calls_are_output_and_counted() {
    check("openai-tool-calls.sse");
}

#[test]
fn real_llama_server_streams_of_chat_completions_and_messages() {
    for file in [
        "llamacpp-chat.sse",
        "llamacpp-completions.sse",
        "llamacpp-messages.sse",
    ] {
        check(file);
    }
}

#[test]
fn tgi_tokens_are_chunks_and_details_the_count() {
    check("tgi.sse");
}

#[test]
fn anthropic_thinking_then_text_then_a_tool_call() {
    check("stream.sse");
}

/// Every golden stream, sent by `mock --replay-stream` over a socket, byte for byte and at its
/// own times (`: at_ms=` comments, which the client must skip), to a replay in its dialect:
/// the record holds what the fixture holds, and no time is earlier than the fixture's.
#[test]
fn every_golden_stream_replayed_by_the_mock_reads_the_same_over_a_socket() {
    let dir = crate::common::temp_dir("golden-mock");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        r#"{"timestamp": 0, "text_input": "a b c", "output_length": 8}"#,
    )
    .unwrap();
    let (ttft_ms, itl_ms) = (3.0, 2.0);
    for g in GOLDEN {
        let text = std::fs::read_to_string(path(g)).unwrap();
        let fixture = llmreplay::mock::StreamFixture::parse(
            &text,
            (ttft_ms * 1e6) as u64,
            (itl_ms * 1e6) as u64,
        )
        .unwrap();
        let at = |k: u64| fixture.events[k as usize].0 as f64 / 1e6;
        let mock = crate::common::MockProcess::start(&[
            "--replay-stream",
            &path(g),
            "--ttft-ms",
            "3",
            "--itl-ms",
            "2",
        ]);
        let out = dir.join(g.file);
        let mut cmd = crate::common::replay_against(&mock, &trace, &out);
        cmd.args(["--api", g.api, "--record-itl"]);
        assert!(cmd.status().unwrap().success(), "{}", g.file);
        let rows = crate::common::read_jsonl(&out.join("requests.jsonl"));
        let r: RequestRecord = serde_json::from_value(rows[0].clone()).unwrap();
        judge(g, &r, at, false);
        assert_eq!(
            r.chunk_times_ns.as_ref().map(Vec::len),
            Some(g.holds.chunks as usize),
            "{}",
            g.file
        );
    }
}

/// The whole path: `mock --reasoning-tokens 3` streams each answer's first 3 tokens as
/// reasoning (openai-chat's `reasoning_content`, Anthropic's thinking block). An answer of 6 tokens has 3 of each and its TTFO at its 4th chunk; one of 2
/// ends in its thinking; summary.json counts both, streamed and not.
#[test]
fn a_replay_of_a_reasoning_server_counts_ttfo_and_answers_ended_in_thinking() {
    let mock = crate::common::MockProcess::start(&["--reasoning-tokens", "3", "--itl-ms", "1"]);
    let dir = crate::common::temp_dir("reasoning");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..6)
        .map(|i| {
            let out = if i % 3 == 0 { 2 } else { 6 };
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c", "output_length": {out}}}"#,
                i * 5
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    // Anthropic's whole answers say nothing of their reasoning's size: streamed only.
    for (api, stream) in [
        ("openai-chat", true),
        ("openai-chat", false),
        ("anthropic-messages", true),
    ] {
        let out = dir.join(format!("run-{api}-{stream}"));
        let mut cmd = crate::common::replay_against(&mock, &trace, &out);
        cmd.args(["--record-itl", "--api", api]);
        if !stream {
            cmd.arg("--no-stream");
        }
        assert!(cmd.status().unwrap().success());
        for r in crate::common::read_jsonl(&out.join("requests.jsonl")) {
            assert_eq!(r["status"], 200, "{r}");
            let long = r["output_tokens"] == 6;
            assert_eq!(r["reasoning_tokens"], if long { 3 } else { 2 }, "{r}");
            match (long, stream) {
                (true, true) => {
                    assert_eq!(r["first_answer_ms"], r["chunk_times_ms"][3], "{r}");
                    // Later or, when the chunks came in one read, at the same time.
                    assert!(r["ttfo_ms"].as_f64() >= r["ttft_ms"].as_f64(), "{r}");
                }
                // A whole answer arrives at once: its first answer token with it.
                (true, false) => assert_eq!(r["ttfo_ms"], r["ttft_ms"], "{r}"),
                (false, _) => assert!(r["first_answer_ms"].is_null() && r["ttfo_ms"].is_null()),
            }
        }
        let summary = crate::common::read_json(&out.join("summary.json"));
        let r = &summary["reasoning"];
        assert_eq!(r["answers_reasoned"], 6, "{summary}");
        assert_eq!(r["ended_in_thinking"], 2, "{summary}");
        assert_eq!(r["reasoning_tokens"], 2 * 2 + 4 * 3);
        assert_eq!(r["answer_tokens"], 4 * 3);
        assert_eq!(summary["ttfo_ms"]["count"], 4, "{summary}");
        // ITL and TPOT split by kind, one chunk a token: a long answer has 2 gaps inside its
        // reasoning and 3 in its answer (the first answer chunk's gap is the answer's); a short
        // one, 1 inside its reasoning.
        let count = |key: &str| summary[key]["count"].as_u64();
        if stream {
            assert_eq!(count("itl_ms"), Some(4 * 5 + 2), "{summary}");
            assert_eq!(count("itl_reasoning_ms"), Some(4 * 2 + 2), "{summary}");
            assert_eq!(count("itl_answer_ms"), Some(4 * 3), "{summary}");
            assert_eq!(count("tpot_reasoning_ms"), Some(6), "{summary}");
            assert_eq!(count("tpot_answer_ms"), Some(4), "{summary}");
        } else {
            for key in ["itl_reasoning_ms", "tpot_reasoning_ms", "tpot_answer_ms"] {
                assert_eq!(count(key), None, "{key}: {summary}");
            }
        }
    }
}
