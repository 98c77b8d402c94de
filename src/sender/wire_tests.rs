use super::*;

const SENT_NS: u64 = 1_000_000;
const MS: u64 = 1_000_000;

/// An OpenAI chat stream, chunked: three content events, the usage event, `[DONE]`.
fn chat_stream() -> Vec<Vec<u8>> {
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" c"},"finish_reason":"length"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        "[DONE]",
    ];
    let mut reads = vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec(),
    ];
    for e in events {
        let data = format!("data: {e}\n\n");
        reads.push(format!("{:x}\r\n{data}\r\n", data.len()).into_bytes());
    }
    reads.last_mut().unwrap().extend_from_slice(b"0\r\n\r\n");
    reads
}

/// Feeds `reads` (each with its arrival time) and completes the exchange as the sender does.
fn replay(reads: &[(Vec<u8>, u64)]) -> (RequestRecord, Vec<Outcome>) {
    let (ex, outcomes) = feed_reads(
        sent(),
        Api::OpenaiChat,
        reads.iter().map(|(b, t)| (&b[..], *t)),
    );
    (ex.into_record("http://test", 0), outcomes)
}

fn sent() -> Exchange {
    let mut ex = Exchange::new(PreparedRequest::empty(0, 0), true);
    ex.sent_ns = Some(SENT_NS);
    ex
}

#[test]
fn a_stream_read_event_by_event_gives_each_token_its_read_time() {
    let reads: Vec<(Vec<u8>, u64)> = chat_stream()
        .into_iter()
        .enumerate()
        .map(|(k, bytes)| (bytes, SENT_NS + k as u64 * 10 * MS))
        .collect();
    let (record, outcomes) = replay(&reads);
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(record.status, Some(200));
    // The head came at 0 ms, the first content event at 10 ms.
    assert_eq!(record.first_token_ns, Some(SENT_NS + 10 * MS));
    assert_eq!(record.ttft_ms(), Some(10.0));
    assert_eq!(record.chunks, 3);
    assert_eq!(
        record.chunk_times_ns,
        Some(vec![
            SENT_NS + 10 * MS,
            SENT_NS + 20 * MS,
            SENT_NS + 30 * MS
        ])
    );
    assert_eq!(record.output_tokens, Some(3));
    assert_eq!(record.prompt_tokens, Some(7));
    assert_eq!(record.cached_tokens, Some(4));
    assert_eq!(record.end_ns, Some(SENT_NS + 50 * MS));
    // Only the last read ends the response, and the connection (chunked, kept alive,
    // nothing past the response) takes the next request.
    assert_eq!(outcomes.last(), Some(&Outcome::Complete { reusable: true }));
    assert!(outcomes[..outcomes.len() - 1]
        .iter()
        .all(|o| *o == Outcome::NeedMore));
}

