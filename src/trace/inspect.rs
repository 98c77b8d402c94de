//! Whole-trace statistics: what `llmreplay inspect` prints, and the pre-scan that validates a
//! trace before a replay sends anything.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use super::{Format, OrderStats, OrderedReader, ReadOptions, Skipped, TraceFile, TraceReader};
use crate::error::{Error, Result};

/// Aggregate facts about a trace.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TraceStats {
    pub format: String,
    pub records: u64,
    /// First to last timestamp, in milliseconds of trace time.
    pub span_ms: f64,
    /// The earliest timestamp (ms): trace time 0.
    pub first_timestamp_ms: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub max_input_length: u64,
    pub max_output_length: u64,
    /// Records carrying text or messages instead of lengths.
    pub verbatim_records: u64,
    pub unique_hash_ids: u64,
    /// More distinct hash ids than [`MAX_TRACKED_HASH_IDS`]: the unique count and the prefix
    /// hit share are lower bounds.
    pub hash_ids_capped: bool,
    pub block_size: u32,
    /// Input tokens covered by a prefix of blocks already seen (cache that never evicts).
    pub prefix_hit_tokens: u64,
    /// Records whose `hash_ids` count differs from ceil(input_length / block_size).
    pub hash_length_mismatches: u64,
    /// Turns that answer an earlier record of the trace: a Bailian `parent_chat_id`, or a
    /// `session_id` seen before (they wait for it under `--session-mode after-parent`).
    pub turns_with_parent: u64,
    /// Timestamp order, as the replay reads the trace.
    pub order: OrderStats,
    /// Invalid lines skipped under `--skip-invalid`.
    pub skipped: Skipped,
    /// Every record's timestamp (ms), in reading order, while the trace has at most
    /// [`KEPT_TIMESTAMPS`] records (else empty): what [`crate::schedule`] shapes into the
    /// effective schedule before the run; a longer trace is read again for it.
    #[serde(skip)]
    pub timestamps_ms: Vec<f64>,
}

/// Timestamps the scan keeps (8 MB): past this the preview streams the trace again, so that
/// memory does not grow with the trace.
pub const KEPT_TIMESTAMPS: u64 = 1 << 20;

/// Distinct hash ids remembered for the prefix statistics (~20 MB at most), so that memory
/// does not grow with the trace.
pub const MAX_TRACKED_HASH_IDS: usize = 1_000_000;

impl TraceStats {
    pub fn mean_rate(&self) -> f64 {
        if self.span_ms > 0.0 {
            self.records as f64 / (self.span_ms / 1000.0)
        } else {
            0.0
        }
    }

    /// `--strict`: timestamps that go backwards are an input error naming the first.
    pub fn require_order(&self, path: &Path) -> Result<()> {
        match self.order.first_out_of_order {
            Some((line, ts, previous)) => Err(Error::Trace {
                file: path.to_path_buf(),
                line,
                message: format!(
                    "field `timestamp`: {ts} ms is earlier than the previous record's {previous} ms \
                     ({} records out of order; without --strict they are sorted)",
                    self.order.out_of_order
                ),
            }),
            None => Ok(()),
        }
    }

    /// What a replay of this trace should be warned about (skipped lines, reordering).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(first) = &self.skipped.first {
            out.push(format!(
                "skipped {} invalid lines (--skip-invalid); the first: {first}",
                self.skipped.lines
            ));
        }
        if let Some((line, _, _)) = self.order.first_out_of_order {
            let mut w = format!(
                "{} records have a timestamp earlier than the record before them (the first at line {line}): they are sent in timestamp order",
                self.order.out_of_order
            );
            if self.order.late > 0 {
                w.push_str(&format!(
                    "; {} are further out of order than the {}-record window and will be sent late",
                    self.order.late,
                    super::ORDER_WINDOW
                ));
            }
            out.push(w);
        }
        out
    }

    pub fn prefix_hit_share(&self) -> f64 {
        if self.input_tokens > 0 {
            self.prefix_hit_tokens as f64 / self.input_tokens as f64
        } else {
            0.0
        }
    }
}

