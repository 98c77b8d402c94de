//! Streaming line reader over a (possibly gzip-compressed) JSONL trace.

use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use super::atif::Atif;
use super::csv::{self, Columns};
use super::dag::Dag;
use super::otel::Otel;
use super::source::{TraceFile, MAX_LINE_BYTES};
use super::weka::Weka;
use super::{parse_record, Format, Layout, TraceRecord};
use crate::error::{Error, Result};

/// The UTF-8 byte order mark some editors write at the start of a file.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// One non-blank line of a trace, not yet parsed.
#[derive(Debug)]
pub struct RawLine {
    pub line: u64,
    pub index: u64,
    pub bytes: Vec<u8>,
}

/// How a trace is read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Skip (and count) lines that fail to parse instead of stopping at the first.
    pub skip_invalid: bool,
    /// Stop after this many records.
    pub max_records: Option<u64>,
}

/// Lines skipped under `skip_invalid`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Skipped {
    pub lines: u64,
    /// The first skipped line's error (`file:line: field ...`).
    pub first: Option<String>,
}

enum Documents {
    Weka(Weka),
    Dag(Dag),
    Atif(Atif),
    Otel(Otel),
}

impl Documents {
    /// The reader of a document format's file (None for a format of lines or CSV).
    fn open(format: Format, input: Box<dyn io::BufRead + Send>, path: &Path) -> Option<Documents> {
        match format {
            Format::Weka => Some(Documents::Weka(Weka::new(input, path))),
            Format::Atif => Some(Documents::Atif(Atif::new(input, path))),
            Format::Otel => Some(Documents::Otel(Otel::new(input, path))),
            Format::Dag => Some(Documents::Dag(Dag::new(input, path))),
            Format::Auto
            | Format::Mooncake
            | Format::Bailian
            | Format::Azure
            | Format::Burstgpt
            | Format::Tracelab => None,
        }
    }
}

/// Reads a trace line by line; never holds more than one line in memory (but for a DAG
/// file, read whole to resolve its links).
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    input: Box<dyn BufRead + Send>,
    options: ReadOptions,
    line: u64,
    /// Records returned so far (the next record's index).
    index: u64,
    skipped: Skipped,
    /// A CSV trace's columns, from its header.
    columns: Option<Columns>,
    /// A trace read as documents that expand into many records each (WEKA sessions, DAG
    /// conversations).
    documents: Option<Documents>,
}

impl TraceReader {
    /// Opens the trace from its start (gzip and zstd are decompressed transparently).
    pub fn open(trace: &TraceFile, format: Format) -> Result<Self> {
        let path = trace.shown();
        let input = trace.open()?;
        let mut reader = TraceReader {
            path: path.to_path_buf(),
            format,
            input,
            options: ReadOptions::default(),
            line: 0,
            index: 0,
            skipped: Skipped::default(),
            columns: None,
            documents: None,
        };
        if format.spec().layout == Layout::Documents {
            let input = std::mem::replace(&mut reader.input, Box::new(io::empty()));
            reader.documents = Documents::open(format, input, path);
        }
        if format.is_csv() {
            let header = reader.next_line()?.ok_or_else(|| Error::Trace {
                file: path.to_path_buf(),
                line: 1,
                message: format!("no header: a {} trace starts with one", format.name()),
            })?;
            reader.columns = Some(Columns::from_header(&header, format, path)?);
        }
        Ok(reader)
    }

    pub fn with_options(mut self, options: ReadOptions) -> Self {
        self.options = options;
        self
    }

