//! Where the trace's lines go: `--output` itself, or with `--rotate-records N` or
//! `--rotate-seconds S` numbered parts (`monday.jsonl` → `monday.0.jsonl`, `monday.1.jsonl`,
//! ...), the next opened when a line would make the current one hold more than N lines or
//! span more than S seconds. Each part is whole when the next opens (flushed and closed), so
//! a part can be moved, shared or replayed while the capture goes on. Timestamps and chat ids
//! run on across parts: the parts joined in order (`cat`) are the whole capture, and a turn
//! whose parent is in an earlier part is replayed from one part alone as a conversation's
//! first.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// When a part is full.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    pub records: Option<u64>,
    pub seconds: Option<f64>,
}

impl Rotation {
    pub fn rotates(&self) -> bool {
        self.records.is_some() || self.seconds.is_some()
    }
}

pub struct Parts {
    base: PathBuf,
    rotation: Rotation,
    out: BufWriter<File>,
    path: PathBuf,
    number: u64,
    /// Lines in the current part, and its first line's timestamp (ms).
    lines: u64,
    started_ms: f64,
}

impl Parts {
    /// The file of part `n` of `base`: `base` itself when it does not rotate.
    pub fn path(base: &Path, rotation: &Rotation, n: u64) -> PathBuf {
        if !rotation.rotates() {
            return base.to_path_buf();
        }
        let stem = base.file_stem().unwrap_or_default().to_string_lossy();
        let name = match base.extension() {
            Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
            None => format!("{stem}.{n}"),
        };
        base.with_file_name(name)
    }

    /// Creates the first part.
    pub fn create(base: &Path, rotation: Rotation) -> Result<Parts> {
        let path = Parts::path(base, &rotation, 0);
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Parts {
            base: base.to_path_buf(),
            rotation,
            out: BufWriter::new(file),
            path,
            number: 0,
            lines: 0,
            started_ms: 0.0,
        })
    }

    /// The part being written, and how many there are.
    pub fn current(&self) -> (&Path, u64) {
        (&self.path, self.number + 1)
    }

    /// Writes `line`, at `timestamp_ms`, opening the next part first where the current one
    /// is full.
    pub fn write(&mut self, line: &str, timestamp_ms: f64) -> Result<()> {
        if self.lines == 0 {
            self.started_ms = timestamp_ms;
        }
        let by_records = self.rotation.records.is_some_and(|n| self.lines >= n);
        let by_time = self
            .rotation
            .seconds
            .is_some_and(|s| timestamp_ms - self.started_ms >= s * 1e3);
        if self.lines > 0 && (by_records || by_time) {
            self.next()?;
            self.started_ms = timestamp_ms;
        }
        self.lines += 1;
        writeln!(self.out, "{line}").map_err(|e| Error::io(&self.path, e))
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| Error::io(&self.path, e))
    }

    /// Closes the current part (flushed) and opens the next.
    fn next(&mut self) -> Result<()> {
        self.flush()?;
        self.number += 1;
        self.lines = 0;
        self.path = Parts::path(&self.base, &self.rotation, self.number);
        let file = File::create(&self.path).map_err(|e| Error::io(&self.path, e))?;
        self.out = BufWriter::new(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_numbered_and_full_by_records_or_time() {
        let dir = std::env::temp_dir().join(format!("llmreplay-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = dir.join("monday.jsonl");
        assert_eq!(Parts::path(&base, &Rotation::default(), 3), base);
        let by_records = Rotation {
            records: Some(2),
            seconds: None,
        };
        assert_eq!(
            Parts::path(&base, &by_records, 3),
            dir.join("monday.3.jsonl")
        );
        let mut parts = Parts::create(&base, by_records).unwrap();
        for (i, t) in [0.0, 1.0, 2.0, 3.0, 4.0].iter().enumerate() {
            parts.write(&format!("line {i}"), *t).unwrap();
        }
        parts.flush().unwrap();
        assert_eq!(parts.current().1, 3);
        let read = |n| std::fs::read_to_string(dir.join(format!("monday.{n}.jsonl"))).unwrap();
        assert_eq!(read(0), "line 0\nline 1\n");
        assert_eq!(read(2), "line 4\n");
        // By time: a part spans less than the seconds given.
        let by_time = Rotation {
            records: None,
            seconds: Some(1.0),
        };
        let mut parts = Parts::create(&dir.join("t.jsonl"), by_time).unwrap();
        for t in [0.0, 500.0, 999.0, 1000.0, 2500.0] {
            parts.write(&format!("at {t}"), t).unwrap();
        }
        parts.flush().unwrap();
        let read = |n| std::fs::read_to_string(dir.join(format!("t.{n}.jsonl"))).unwrap();
        assert_eq!(read(0).lines().count(), 3);
        assert_eq!(read(1), "at 1000\n");
        assert_eq!(read(2), "at 2500\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