/// Reads and validates every record of the trace, in the order a replay reads it, and gathers
/// statistics. The first invalid line aborts unless `options.skip_invalid`; the format must
/// already be resolved.
pub fn scan(
    trace: &TraceFile,
    format: Format,
    block_size: u32,
    options: ReadOptions,
) -> Result<TraceStats> {
    let mut reader = OrderedReader::new(TraceReader::open(trace, format)?.with_options(options));
    let mut stats = TraceStats {
        format: format.name().to_string(),
        block_size,
        ..TraceStats::default()
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut min_ts = f64::INFINITY;
    let mut max_ts = f64::NEG_INFINITY;
    let b = u64::from(block_size.max(1));
    let mut sessions = std::collections::HashSet::new();
    while let Some((rec, ts)) = reader.next_record()? {
        stats.records += 1;
        if stats.records <= KEPT_TIMESTAMPS {
            stats.timestamps_ms.push(ts);
        } else if !stats.timestamps_ms.is_empty() {
            stats.timestamps_ms = Vec::new();
        }
        min_ts = min_ts.min(ts);
        max_ts = max_ts.max(ts);
        let input = rec.input_length().unwrap_or(0);
        let output = rec.output_length.unwrap_or(0);
        stats.input_tokens += input;
        stats.output_tokens += output;
        stats.max_input_length = stats.max_input_length.max(input);
        stats.max_output_length = stats.max_output_length.max(output);
        if rec.input_length().is_none() || !matches!(rec.input, super::Input::Synthetic { .. }) {
            stats.verbatim_records += 1;
        }
        let answers = match (&rec.ids.session_id, rec.ids.parent_chat_id) {
            (_, Some(p)) => p >= 0,
            (Some(s), None) => sessions.len() < MAX_TRACKED_HASH_IDS && !sessions.insert(s.clone()),
            (None, None) => false,
        };
        stats.turns_with_parent += u64::from(answers);
        let ids = rec.hash_ids();
        if !ids.is_empty() && ids.len() as u64 != input.div_ceil(b) {
            stats.hash_length_mismatches += 1;
        }
        // Prefix caching reuses a block only when every block before it is reused too.
        let mut prefix = true;
        for (i, id) in ids.iter().enumerate() {
            let known = seen.contains(id);
            if !known {
                prefix = false;
                if seen.len() < MAX_TRACKED_HASH_IDS {
                    seen.insert(*id);
                } else {
                    stats.hash_ids_capped = true;
                }
            }
            if prefix {
                let start = i as u64 * b;
                stats.prefix_hit_tokens += input.saturating_sub(start).min(b);
            }
        }
    }
    if stats.records > 0 {
        stats.first_timestamp_ms = min_ts;
        stats.span_ms = max_ts - min_ts;
    }
    stats.unique_hash_ids = seen.len() as u64;
    stats.order = reader.stats().clone();
    stats.skipped = reader.reader().skipped().clone();
    Ok(stats)
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = |f: &mut fmt::Formatter<'_>, k: &str, v: String| writeln!(f, "{k:<44}{v}");
        row(f, "Format:", self.format.clone())?;
        row(f, "Records:", self.records.to_string())?;
        row(f, "Time span (s):", format!("{:.3}", self.span_ms / 1000.0))?;
        row(
            f,
            "Mean request rate (req/s):",
            format!("{:.3}", self.mean_rate()),
        )?;
        row(f, "Total input tokens:", self.input_tokens.to_string())?;
        row(f, "Total output tokens:", self.output_tokens.to_string())?;
        let n = self.records.max(1) as f64;
        row(
            f,
            "Mean input / output length:",
            format!(
                "{:.1} / {:.1}",
                self.input_tokens as f64 / n,
                self.output_tokens as f64 / n
            ),
        )?;
        row(
            f,
            "Max input / output length:",
            format!("{} / {}", self.max_input_length, self.max_output_length),
        )?;
        row(
            f,
            "Records with text or messages:",
            self.verbatim_records.to_string(),
        )?;
        row(
            f,
            "Turns answering an earlier record:",
            self.turns_with_parent.to_string(),
        )?;
        row(
            f,
            "Block size (tokens per hash id):",
            self.block_size.to_string(),
        )?;
        let at_least = if self.hash_ids_capped { ">= " } else { "" };
        row(
            f,
            "Unique hash ids:",
            format!("{at_least}{}", self.unique_hash_ids),
        )?;
        row(
            f,
            "Prefix-cache hit share (infinite cache):",
            format!(
                "{at_least}{:.2} % of input tokens",
                100.0 * self.prefix_hit_share()
            ),
        )?;
        row(
            f,
            "Records with hash_ids != length:",
            self.hash_length_mismatches.to_string(),
        )?;
        row(
            f,
            "Out-of-order timestamps:",
            match self.order.late {
                0 => self.order.out_of_order.to_string(),
                late => format!(
                    "{} ({late} beyond the {}-record reorder window)",
                    self.order.out_of_order,
                    super::ORDER_WINDOW
                ),
            },
        )?;
        if let Some(first) = &self.skipped.first {
            row(f, "Invalid lines skipped:", self.skipped.lines.to_string())?;
            row(f, "First invalid line:", first.clone())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn prefix_hits_count_only_leading_seen_blocks() {
        let dir = std::env::temp_dir().join(format!("llmreplay-scan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        // Block size 4. Record 2 reuses blocks 1,2 (8 tokens); record 3 reuses block 1 only
        // because its second block is new, and its reuse of block 3 is not a prefix hit.
        writeln!(f, r#"{{"timestamp": 1000, "input_length": 10, "output_length": 2, "hash_ids": [1, 2, 3]}}"#).unwrap();
        writeln!(f).unwrap();
        writeln!(
            f,
            r#"{{"timestamp": 3000, "input_length": 9, "output_length": 4, "hash_ids": [1, 2, 4]}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"timestamp": 2000, "input_length": 12, "output_length": 1, "hash_ids": [1, 5, 3]}}"#).unwrap();
        drop(f);
        let s = scan(
            &TraceFile::plain(&path),
            Format::Mooncake,
            4,
            ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(s.records, 3);
        assert_eq!(s.input_tokens, 31);
        assert_eq!(s.output_tokens, 7);
        assert_eq!(s.unique_hash_ids, 5);
        assert_eq!(s.prefix_hit_tokens, 8 + 4);
        assert_eq!(s.span_ms, 2000.0);
        assert_eq!(s.order.out_of_order, 1);
        assert_eq!(s.hash_length_mismatches, 0);
        let first = ReadOptions {
            max_records: Some(1),
            ..ReadOptions::default()
        };
        let s = scan(&TraceFile::plain(&path), Format::Mooncake, 4, first).unwrap();
        assert_eq!(s.records, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
