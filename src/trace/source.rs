//! Where a trace's bytes come from: a file, `-` (stdin), a pipe, a FIFO or a process
//! substitution (`<(zcat t.jsonl.gz)`), plain or compressed (gzip or zstd, told by their
//! magic bytes, not by the name).
//!
//! A run reads its trace more than once (the validating scan, then the producers), and a pipe
//! can be read only once: whatever is not a regular file is copied once, decompressed, into
//! an anonymous spool file, and every later read opens that copy again. The spool is unlinked
//! as soon as it is made, so nothing is left behind, even on SIGKILL.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest line accepted; a longer one is an input error, not an unbounded allocation.
pub const MAX_LINE_BYTES: usize = 64 << 20;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// A trace as the user named it, readable as many times as a run needs.
#[derive(Clone, Debug)]
pub struct TraceFile {
    /// The name messages give (`-` reads as "stdin").
    shown: PathBuf,
    /// The file opened for each read: the user's, or the spool's /proc/self/fd name.
    read: PathBuf,
    /// Holds the unlinked spool open for as long as a copy of this value lives.
    _spool: Option<Arc<File>>,
}

impl TraceFile {
    /// A regular file, read in place (tests, and traces the run writes itself).
    pub fn plain(path: &Path) -> TraceFile {
        TraceFile {
            shown: path.to_path_buf(),
            read: path.to_path_buf(),
            _spool: None,
        }
    }

    /// Resolves the trace named `path`: a regular file is read in place; anything else is
    /// read to its end now, once, into a spool. `max_lines` stops that copy after so many
    /// non-blank lines (an endless producer behind --max-requests).
    pub fn resolve(path: &Path, max_lines: Option<u64>) -> Result<TraceFile> {
        let stdin = path == Path::new("-");
        let shown = if stdin {
            PathBuf::from("stdin")
        } else {
            path.to_path_buf()
        };
        if !stdin {
            let meta = std::fs::metadata(path).map_err(|e| cannot_open(path, e))?;
            if meta.is_dir() {
                return Err(Error::Usage(format!(
                    "the trace {} is a directory, not a file",
                    path.display()
                )));
            }
            if meta.is_file() {
                return Ok(TraceFile::plain(path));
            }
        }
        let input: Box<dyn Read + Send> = if stdin {
            Box::new(io::stdin())
        } else {
            Box::new(File::open(path).map_err(|e| cannot_open(path, e))?)
        };
        let spool = spool(
            decoded(input).map_err(|e| Error::io(&shown, e))?,
            &shown,
            max_lines,
        )?;
        Ok(TraceFile {
            shown,
            read: PathBuf::from(format!("/proc/self/fd/{}", spool.as_raw_fd())),
            _spool: Some(Arc::new(spool)),
        })
    }

    /// The name messages give.
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// A fresh reader over the trace's (decompressed) bytes, from the start.
    pub fn open(&self) -> Result<Box<dyn BufRead + Send>> {
        let file = File::open(&self.read).map_err(|e| cannot_open(&self.shown, e))?;
        decoded(Box::new(file)).map_err(|e| Error::io(&self.shown, e))
    }
}

fn cannot_open(path: &Path, e: io::Error) -> Error {
    // A trace that cannot be opened is an input error (exit 1), as a bad line is.
    Error::Usage(format!("cannot open the trace {}: {e}", path.display()))
}

/// The bytes of `raw`, decompressed when they start with a gzip or zstd frame.
fn decoded(raw: Box<dyn Read + Send>) -> io::Result<Box<dyn BufRead + Send>> {
    let mut head = BufReader::with_capacity(1 << 20, raw);
    let magic = head.fill_buf()?;
    Ok(if magic.starts_with(GZIP_MAGIC) {
        Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(head),
        ))
    } else if magic.starts_with(ZSTD_MAGIC) {
        Box::new(BufReader::with_capacity(
            1 << 20,
            zstd::stream::read::Decoder::with_buffer(head)?,
        ))
    } else {
        Box::new(head)
    })
}

/// Copies `input` into an unlinked temporary file; a line longer than [`MAX_LINE_BYTES`]
/// (`/dev/zero`, an endless line) ends the copy with an error there.
fn spool(mut input: Box<dyn BufRead + Send>, shown: &Path, max_lines: Option<u64>) -> Result<File> {
    let dir = std::env::temp_dir();
    let name = dir.join(format!(
        "llmreplay-trace-{}-{}",
        std::process::id(),
        crate::sys::clock::monotonic_ns()
    ));
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&name)
        .map_err(|e| Error::io(&name, e))?;
    let _ = std::fs::remove_file(&name);
    let mut out = io::BufWriter::with_capacity(1 << 20, &file);
    let (mut line, mut line_bytes, mut blank, mut lines) = (1u64, 0usize, true, 0u64);
    loop {
        let buf = input.fill_buf().map_err(|e| Error::io(shown, e))?;
        if buf.is_empty() {
            break;
        }
        let mut take = buf.len();
        for (i, &b) in buf.iter().enumerate() {
            if b == b'\n' {
                line += 1;
                line_bytes = 0;
                lines += u64::from(!blank);
                blank = true;
                if max_lines.is_some_and(|m| lines >= m) {
                    take = i + 1;
                    break;
                }
            } else {
                line_bytes += 1;
                blank &= b.is_ascii_whitespace();
                if line_bytes > MAX_LINE_BYTES {
                    return Err(Error::Trace {
                        file: shown.to_path_buf(),
                        line,
                        message: format!(
                            "line longer than {MAX_LINE_BYTES} bytes (is this a trace?)"
                        ),
                    });
                }
            }
        }
        out.write_all(&buf[..take])
            .map_err(|e| Error::io(&dir, e))?;
        input.consume(take);
        if max_lines.is_some_and(|m| lines >= m) {
            break;
        }
    }
    out.flush().map_err(|e| Error::io(&dir, e))?;
    drop(out);
    Ok(file)
}
