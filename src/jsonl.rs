//! JSONL files read line by line: every record file, server_metrics.jsonl and the shards'
//! records go through here, so a bad line is named the same way everywhere.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// Calls `each` with every non-empty line of a JSONL file, parsed, and its line number
/// (1-based); a line that is not JSON is an error naming the file and the line, except a
/// last line cut short (no newline: a full disk, a kill mid-write), skipped with a warning.
pub fn each_json_line(path: &Path, mut each: impl FnMut(u64, Value) -> Result<()>) -> Result<()> {
    each_json_line_at(path, |n, _, value| each(n, value))
}

/// [`each_json_line`], with the byte offset at which each line starts.
pub fn each_json_line_at(
    path: &Path,
    mut each: impl FnMut(u64, u64, Value) -> Result<()>,
) -> Result<()> {
    let mut input = BufReader::new(fs::File::open(path).map_err(|e| Error::io(path, e))?);
    let mut line = Vec::new();
    let mut offset = 0u64;
    for n in 1u64.. {
        line.clear();
        let read = input
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io(path, e))?;
        if read == 0 {
            break;
        }
        let at = offset;
        offset += read as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice(&line) {
            Ok(value) => each(n, at, value)?,
            Err(_) if line.last() != Some(&b'\n') => {
                eprintln!(
                    "warning: {}:{n}: the last line is cut short (the run was killed or the disk \
                     filled while writing it); it is skipped",
                    path.display()
                );
            }
            Err(e) => return Err(line_error(path, n, format!("invalid JSON: {e}"))),
        }
    }
    Ok(())
}

/// What is wrong with line `line` of `path`.
pub fn line_error(path: &Path, line: u64, message: String) -> Error {
    Error::Trace {
        file: path.to_path_buf(),
        line,
        message,
    }
}
