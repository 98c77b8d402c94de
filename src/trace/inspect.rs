//! Whole-trace statistics: what `llmreplay inspect` prints, and the pre-scan that validates a
//! trace before a replay sends anything.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use super::{Format, TraceReader};
use crate::error::Result;

/// Aggregate facts about a trace.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TraceStats {
    pub format: String,
    pub records: u64,
    /// First to last timestamp, in milliseconds of trace time.
    pub span_ms: f64,
    pub first_timestamp_ms: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub max_input_length: u64,
    pub max_output_length: u64,
    /// Records carrying text or messages instead of lengths.
    pub verbatim_records: u64,
    pub unique_hash_ids: u64,
    pub block_size: u32,
    /// Input tokens covered by a prefix of blocks already seen (cache that never evicts).
    pub prefix_hit_tokens: u64,
    /// Records whose `hash_ids` count differs from ceil(input_length / block_size).
    pub hash_length_mismatches: u64,
    /// Records whose timestamp is earlier than the one before.
    pub out_of_order: u64,
}

impl TraceStats {
    pub fn mean_rate(&self) -> f64 {
        if self.span_ms > 0.0 {
            self.records as f64 / (self.span_ms / 1000.0)
        } else {
            0.0
        }
    }

    pub fn prefix_hit_share(&self) -> f64 {
        if self.input_tokens > 0 {
            self.prefix_hit_tokens as f64 / self.input_tokens as f64
        } else {
            0.0
        }
    }
}

/// Reads and validates every record of the trace (first error aborts) and gathers statistics.
/// `max_records` stops early; the format must already be resolved.
pub fn scan(
    path: &Path,
    format: Format,
    block_size: u32,
    max_records: Option<u64>,
) -> Result<TraceStats> {
    let mut reader = TraceReader::open(path, format)?;
    let mut stats = TraceStats {
        format: format!("{format:?}").to_lowercase(),
        block_size,
        ..TraceStats::default()
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut first_ts: Option<f64> = None;
    let mut last_ts = 0.0f64;
    let mut max_ts = 0.0f64;
    let b = u64::from(block_size.max(1));
    while max_records.is_none_or(|m| stats.records < m) {
        let Some(rec) = reader.next_record()? else {
            break;
        };
        stats.records += 1;
        let ts = rec.timestamp_ms.unwrap_or(last_ts);
        let first = *first_ts.get_or_insert(ts);
        if ts < last_ts {
            stats.out_of_order += 1;
        }
        last_ts = ts;
        max_ts = max_ts.max(ts - first);
        let input = rec.input_length().unwrap_or(0);
        let output = rec.output_length.unwrap_or(0);
        stats.input_tokens += input;
        stats.output_tokens += output;
        stats.max_input_length = stats.max_input_length.max(input);
        stats.max_output_length = stats.max_output_length.max(output);
        if rec.input_length().is_none() || !matches!(rec.input, super::Input::Synthetic { .. }) {
            stats.verbatim_records += 1;
        }
        let ids = rec.hash_ids();
        if !ids.is_empty() && ids.len() as u64 != input.div_ceil(b) {
            stats.hash_length_mismatches += 1;
        }
        // Prefix caching reuses a block only when every block before it is reused too.
        let mut prefix = true;
        for (i, id) in ids.iter().enumerate() {
            let newly = seen.insert(*id);
            if newly {
                prefix = false;
            }
            if prefix {
                let start = i as u64 * b;
                stats.prefix_hit_tokens += input.saturating_sub(start).min(b);
            }
        }
    }
    stats.first_timestamp_ms = first_ts.unwrap_or(0.0);
    stats.span_ms = max_ts;
    stats.unique_hash_ids = seen.len() as u64;
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
            "Block size (tokens per hash id):",
            self.block_size.to_string(),
        )?;
        row(f, "Unique hash ids:", self.unique_hash_ids.to_string())?;
        row(
            f,
            "Prefix-cache hit share (infinite cache):",
            format!("{:.2} % of input tokens", 100.0 * self.prefix_hit_share()),
        )?;
        row(
            f,
            "Records with hash_ids != length:",
            self.hash_length_mismatches.to_string(),
        )?;
        row(f, "Out-of-order timestamps:", self.out_of_order.to_string())
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
        let s = scan(&path, Format::Mooncake, 4, None).unwrap();
        assert_eq!(s.records, 3);
        assert_eq!(s.input_tokens, 31);
        assert_eq!(s.output_tokens, 7);
        assert_eq!(s.unique_hash_ids, 5);
        assert_eq!(s.prefix_hit_tokens, 8 + 4);
        assert_eq!(s.span_ms, 2000.0);
        assert_eq!(s.out_of_order, 1);
        assert_eq!(s.hash_length_mismatches, 0);
        let s = scan(&path, Format::Mooncake, 4, Some(1)).unwrap();
        assert_eq!(s.records, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