    pub fn skipped(&self) -> &Skipped {
        &self.skipped
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
            if bytes.len() > MAX_LINE_BYTES && bytes.last() != Some(&b'\n') {
                self.discard_rest_of_line()?;
                return Err(Error::Trace {
                    file: self.path.clone(),
                    line: self.line,
                    message: format!("line longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            if self.line == 1 && bytes.starts_with(BOM) {
                bytes.drain(..BOM.len());
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(RawLine {
                line: self.line,
                index: self.index,
                bytes,
            }));
        }
    }

    /// Skips to the start of the next line without keeping what it reads.
    fn discard_rest_of_line(&mut self) -> Result<()> {
        loop {
            let buf = self
                .input
                .fill_buf()
                .map_err(|e| Error::io(&self.path, e))?;
            if buf.is_empty() {
                return Ok(());
            }
            match memchr::memchr(b'\n', buf) {
                Some(i) => {
                    self.input.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = buf.len();
                    self.input.consume(n);
                }
            }
        }
    }

    /// The next record, parsed and validated; invalid lines are an error, or skipped and
    /// counted with `skip_invalid`. Records are numbered without the skipped lines.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>> {
        loop {
            if self.options.max_records.is_some_and(|m| self.index >= m) {
                return Ok(None);
            }
            if let Some(documents) = &mut self.documents {
                let record = match documents {
                    Documents::Weka(w) => {
                        w.next(self.index, self.options.skip_invalid, &mut self.skipped)?
                    }
                    // A graph is read whole: one bad line leaves its links unknown.
                    Documents::Dag(d) => d.next(self.index)?,
                    Documents::Atif(a) => a.next(self.index)?,
                    Documents::Otel(o) => o.next(self.index)?,
                };
                if let Some(wait) = record.as_ref().and_then(too_long_a_wait) {
                    return Err(Error::Trace {
                        file: self.path.clone(),
                        line: wait.0,
                        message: wait.1,
                    });
                }
                self.index += u64::from(record.is_some());
                return Ok(record);
            }
            let raw = match self.next_line() {
                Ok(Some(raw)) => raw,
                Ok(None) => return Ok(None),
                Err(e) => {
                    // A line too long is skippable; a failing read is not.
                    if self.options.skip_invalid && matches!(e, Error::Trace { .. }) {
                        self.skip(&e);
                        continue;
                    }
                    return Err(e);
                }
            };
            let parsed = match &mut self.columns {
                Some(columns) => columns.parse(&raw, &self.path),
                None => parse_record(&raw, self.format, &self.path),
            };
            match parsed {
                Ok(record) => {
                    self.index += 1;
                    return Ok(Some(record));
                }
                Err(e) if self.options.skip_invalid => self.skip(&e),
                Err(e) => return Err(e),
            }
        }
    }

    fn skip(&mut self, e: &Error) {
        self.skipped.lines += 1;
        self.skipped.first.get_or_insert_with(|| e.to_string());
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Resolves `Format::Auto` from the first record of the file (with `skip_invalid`, the first
/// line that is a JSON object or a CSV header).
pub fn detect_format(trace: &TraceFile, format: Format, skip_invalid: bool) -> Result<Format> {
    if format != Format::Auto {
        return Ok(format);
    }
    let path = trace.shown();
    let mut reader = TraceReader::open(trace, Format::Mooncake)?;
    let mut first_error = None;
    loop {
        let line = match reader.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => {
                return Err(first_error.unwrap_or_else(|| Error::Trace {
                    file: path.to_path_buf(),
                    line: 1,
                    message: "the trace has no records".into(),
                }))
            }
            Err(e @ Error::Trace { .. }) if skip_invalid => {
                first_error.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(csv) = csv::detect(&line.bytes) {
            return Ok(csv);
        }
        // A known format's CSV header with a column missing: its own reader names what is
        // missing (not "invalid JSON").
        if let Some(near) = csv::closest(&line.bytes) {
            csv::Columns::from_header(&line, near, path)?;
            return Ok(near);
        }
        // A pretty-printed document opens with a lone brace: its first keys say which.
        if line.bytes.trim_ascii() == b"{" {
            for _ in 0..64 {
                let Some(next) = reader.next_line()? else {
                    break;
                };
                if let Some(format) = Format::of_document_line(&next.bytes) {
                    return Ok(format);
                }
            }
            return Err(Error::Usage(format!(
                "{}: a JSON document whose first lines name neither `requests` (WEKA), `steps` (ATIF) nor `resourceSpans` (OpenTelemetry): give --format",
                path.display()
            )));
        }
        match serde_json::from_slice::<serde_json::Value>(&line.bytes) {
            Ok(serde_json::Value::Object(record)) => {
                return Ok(Format::of_object(|key| record.contains_key(key)));
            }
            parsed => {
                let e = Error::Trace {
                    file: path.to_path_buf(),
                    line: line.line,
                    message: super::parse::not_a_record(&line.bytes, parsed.err()),
                };
                if !skip_invalid {
                    return Err(e);
                }
                first_error.get_or_insert(e);
            }
        }
    }
}

/// The tokens each hash id covers: `given` (`--block-size`), else the `block_size` the first
/// record names (a trace `llmreplay capture` wrote), else the format's. A `--block-size` that
/// differs from the one the trace names is refused: the prompts would share other prefixes
/// than the recorded ones.
pub fn block_size(trace: &TraceFile, format: Format, given: Option<u32>) -> Result<u32> {
    let declared = match format.spec().layout {
        super::formats::Layout::Lines => first_block_size(trace, format)?,
        _ => None,
    };
    match (given, declared) {
        (Some(g), Some((d, line))) if g != d => Err(Error::Usage(format!(
            "{}:{line}: field `block_size`: the trace's hash ids cover {d} tokens each, so \
             --block-size {g} would rebuild prompts that share other prefixes than the \
             recorded ones: leave --block-size out",
            trace.shown().display()
        ))),
        (Some(g), _) => Ok(g),
        (None, Some((d, _))) => Ok(d),
        (None, None) => Ok(format.default_block_size()),
    }
}

/// The first record's `block_size`, and its line.
fn first_block_size(trace: &TraceFile, format: Format) -> Result<Option<(u32, u64)>> {
    let mut reader = TraceReader::open(trace, format)?;
    let Ok(Some(line)) = reader.next_line() else {
        return Ok(None); // the scan says what is wrong with it
    };
    let Ok(serde_json::Value::Object(record)) = serde_json::from_slice(&line.bytes) else {
        return Ok(None);
    };
    match record.get("block_size") {
        None => Ok(None),
        Some(v) => match v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0)
        {
            Some(n) => Ok(Some((n, line.line))),
            None => Err(Error::Trace {
                file: trace.shown().to_path_buf(),
                line: line.line,
                message: format!("field `block_size`: a positive whole number of tokens, got {v}"),
            }),
        },
    }
}

/// A task turn's wait after the turn before it (its `delay`, think time, or the gap between
/// its timestamps) beyond [`super::MAX_WAIT_MS`]: its line and what to say. Bounded here, as
/// the trace is read before the run, so that no sum of waits overflows a schedule.
fn too_long_a_wait(record: &TraceRecord) -> Option<(u64, String)> {
    let wait = record.ids.dag.as_ref()?.wait_ms;
    (wait.is_nan() || wait > super::MAX_WAIT_MS).then(|| {
        (
            record.line,
            format!(
                "a turn of task {:?} waits {wait:e} ms after the turn before it (its delay, think \
                 time or timestamps), more than {:e} ms (about 116 days)",
                record.ids.session_id.as_deref().unwrap_or("?"),
                super::MAX_WAIT_MS
            ),
        )
    })
}
