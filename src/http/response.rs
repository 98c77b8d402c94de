//! HTTP/1.1 response framing: head (httparse), then a body delimited by Content-Length,
//! chunked encoding, or the end of the connection.

use super::chunked::ChunkedDecoder;
use super::ProtocolError;

/// Largest response head accepted.
pub const MAX_HEAD: usize = 64 << 10;
const MAX_HEADERS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    /// `Content-Type: text/event-stream`.
    pub event_stream: bool,
    /// The server says its `usage.prompt_tokens` is an estimate (llmreplay's mock without a
    /// tokenizer: `x-llmreplay-prompt-count: approximate`).
    pub approximate_prompt_count: bool,
    /// The `Date` header, Unix seconds (the clock check reads it; None when absent or not
    /// an IMF-fixdate).
    pub date_unix_s: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the parser hands over while decoding one response.
pub trait ResponseSink {
    fn head(&mut self, head: &ResponseHead);
    fn body(&mut self, data: &[u8]);
}

#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The response is not complete yet; all input was consumed.
    NeedMore,
    /// The response ended after `consumed` bytes of the last input.
    Done { consumed: usize },
}

#[derive(Debug, Default)]
pub struct ResponseParser {
    head_buf: Vec<u8>,
    head: Option<ResponseHead>,
    framing: Option<Framing>,
    chunked: ChunkedDecoder,
}

impl ResponseParser {
    /// Prepares for the next response on the same connection, keeping buffers.
    pub fn reset(&mut self) {
        self.head_buf.clear();
        self.head = None;
        self.framing = None;
        self.chunked = ChunkedDecoder::default();
    }

    pub fn head(&self) -> Option<&ResponseHead> {
        self.head.as_ref()
    }

    /// True once any byte of a response has arrived.
    pub fn started(&self) -> bool {
        self.head.is_some() || !self.head_buf.is_empty()
    }

    pub fn feed(
        &mut self,
        input: &[u8],
        sink: &mut impl ResponseSink,
    ) -> Result<Step, ProtocolError> {
        if self.framing.is_some() {
            return self.feed_body(input, sink);
        }
        self.head_buf.extend_from_slice(input);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            let n = match response.parse(&self.head_buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => {
                    if self.head_buf.len() > MAX_HEAD {
                        return Err(ProtocolError::new(format!(
                            "response head larger than {MAX_HEAD} bytes"
                        )));
                    }
                    return Ok(Step::NeedMore);
                }
                Err(e) => return Err(ProtocolError::new(format!("invalid response head: {e}"))),
            };
            if n > MAX_HEAD {
                return Err(ProtocolError::new(format!(
                    "response head larger than {MAX_HEAD} bytes"
                )));
            }
            let status = response.code.unwrap_or(0);
            if (100..200).contains(&status) {
                // An interim response (100 Continue, 103 Early Hints): the real one follows.
                self.head_buf.drain(..n);
                continue;
            }
            let (head, framing) =
                interpret(status, response.version.unwrap_or(1), response.headers)?;
            sink.head(&head);
            self.head = Some(head);
            self.framing = Some(framing);
            // Bytes after the head are body bytes; `input` ended with them.
            let body_bytes = self.head_buf.len() - n;
            let body_start = input.len() - body_bytes;
            self.head_buf.clear();
            return match self.feed_body(&input[body_start..], sink)? {
                Step::Done { consumed } => Ok(Step::Done {
                    consumed: body_start + consumed,
                }),
                Step::NeedMore => Ok(Step::NeedMore),
            };
        }
    }

    /// The connection closed: completes a response delimited by the close.
    pub fn finish_at_eof(&mut self) -> Result<(), ProtocolError> {
        match self.framing {
            Some(Framing::UntilClose) => Ok(()),
            Some(Framing::Length(left)) => Err(ProtocolError::new(format!(
                "connection closed with {left} body bytes still expected"
            ))),
            Some(Framing::Chunked) => Err(ProtocolError::new(
                "connection closed inside a chunked body",
            )),
            None => Err(ProtocolError::new(
                "connection closed before a complete response head",
            )),
        }
    }

    fn feed_body(
        &mut self,
        input: &[u8],
        sink: &mut impl ResponseSink,
    ) -> Result<Step, ProtocolError> {
        match self.framing {
            Some(Framing::Length(left)) => {
                let take = (left.min(input.len() as u64)) as usize;
                if take > 0 {
                    sink.body(&input[..take]);
                }
                let left = left - take as u64;
                self.framing = Some(Framing::Length(left));
                Ok(if left == 0 {
                    Step::Done { consumed: take }
                } else {
                    Step::NeedMore
                })
            }
            Some(Framing::Chunked) => {
                let consumed = self.chunked.feed(input, |piece| sink.body(piece))?;
                Ok(if self.chunked.is_done() {
                    Step::Done { consumed }
                } else {
                    Step::NeedMore
                })
            }
            Some(Framing::UntilClose) => {
                if !input.is_empty() {
                    sink.body(input);
                }
                Ok(Step::NeedMore)
            }
            None => unreachable!("feed_body before the head"),
        }
    }
}

