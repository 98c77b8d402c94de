//! Streaming line reader over a (possibly gzip-compressed) JSONL trace.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use super::{parse_record, Format, TraceRecord};
use crate::error::{Error, Result};

/// Longest line accepted; a longer one is an input error, not an unbounded allocation.
const MAX_LINE_BYTES: usize = 64 << 20;

/// One non-blank line of a trace, not yet parsed.
#[derive(Debug)]
pub struct RawLine {
    pub line: u64,
    pub index: u64,
    pub bytes: Vec<u8>,
}

/// Reads a trace line by line; never holds more than one line in memory.
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    input: Box<dyn BufRead + Send>,
    line: u64,
    index: u64,
}

impl TraceReader {
    /// Opens `path`; a `.gz` suffix is decompressed transparently.
    pub fn open(path: &Path, format: Format) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let name = path.to_string_lossy();
        let input: Box<dyn BufRead + Send> = if name.ends_with(".gz") {
            Box::new(BufReader::with_capacity(
                1 << 20,
                flate2::read::MultiGzDecoder::new(BufReader::new(file)),
            ))
        } else if name.ends_with(".zst") {
            return Err(Error::Usage(format!(
                "{name}: zstd-compressed traces are not supported; decompress it first (zstd -d)"
            )));
        } else {
            Box::new(BufReader::with_capacity(1 << 20, file))
        };
        Ok(TraceReader {
            path: path.to_path_buf(),
            format,
            input,
            line: 0,
            index: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The next non-blank line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> Result<Option<RawLine>> {
        loop {
            let mut bytes = Vec::new();
            let n = (&mut self.input)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut bytes)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if bytes.len() > MAX_LINE_BYTES {
                return Err(Error::Trace {
                    file: self.path.clone(),
                    line: self.line,
                    message: format!("line longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let raw = RawLine {
                line: self.line,
                index: self.index,
                bytes,
            };
            self.index += 1;
            return Ok(Some(raw));
        }
    }

    /// The next record, parsed and validated.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>> {
        match self.next_line()? {
            None => Ok(None),
            Some(raw) => parse_record(&raw, self.format, &self.path).map(Some),
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Resolves `Format::Auto` from the first record of the file.
pub fn detect_format(path: &Path, format: Format) -> Result<Format> {
    if format != Format::Auto {
        return Ok(format);
    }
    let mut reader = TraceReader::open(path, Format::Mooncake)?;
    let Some(first) = reader.next_line()? else {
        return Err(Error::Trace {
            file: path.to_path_buf(),
            line: 1,
            message: "the trace has no records".into(),
        });
    };
    let value: serde_json::Value =
        serde_json::from_slice(&first.bytes).map_err(|e| Error::Trace {
            file: path.to_path_buf(),
            line: first.line,
            message: format!("invalid JSON: {e}"),
        })?;
    let is_bailian = value.get("chat_id").is_some() || value.get("parent_chat_id").is_some();
    Ok(if is_bailian {
        Format::Bailian
    } else {
        Format::Mooncake
    })
}
