//! Server-sent events: a line scanner that hands over the payload of each `data:` line.
//!
//! Inference servers send one `data:` line per event, so the payload of a data line is the
//! event; multi-line data events are handed over line by line. Complete lines are handed over
//! straight from the input; only a line split across reads is copied, into a reused buffer.

use memchr::memchr;

use super::ProtocolError;

/// Longest line accepted: an endless line is an error, not unbounded growth.
pub const MAX_LINE: usize = 4 << 20;

#[derive(Debug, Default)]
pub struct SseScanner {
    partial: Vec<u8>,
}

impl SseScanner {
    /// Scans `input`, calling `on_data` with each data payload (without `data:`, one optional
    /// space, and the line end).
    pub fn feed(
        &mut self,
        mut input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<(), ProtocolError> {
        if !self.partial.is_empty() {
            match memchr(b'\n', input) {
                None => {
                    self.partial.extend_from_slice(input);
                    return self.check_partial();
                }
                Some(end) => {
                    self.partial.extend_from_slice(&input[..end]);
                    self.check_partial()?;
                    dispatch(&self.partial, &mut on_data);
                    self.partial.clear();
                    input = &input[end + 1..];
                }
            }
        }
        while let Some(end) = memchr(b'\n', input) {
            dispatch(&input[..end], &mut on_data);
            input = &input[end + 1..];
        }
        self.partial.extend_from_slice(input);
        self.check_partial()
    }

    /// Bytes of an unfinished line held over.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    pub fn reset(&mut self) {
        self.partial.clear();
    }

    fn check_partial(&self) -> Result<(), ProtocolError> {
        if self.partial.len() > MAX_LINE {
            Err(ProtocolError::new(format!(
                "SSE line longer than {MAX_LINE} bytes"
            )))
        } else {
            Ok(())
        }
    }
}

fn dispatch(line: &[u8], on_data: &mut impl FnMut(&[u8])) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(rest) = line.strip_prefix(b"data:") {
        on_data(rest.strip_prefix(b" ").unwrap_or(rest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(input: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut s = SseScanner::default();
        let mut out = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&input.len())) {
            s.feed(&input[start..end], |d| {
                out.push(String::from_utf8(d.to_vec()).unwrap())
            })
            .unwrap();
            start = end;
        }
        out
    }

    /// Recorded from a vLLM chat stream (shortened ids), plus a comment, a CRLF event and a
    /// `data:` without space.
    const STREAM: &[u8] = b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
: keep-alive comment\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" Hello\"}}]}\r\n\r\n\
event: message\ndata:{\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn every_split_point_gives_the_same_events() {
        let whole = scan(STREAM, &[]);
        assert_eq!(whole.len(), 4);
        assert!(whole[1].contains("Hello") && !whole[1].ends_with('\r'));
        assert!(whole[2].starts_with("{\"id\""));
        assert_eq!(whole[3], "[DONE]");
        for a in 0..=STREAM.len() {
            assert_eq!(scan(STREAM, &[a]), whole, "cut at {a}");
        }
        for a in (0..=STREAM.len()).step_by(7) {
            for b in a..=STREAM.len() {
                assert_eq!(scan(STREAM, &[a, b]), whole, "cuts at {a},{b}");
            }
        }
    }

    #[test]
    fn endless_line_is_an_error() {
        let mut s = SseScanner::default();
        let block = vec![b'x'; 1 << 20];
        let mut result = Ok(());
        for _ in 0..5 {
            result = s.feed(&block, |_| {});
        }
        assert!(result.is_err());
    }
}