fn interpret(
    status: u16,
    version: u8,
    headers: &[httparse::Header],
) -> Result<(ResponseHead, Framing), ProtocolError> {
    let mut keep_alive = version >= 1;
    let mut event_stream = false;
    let mut approximate_prompt_count = false;
    let mut date_unix_s = None;
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for h in headers {
        let value = h.value;
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(value).unwrap_or("").trim();
            let n: u64 = text
                .parse()
                .map_err(|_| ProtocolError::new(format!("invalid Content-Length {text:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(ProtocolError::new("conflicting Content-Length headers"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = contains_token(value, b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            if contains_token(value, b"close") {
                keep_alive = false;
            } else if contains_token(value, b"keep-alive") {
                keep_alive = true;
            }
        } else if h.name.eq_ignore_ascii_case("content-type") {
            event_stream = contains_token(value, b"text/event-stream");
        } else if h.name.eq_ignore_ascii_case("x-llmreplay-prompt-count") {
            approximate_prompt_count = contains_token(value, b"approximate");
        } else if h.name.eq_ignore_ascii_case("date") {
            date_unix_s = std::str::from_utf8(value).ok().and_then(super::date::parse);
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok((
        ResponseHead {
            status,
            keep_alive,
            event_stream,
            approximate_prompt_count,
            date_unix_s,
        },
        framing,
    ))
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .windows(token.len())
        .any(|w| w.eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn run(input: &[u8], cut: usize) -> (Collect, Option<usize>) {
        let mut p = ResponseParser::default();
        let mut c = Collect::default();
        let mut end = None;
        if let Step::Done { consumed } = p.feed(&input[..cut], &mut c).unwrap() {
            end = Some(consumed);
        } else if let Step::Done { consumed } = p.feed(&input[cut..], &mut c).unwrap() {
            end = Some(cut + consumed);
        }
        (c, end)
    }

    #[test]
    fn chunked_event_stream_at_every_split() {
        let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n3\r\n1\n\n\r\n0\r\n\r\nXX";
        for cut in 0..=input.len() {
            let (c, end) = run(input, cut);
            assert_eq!(c.heads.len(), 1, "cut {cut}");
            assert_eq!(
                c.heads[0],
                ResponseHead {
                    status: 200,
                    keep_alive: true,
                    event_stream: true,
                    approximate_prompt_count: false,
                    date_unix_s: None,
                }
            );
            assert_eq!(c.body, b"data: 1\n\n", "cut {cut}");
            assert_eq!(end, Some(input.len() - 2), "cut {cut}");
        }
    }

    #[test]
    fn content_length_body_at_every_split() {
        let input = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{\"error\":1}";
        for cut in 0..=input.len() {
            let (c, end) = run(input, cut);
            assert_eq!(c.heads[0].status, 429);
            assert!(!c.heads[0].keep_alive);
            assert_eq!(c.body, b"{\"error\":1}");
            assert_eq!(end, Some(input.len()));
        }
    }

    #[test]
    fn body_until_close() {
        let mut p = ResponseParser::default();
        let mut c = Collect::default();
        assert_eq!(
            p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc", &mut c).unwrap(),
            Step::NeedMore
        );
        assert!(p.finish_at_eof().is_ok());
        assert_eq!(c.body, b"abc");
        assert!(!c.heads[0].keep_alive);
    }

    #[test]
    fn errors() {
        let mut c = Collect::default();
        assert!(ResponseParser::default()
            .feed(b"HTTX/1.1 200 OK\r\n\r\n", &mut c)
            .is_err());
        assert!(ResponseParser::default()
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", &mut c)
            .is_err());
        let mut p = ResponseParser::default();
        let big = vec![b'a'; MAX_HEAD + 10];
        p.feed(b"HTTP/1.1 200 OK\r\nX: ", &mut c).unwrap();
        assert!(p.feed(&big, &mut c).is_err());
        let mut p = ResponseParser::default();
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", &mut c)
            .unwrap();
        assert!(p.finish_at_eof().is_err());
    }
}