/// An Anthropic stream whose final usage (`message_delta`) never came: its three text
/// deltas are three tokens, not the one `message_start` announced.
#[test]
fn an_anthropic_stream_without_its_final_usage_counts_its_deltas() {
    let mut events = vec![(
        "message_start",
        r#"{"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}"#.to_string(),
    )];
    for word in ["a", "b", "c"] {
        events.push(("content_block_delta", format!(
            r#"{{"type": "content_block_delta", "index": 0, "delta": {{"type": "text_delta", "text": "{word}"}}}}"#
        )));
    }
    events.push(("message_stop", r#"{"type": "message_stop"}"#.to_string()));
    let mut body = String::new();
    for (name, data) in events {
        body += &format!("event: {name}\ndata: {data}\n\n");
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let api = Api::from_name("anthropic-messages").unwrap();
    let reads = [head.into_bytes(), body.into_bytes()];
    let (ex, _) = feed_reads(sent(), api, reads.iter().map(|b| (&b[..], SENT_NS + MS)));
    let record = ex.into_record("http://test", 0);
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!((record.chunks, record.output_tokens), (3, Some(3)));
    assert_eq!(record.prompt_tokens, Some(5));
}

#[test]
fn how_the_bytes_are_cut_into_reads_changes_no_count() {
    let whole: Vec<u8> = chat_stream().concat();
    for size in [1, 2, 7, 64, whole.len()] {
        let reads: Vec<(Vec<u8>, u64)> = whole
            .chunks(size)
            .map(|c| (c.to_vec(), SENT_NS + MS))
            .collect();
        let (record, outcomes) = replay(&reads);
        assert!(record.ok(), "reads of {size}: {:?}", record.error);
        assert_eq!(
            (
                record.chunks,
                record.output_tokens,
                record.prompt_tokens,
                record.cached_tokens
            ),
            (3, Some(3), Some(7), Some(4)),
            "reads of {size}"
        );
        let done = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Complete { .. }))
            .count();
        assert_eq!(done, 1, "reads of {size}");
    }
}

fn plain(head: &str, body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{head}\r\n{body}").into_bytes()
}

const ANSWER: &str =
    r#"{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}"#;

/// What `wire` does with one read of `bytes` (a chat answer, not streamed).
fn read(wire: &mut Wire, bytes: &[u8]) -> Outcome {
    let scanner = EventScanner::new(Api::OpenaiChat);
    let mut gaps = Gaps::default();
    let mut reading = Reading {
        scanner: &scanner,
        gaps: &mut gaps,
        stream: false,
        head_len: 0,
    };
    wire.on_readable(SENT_NS + MS, bytes, &mut reading).0
}

/// A wire with a request sent, after one read of `bytes`.
fn one_read(bytes: &[u8]) -> (Outcome, Wire) {
    let mut wire = Wire::default();
    wire.begin(sent());
    (read(&mut wire, bytes), wire)
}

/// A connection is reused only when the server keeps it alive and sent nothing past the
/// response; either way the exchange is finished, ready to be recorded.
#[test]
fn a_complete_response_reuses_its_connection_only_when_the_server_keeps_it() {
    let length = format!("content-length: {}\r\n", ANSWER.len());
    let kept = plain(&length, ANSWER);
    let closed = plain(&format!("{length}connection: close\r\n"), ANSWER);
    let mut extra = kept.clone();
    extra.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    for (bytes, reusable) in [(kept, true), (closed, false), (extra, false)] {
        let (outcome, mut wire) = one_read(&bytes);
        assert_eq!(outcome, Outcome::Complete { reusable });
        let record = wire.take_exchange().unwrap().into_record("", 0);
        assert!(record.ok(), "{:?}", record.error);
        assert_eq!(record.end_ns, Some(SENT_NS + MS));
    }
}

#[test]
fn bytes_on_a_connection_with_no_request_drop_it() {
    let mut idle = Wire::default();
    assert_eq!(read(&mut idle, b"HTTP/1.1"), Outcome::Stray);
    let scanner = EventScanner::new(Api::OpenaiChat);
    assert_eq!(idle.on_eof(0, &scanner), Outcome::Stray);
}

/// A body framed by the close is complete at EOF; a chunked one cut short is a reset.
#[test]
fn a_close_completes_a_response_framed_by_it_and_fails_one_cut_short() {
    let scanner = EventScanner::new(Api::OpenaiChat);
    let (outcome, mut until_close) = one_read(&plain("connection: close\r\n", ANSWER));
    assert_eq!(outcome, Outcome::NeedMore);
    assert_eq!(
        until_close.on_eof(SENT_NS + 2 * MS, &scanner),
        Outcome::Complete { reusable: false }
    );
    let cut = plain("transfer-encoding: chunked\r\n", "5\r\nab");
    let (outcome, mut chunked) = one_read(&cut);
    assert_eq!(outcome, Outcome::NeedMore);
    assert!(matches!(
        chunked.on_eof(SENT_NS + 2 * MS, &scanner),
        Outcome::Fail(ErrorKind::Reset, _)
    ));
}

/// A reset before any answer, on a connection that had answered before, sends the request
/// again (once, and not while the run stops); any other failure is recorded.
#[test]
fn only_a_reset_of_a_reused_connection_before_the_answer_resends() {
    let ending = |kind, resendable, stopping| {
        let mut wire = Wire::default();
        let mut ex = sent();
        ex.resendable = resendable;
        wire.begin(ex);
        let ending = wire.fail(kind, "why".into(), SENT_NS + MS, stopping);
        assert!(wire.exchange().is_none(), "the exchange left the wire");
        match ending {
            Some(Ending::Resend(ex)) => {
                assert_eq!(ex.resent_ns, Some(SENT_NS + MS));
                assert!(!ex.resendable, "once only");
                "resend"
            }
            Some(Ending::Failed(ex)) => {
                assert_eq!(ex.end_ns, Some(SENT_NS + MS));
                "failed"
            }
            None => "none",
        }
    };
    assert_eq!(ending(ErrorKind::Reset, true, false), "resend");
    assert_eq!(ending(ErrorKind::Reset, true, true), "failed");
    assert_eq!(ending(ErrorKind::Reset, false, false), "failed");
    assert_eq!(ending(ErrorKind::Timeout, true, false), "failed");
    assert!(Wire::default()
        .fail(ErrorKind::Reset, String::new(), 0, false)
        .is_none());
}
