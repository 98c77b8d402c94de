//! `mock --replay-stream FILE`: every generation request is answered with a recorded stream,
//! byte for byte, each event at its recorded time, whatever dialect it came in. It puts a
//! server's real stream shape (vLLM's reasoning, SGLang's nulls, TGI's tokens, Anthropic's
//! blocks) on the wire to the whole client: sockets, chunked framing and SSE.
//!
//! The file is server-sent events, one event a block ending in a blank line. A comment line
//! `: at_ms=T` in a block (an SSE comment, which a client ignores, sent like the rest) says
//! the event goes T ms after the request arrived; an event without one goes `--itl-ms` after
//! the one before it (the first at `--ttft-ms`).

use std::path::Path;

use crate::error::{Error, Result};

const AT: &str = ": at_ms=";

#[derive(Debug, PartialEq)]
pub struct StreamFixture {
    /// Each event's bytes (its blank line included), and when it is due after the arrival.
    pub events: Vec<(u64, Vec<u8>)>,
}

impl StreamFixture {
    pub fn load(path: &Path, ttft_ns: u64, itl_ns: u64) -> Result<StreamFixture> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, ttft_ns, itl_ns).map_err(|(line, message)| Error::Trace {
            file: path.to_path_buf(),
            line: line as u64,
            message,
        })
    }

    /// The events of `text`; an error names its line (1-based).
    pub fn parse(
        text: &str,
        ttft_ns: u64,
        itl_ns: u64,
    ) -> std::result::Result<StreamFixture, (usize, String)> {
        let mut events: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut line_no = 1;
        for block in text.split_inclusive("\n\n") {
            let first_line = line_no;
            line_no += block.matches('\n').count();
            if block.trim().is_empty() {
                continue;
            }
            let mut at = None;
            for (i, line) in block.lines().enumerate() {
                if let Some(ms) = line.strip_prefix(AT) {
                    let bad = || {
                        (
                            first_line + i,
                            format!("`{line}`: expected {AT}MS, MS >= 0"),
                        )
                    };
                    let ms: f64 = ms.trim().parse().map_err(|_| bad())?;
                    if !(ms.is_finite() && ms >= 0.0) {
                        return Err(bad());
                    }
                    at = Some(crate::sys::clock::ms_to_ns(ms));
                }
            }
            let due = match (at, events.last()) {
                (Some(at), _) => at,
                (None, None) => ttft_ns,
                (None, Some((before, _))) => before + itl_ns,
            };
            if let Some((before, _)) = events.last().filter(|(before, _)| due < *before) {
                return Err((
                    first_line,
                    format!(
                        "this event is due at {} ms, before the one above it ({} ms)",
                        due as f64 / 1e6,
                        *before as f64 / 1e6
                    ),
                ));
            }
            events.push((due, block.as_bytes().to_vec()));
        }
        if events.is_empty() {
            return Err((
                1,
                "no event: a stream is `data: ...` blocks ending in a blank line".into(),
            ));
        }
        Ok(StreamFixture { events })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_due_at_their_times_or_one_gap_after_the_last() {
        let text =
            "data: a\n\n: at_ms=12.5\ndata: b\n\ndata: c\n\nevent: x\n: at_ms=40\ndata: d\n\n";
        let f = StreamFixture::parse(text, 7_000_000, 1_000_000).unwrap();
        let due: Vec<u64> = f.events.iter().map(|e| e.0).collect();
        assert_eq!(due, [7_000_000, 12_500_000, 13_500_000, 40_000_000]);
        assert_eq!(f.events[1].1, b": at_ms=12.5\ndata: b\n\n");
        let sent: Vec<u8> = f.events.iter().flat_map(|e| e.1.clone()).collect();
        assert_eq!(sent, text.as_bytes(), "verbatim");
    }

    #[test]
    fn a_bad_time_names_its_line() {
        let err = StreamFixture::parse("data: a\n\n: at_ms=x\ndata: b\n\n", 0, 0).unwrap_err();
        assert_eq!(err.0, 3);
        let back = StreamFixture::parse(": at_ms=9\ndata: a\n\n: at_ms=3\ndata: b\n\n", 0, 0);
        assert_eq!(back.unwrap_err().0, 4);
        assert!(StreamFixture::parse("\n\n", 0, 0).is_err());
    }
}
