//! Property tests of the parsers that face the network and the trace: whatever the input and
//! wherever it is split, they decode what was encoded, and on garbage they return an error
//! without panicking or buffering without bound.

use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;

use llmreplay::http::chunked::ChunkedDecoder;
use llmreplay::http::response::{ResponseHead, ResponseParser, ResponseSink, Step, MAX_HEAD};
use llmreplay::http::sse::{SseScanner, MAX_LINE};
use llmreplay::trace::{parse_record, Format, RawLine};

/// Splits `input` at the given (sorted, deduplicated, clamped) positions.
fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain(std::iter::once(input.len())) {
        out.push(&input[start..c]);
        start = c;
    }
    out
}

fn encode_chunked(chunks: &[Vec<u8>], extension: bool, trailer: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks.iter().filter(|c| !c.is_empty()) {
        out.extend_from_slice(format!("{:x}", c.len()).as_bytes());
        if extension {
            out.extend_from_slice(b";name=value");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    if trailer {
        out.extend_from_slice(b"X-Trailer: yes\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[derive(Default)]
struct Collect {
    heads: Vec<ResponseHead>,
    body: Vec<u8>,
}

impl ResponseSink for Collect {
    fn head(&mut self, head: &ResponseHead) {
        self.heads.push(head.clone());
    }
    fn body(&mut self, data: &[u8]) {
        self.body.extend_from_slice(data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chunked_decodes_at_any_split(
        chunks in vec(vec(any::<u8>(), 0..300), 0..8),
        extension: bool,
        trailer: bool,
        cuts in vec(any::<usize>(), 0..12),
    ) {
        let mut wire = encode_chunked(&chunks, extension, trailer);
        let encoded_len = wire.len();
        wire.extend_from_slice(b"NEXT RESPONSE");
        let mut d = ChunkedDecoder::default();
        let mut body = Vec::new();
        let mut consumed = 0;
        for piece in pieces(&wire, &cuts) {
            if d.is_done() {
                break;
            }
            consumed += d.feed(piece, |data| body.extend_from_slice(data)).unwrap();
        }
        prop_assert!(d.is_done());
        prop_assert_eq!(consumed, encoded_len, "stops right after the last chunk");
        prop_assert_eq!(body, chunks.concat());
    }

    #[test]
    fn chunked_garbage_is_an_error_or_data_never_a_panic(
        bytes in vec(any::<u8>(), 0..2000),
        cuts in vec(any::<usize>(), 0..8),
    ) {
        let mut d = ChunkedDecoder::default();
        let mut out = 0usize;
        for piece in pieces(&bytes, &cuts) {
            match d.feed(piece, |data| out += data.len()) {
                Ok(n) => prop_assert!(n <= piece.len()),
                Err(_) => break,
            }
        }
        prop_assert!(out <= bytes.len(), "no data is invented");
    }

    #[test]
    fn sse_hands_over_every_event_at_any_split(
        events in vec(vec(any::<u8>().prop_filter("no line ends", |b| *b != b'\n' && *b != b'\r'), 0..200), 0..10),
        crlf: bool,
        comments: bool,
        cuts in vec(any::<usize>(), 0..16),
    ) {
        let nl: &[u8] = if crlf { b"\r\n" } else { b"\n" };
        let mut wire = Vec::new();
        for e in &events {
            if comments {
                wire.extend_from_slice(b": keep-alive");
                wire.extend_from_slice(nl);
            }
            wire.extend_from_slice(b"data: ");
            wire.extend_from_slice(e);
            wire.extend_from_slice(nl);
            wire.extend_from_slice(nl);
        }
        let mut s = SseScanner::default();
        let mut got = Vec::new();
        for piece in pieces(&wire, &cuts) {
            s.feed(piece, |d| got.push(d.to_vec())).unwrap();
        }
        prop_assert_eq!(s.pending(), 0);
        // `data: ` loses one optional space: an event that itself starts with a space keeps
        // the rest, as the SSE spec says.
        prop_assert_eq!(got, events);
    }

    #[test]
    fn sse_buffers_at_most_one_line(
        bytes in vec(any::<u8>(), 0..4000),
        cuts in vec(any::<usize>(), 0..8),
    ) {
        let mut s = SseScanner::default();
        for piece in pieces(&bytes, &cuts) {
            if s.feed(piece, |_| {}).is_err() {
                break;
            }
            prop_assert!(s.pending() <= MAX_LINE);
            prop_assert!(s.pending() <= bytes.len());
        }
    }

    #[test]
    fn responses_frame_at_any_split(
        body in vec(any::<u8>(), 0..2000),
        chunked: bool,
        keep_alive: bool,
        extra_headers in 0usize..20,
        cuts in vec(any::<usize>(), 0..12),
    ) {
        let mut wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n".to_vec();
        for i in 0..extra_headers {
            wire.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "v".repeat(i * 7)).as_bytes());
        }
        if !keep_alive {
            wire.extend_from_slice(b"Connection: close\r\n");
        }
        if chunked {
            wire.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            let parts: Vec<Vec<u8>> = body.chunks(97).map(<[u8]>::to_vec).collect();
            wire.extend_from_slice(&encode_chunked(&parts, false, false));
        } else {
            wire.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            wire.extend_from_slice(&body);
        }
        let total = wire.len();
        wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let mut p = ResponseParser::default();
        let mut sink = Collect::default();
        let mut offset = 0;
        let mut done_at = None;
        for piece in pieces(&wire, &cuts) {
            match p.feed(piece, &mut sink).unwrap() {
                Step::NeedMore => offset += piece.len(),
                Step::Done { consumed } => {
                    done_at = Some(offset + consumed);
                    break;
                }
            }
        }
        prop_assert_eq!(done_at, Some(total));
        prop_assert_eq!(sink.heads.len(), 1);
        prop_assert_eq!(sink.heads[0].status, 200);
        prop_assert_eq!(sink.heads[0].keep_alive, keep_alive);
        prop_assert!(sink.heads[0].event_stream);
        prop_assert_eq!(sink.body, body);
    }

    #[test]
    fn response_garbage_never_panics_nor_grows_past_the_head_limit(
        prefix in prop_oneof![Just(b"".to_vec()), Just(b"HTTP/1.1 200 OK\r\n".to_vec())],
        bytes in vec(any::<u8>(), 0..3000),
        cuts in vec(any::<usize>(), 0..8),
    ) {
        let wire = [prefix, bytes].concat();
        let mut p = ResponseParser::default();
        let mut sink = Collect::default();
        for piece in pieces(&wire, &cuts) {
            match p.feed(piece, &mut sink) {
                Ok(Step::NeedMore) => {}
                Ok(Step::Done { consumed }) => {
                    prop_assert!(consumed <= piece.len());
                    break;
                }
                Err(_) => break,
            }
        }
        let _ = p.finish_at_eof();
        prop_assert!(sink.body.len() <= wire.len());
    }

    #[test]
    fn trace_lines_parse_or_name_file_and_line(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..300),
            record_like(),
        ],
        bailian: bool,
    ) {
        let raw = RawLine { line: 9, index: 0, bytes };
        let format = if bailian { Format::Bailian } else { Format::Mooncake };
        if let Err(e) = parse_record(&raw, format, Path::new("p.jsonl")) {
            let message = e.to_string();
            prop_assert!(message.starts_with("p.jsonl:9: "), "{}", message);
        }
    }
}

/// JSON objects with the trace's field names and values of random types and sizes.
fn record_like() -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:e}")),
        Just("null".to_string()),
        Just("\"text\"".to_string()),
        Just("[1, 2, -3]".to_string()),
        Just("[{\"role\": \"user\", \"content\": \"hi\"}]".to_string()),
        Just("{\"a\": 1}".to_string()),
        Just("1e400".to_string()),
        Just("true".to_string()),
    ];
    let field = prop_oneof![
        Just("timestamp"),
        Just("input_length"),
        Just("output_length"),
        Just("hash_ids"),
        Just("text_input"),
        Just("messages"),
        Just("tools"),
        Just("chat_id"),
        Just("parent_chat_id"),
        Just("session_id"),
        Just("extra"),
    ];
    vec((field, value), 0..8).prop_map(|pairs| {
        let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        format!("{{{}}}", body.join(", ")).into_bytes()
    })
}

/// A head that never ends (one endless header line) is refused once it passes the limit.
#[test]
fn endless_head_is_refused_at_the_limit() {
    let mut p = ResponseParser::default();
    let mut sink = Collect::default();
    p.feed(b"HTTP/1.1 200 OK\r\nX-Filler: ", &mut sink).unwrap();
    let piece = [b'a'; 1000];
    let mut fed = 0;
    loop {
        match p.feed(&piece, &mut sink) {
            Ok(Step::NeedMore) => fed += piece.len(),
            Ok(Step::Done { .. }) => panic!("no response in an endless head"),
            Err(e) => {
                assert!(e.to_string().contains("response head larger"), "{e}");
                break;
            }
        }
        assert!(fed <= MAX_HEAD + piece.len(), "buffered past the limit");
    }
}
