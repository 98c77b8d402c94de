//! Records in timestamp order, in bounded memory.
//!
//! Traces are meant to be sorted, but merged or hand-edited ones are not always. Records pass
//! through a min-heap of [`WINDOW`] records keyed by (timestamp, index): a record at most that
//! many places out of order comes out where it belongs; one further out comes out as soon as
//! it is read, and is counted as `late` (it will be sent behind schedule). A record without a
//! timestamp takes the one of the record before it in the file.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{TraceReader, TraceRecord};
use crate::error::Result;

/// Records held for reordering.
pub const WINDOW: usize = 1024;

/// What the reordering saw.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct OrderStats {
    /// Records whose timestamp is earlier than the record before them in the file.
    pub out_of_order: u64,
    /// The first of them: (line, its timestamp, the previous record's), in ms.
    pub first_out_of_order: Option<(u64, f64, f64)>,
    /// Records too far out of order for the window: released after a later timestamp.
    pub late: u64,
}

struct Pending {
    timestamp_ms: f64,
    record: TraceRecord,
}

/// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest.
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .timestamp_ms
            .total_cmp(&self.timestamp_ms)
            .then(other.record.index.cmp(&self.record.index))
    }
}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pending {}

pub struct OrderedReader {
    reader: TraceReader,
    window: BinaryHeap<Pending>,
    capacity: usize,
    last_read_ms: Option<f64>,
    last_released_ms: f64,
    eof: bool,
    stats: OrderStats,
}

impl OrderedReader {
    pub fn new(reader: TraceReader) -> Self {
        Self::with_window(reader, WINDOW)
    }

    pub fn with_window(reader: TraceReader, capacity: usize) -> Self {
        OrderedReader {
            reader,
            window: BinaryHeap::with_capacity(capacity.max(1) + 1),
            capacity: capacity.max(1),
            last_read_ms: None,
            last_released_ms: f64::NEG_INFINITY,
            eof: false,
            stats: OrderStats::default(),
        }
    }

    /// The next record in timestamp order, with its resolved timestamp (ms).
    pub fn next_record(&mut self) -> Result<Option<(TraceRecord, f64)>> {
        while !self.eof && self.window.len() < self.capacity {
            let Some(record) = self.reader.next_record()? else {
                self.eof = true;
                break;
            };
            let previous = self.last_read_ms;
            let timestamp_ms = record.timestamp_ms.or(previous).unwrap_or(0.0);
            if let Some(prev) = previous.filter(|&p| timestamp_ms < p) {
                self.stats.out_of_order += 1;
                self.stats
                    .first_out_of_order
                    .get_or_insert((record.line, timestamp_ms, prev));
            }
            self.last_read_ms = Some(timestamp_ms);
            self.window.push(Pending {
                timestamp_ms,
                record,
            });
        }
        let Some(next) = self.window.pop() else {
            return Ok(None);
        };
        if next.timestamp_ms < self.last_released_ms {
            self.stats.late += 1;
        }
        self.last_released_ms = self.last_released_ms.max(next.timestamp_ms);
        Ok(Some((next.record, next.timestamp_ms)))
    }

    pub fn stats(&self) -> &OrderStats {
        &self.stats
    }

    pub fn reader(&self) -> &TraceReader {
        &self.reader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Format;

    fn ordered(timestamps: &[Option<i64>], window: usize) -> (Vec<(u64, f64)>, OrderStats) {
        let dir = std::env::temp_dir().join(format!("llmreplay-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("t{window}-{}.jsonl", timestamps.len()));
        let lines: Vec<String> = timestamps
            .iter()
            .map(|t| match t {
                Some(t) => {
                    format!(r#"{{"timestamp": {t}, "input_length": 1, "output_length": 1}}"#)
                }
                None => r#"{"input_length": 1, "output_length": 1}"#.to_string(),
            })
            .collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        let mut r = OrderedReader::with_window(
            TraceReader::open(&crate::trace::TraceFile::plain(&path), Format::Mooncake).unwrap(),
            window,
        );
        let mut out = Vec::new();
        while let Some((rec, ts)) = r.next_record().unwrap() {
            out.push((rec.index, ts));
        }
        (out, r.stats().clone())
    }

    #[test]
    fn sorts_within_the_window_and_counts_what_it_cannot() {
        let (out, stats) = ordered(&[Some(0), Some(30), Some(10), Some(20), None, Some(40)], 4);
        assert_eq!(
            out,
            vec![
                (0, 0.0),
                (2, 10.0),
                (3, 20.0),
                (4, 20.0),
                (1, 30.0),
                (5, 40.0)
            ],
            "a missing timestamp takes the previous record's (in the file)"
        );
        assert_eq!(stats.out_of_order, 1);
        assert_eq!(stats.first_out_of_order, Some((3, 10.0, 30.0)));
        assert_eq!(stats.late, 0);

        // A window of 2 cannot move record 3 (timestamp 5) before records 1 and 2.
        let (out, stats) = ordered(&[Some(0), Some(10), Some(20), Some(5), Some(30)], 2);
        assert_eq!(
            out.iter().map(|o| o.0).collect::<Vec<_>>(),
            vec![0, 1, 3, 2, 4]
        );
        assert_eq!(stats.late, 1);
    }

    #[test]
    fn equal_timestamps_keep_file_order() {
        let (out, stats) = ordered(&[Some(5), Some(5), Some(5)], 8);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(stats, OrderStats::default());
    }
}
