//! `Transfer-Encoding: chunked` decoding (RFC 9112 §7.1).

use super::ProtocolError;

/// Longest chunk-size line (with extensions) or trailer line accepted.
const MAX_LINE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size,
    /// Skipping `;ext=...` up to the end of the size line.
    Extension,
    /// Saw CR after the size line; LF must follow.
    SizeLf,
    Data,
    /// After the data of a chunk: CR LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine,
    /// Saw CR of the final empty line.
    EndLf,
    Done,
}

#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: u32,
    line_len: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size,
            size: 0,
            digits: 0,
            line_len: 0,
        }
    }
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes as much of `input` as possible, handing each piece of body data to `on_data`.
    /// Returns the number of bytes consumed: all of `input`, or fewer when the final chunk
    /// ends inside it.
    pub fn feed<'a>(
        &mut self,
        input: &'a [u8],
        mut on_data: impl FnMut(&'a [u8]),
    ) -> Result<usize, ProtocolError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                let take = (input.len() - i).min(self.size as usize);
                on_data(&input[i..i + take]);
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.state = match self.state {
                State::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if self.digits == 15 {
                            return Err(ProtocolError::new("chunk size too large"));
                        }
                        self.digits += 1;
                        self.size =
                            self.size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
                        State::Size
                    }
                    _ if self.digits == 0 => {
                        return Err(ProtocolError::new(format!(
                            "invalid chunk size byte 0x{b:02x}"
                        )))
                    }
                    b';' | b' ' | b'\t' => State::Extension,
                    b'\r' => State::SizeLf,
                    b'\n' => self.after_size_line(),
                    _ => {
                        return Err(ProtocolError::new(format!(
                            "invalid chunk size byte 0x{b:02x}"
                        )))
                    }
                },
                State::Extension => match b {
                    b'\r' => State::SizeLf,
                    b'\n' => self.after_size_line(),
                    _ => {
                        self.line_len += 1;
                        if self.line_len > MAX_LINE {
                            return Err(ProtocolError::new("chunk extension too long"));
                        }
                        State::Extension
                    }
                },
                State::SizeLf => match b {
                    b'\n' => self.after_size_line(),
                    _ => return Err(ProtocolError::new("chunk size line not ended by CRLF")),
                },
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    b'\n' => State::Size,
                    _ => return Err(ProtocolError::new("chunk data longer than its size")),
                },
                State::DataLf => match b {
                    b'\n' => State::Size,
                    _ => return Err(ProtocolError::new("chunk data not ended by CRLF")),
                },
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => State::Done,
                    _ => {
                        self.line_len = 1;
                        State::TrailerLine
                    }
                },
                State::TrailerLine => match b {
                    b'\n' => State::TrailerStart,
                    _ => {
                        self.line_len += 1;
                        if self.line_len > MAX_LINE {
                            return Err(ProtocolError::new("chunked trailer line too long"));
                        }
                        State::TrailerLine
                    }
                },
                State::EndLf => match b {
                    b'\n' => State::Done,
                    _ => return Err(ProtocolError::new("chunked body not ended by CRLF")),
                },
                State::Data => unreachable!("handled above"),
                State::Done => {
                    return Ok(i - 1);
                }
            };
            if self.state == State::Done {
                return Ok(i);
            }
        }
        Ok(i)
    }

    fn after_size_line(&mut self) -> State {
        self.digits = 0;
        self.line_len = 0;
        if self.size == 0 {
            State::TrailerStart
        } else {
            State::Data
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces cut at `cuts`; returns (body, consumed, done).
    fn decode_split(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize, bool), ProtocolError> {
        let mut d = ChunkedDecoder::default();
        let mut body = Vec::new();
        let mut consumed = 0;
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&input.len())) {
            if d.is_done() {
                break;
            }
            let n = d.feed(&input[start..end], |piece| body.extend_from_slice(piece))?;
            consumed += n;
            start = end;
        }
        Ok((body, consumed, d.is_done()))
    }

    const STREAM: &[u8] = b"5\r\nhello\r\n7;name=value\r\n, world\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: yes\r\n\r\nNEXT";

    #[test]
    fn every_single_split_point() {
        for cut in 0..=STREAM.len() {
            let (body, consumed, done) = decode_split(STREAM, &[cut]).unwrap();
            assert_eq!(
                body, b"hello, worldabcdefghijklmnopqrstuvwxyz",
                "cut at {cut}"
            );
            assert!(done);
            assert_eq!(&STREAM[consumed..], b"NEXT", "cut at {cut}");
        }
    }

    #[test]
    fn every_pair_of_split_points() {
        for a in 0..=STREAM.len() {
            for b in a..=STREAM.len() {
                let (body, _, done) = decode_split(STREAM, &[a, b]).unwrap();
                assert_eq!(body, b"hello, worldabcdefghijklmnopqrstuvwxyz");
                assert!(done);
            }
        }
    }

    #[test]
    fn byte_by_byte() {
        let cuts: Vec<usize> = (1..STREAM.len()).collect();
        let (body, _, done) = decode_split(STREAM, &cuts).unwrap();
        assert_eq!(body, b"hello, worldabcdefghijklmnopqrstuvwxyz");
        assert!(done);
    }

    #[test]
    fn incomplete_stream_is_not_done() {
        let (body, _, done) = decode_split(b"5\r\nhel", &[]).unwrap();
        assert_eq!(body, b"hel");
        assert!(!done);
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(decode_split(b"zz\r\n", &[]).is_err());
        assert!(decode_split(b"3\r\nabcd\r\n", &[]).is_err());
        assert!(decode_split(b"ffffffffffffffffff\r\n", &[]).is_err());
        assert!(decode_split(b"0\r\nX", &[]).is_ok());
    }
}
