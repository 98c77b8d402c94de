//! CSV traces without prompts or hash ids: the Azure LLM inference traces (`TIMESTAMP` as a
//! date-time, `ContextTokens`, `GeneratedTokens`) and BurstGPT (`Timestamp` in seconds,
//! `Request tokens`, `Response tokens`, and `Session ID` where the release has it), and
//! TraceLab's sessions ([`super::tracelab`]). The header names the columns; an Azure or
//! BurstGPT record gets unique blocks (no hash ids, so no accidental prefix reuse), and errors
//! name the file, the line and the column.

use std::path::Path;

use super::formats::{Columns as CsvColumns, CsvTime, FixedColumns};
use super::tracelab::{self, Tracelab};
use super::{Format, Input, Layout, RawLine, TraceIds, TraceRecord, FORMATS};
use crate::error::{Error, Result};
use crate::trace::parse::MAX_LENGTH;

/// How a CSV trace's rows are read, from its header.
pub enum Columns {
    Fixed(Fixed),
    Tracelab(Tracelab),
}

/// Where an Azure or BurstGPT trace's fields are in the header.
#[derive(Clone, Debug)]
pub struct Fixed {
    timestamp: usize,
    input: usize,
    output: usize,
    session: Option<usize>,
    columns: FixedColumns,
}

/// The CSV formats of the table ([`FORMATS`]), with their columns.
fn csv_formats() -> impl Iterator<Item = (Format, CsvColumns)> {
    FORMATS.iter().filter_map(|s| match s.layout {
        Layout::Csv(columns) => Some((s.format, columns)),
        Layout::Lines | Layout::Documents => None,
    })
}

/// The columns a format's header must name.
fn required(columns: CsvColumns) -> Vec<&'static str> {
    match columns {
        CsvColumns::Fixed(fixed) => fixed.names.to_vec(),
        CsvColumns::Tracelab => tracelab::REQUIRED.to_vec(),
    }
}

/// The format a CSV header belongs to, if any.
pub fn detect(header: &[u8]) -> Option<Format> {
    let h = String::from_utf8_lossy(header);
    let cells: Vec<&str> = split(&h);
    csv_formats()
        .find(|(_, columns)| match columns {
            CsvColumns::Tracelab => tracelab::detect(&cells),
            CsvColumns::Fixed(fixed) => fixed.names.iter().all(|n| cells.contains(n)),
        })
        .map(|(f, _)| f)
}

/// The format a CSV header that [`detect`] did not take comes closest to: the one with the most
/// of its columns present, at least two (a JSON line or any other text has none).
pub fn closest(header: &[u8]) -> Option<Format> {
    let h = String::from_utf8_lossy(header);
    if h.trim_start().starts_with('{') {
        return None;
    }
    let cells: Vec<&str> = split(&h);
    let present = |names: &[&str]| names.iter().filter(|n| cells.contains(n)).count();
    csv_formats()
        .map(|(f, columns)| (f, present(&required(columns))))
        .filter(|&(_, n)| n >= 2)
        .max_by_key(|&(_, n)| n)
        .map(|(f, _)| f)
}

/// A data line's cells: UTF-8, no quoting.
fn cells<'a>(raw: &'a RawLine, file: &Path) -> Result<Vec<&'a str>> {
    let fail = |message: &str| Error::Trace {
        file: file.to_path_buf(),
        line: raw.line,
        message: message.into(),
    };
    let text = std::str::from_utf8(&raw.bytes).map_err(|_| fail("not UTF-8"))?;
    if text.contains('"') {
        return Err(fail("quoted CSV fields are not supported"));
    }
    Ok(split(text))
}

fn split(line: &str) -> Vec<&str> {
    line.trim_end_matches(['\n', '\r'])
        .split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect()
}

impl Columns {
    /// Reads the header line (line 1) of a trace in `format`.
    pub fn from_header(raw: &RawLine, format: Format, file: &Path) -> Result<Columns> {
        let text = String::from_utf8_lossy(&raw.bytes);
        let cells = split(&text);
        match format.spec().layout {
            Layout::Csv(CsvColumns::Tracelab) => {
                Ok(Columns::Tracelab(Tracelab::from_header(raw, &cells, file)?))
            }
            Layout::Csv(CsvColumns::Fixed(columns)) => Ok(Columns::Fixed(Fixed::from_header(
                raw, &cells, columns, format, file,
            )?)),
            Layout::Lines | Layout::Documents => Err(Error::Usage(format!(
                "{}: --format {} is not a CSV format",
                file.display(),
                format.name()
            ))),
        }
    }

    /// One data line.
    pub fn parse(&mut self, raw: &RawLine, file: &Path) -> Result<TraceRecord> {
        let cells = cells(raw, file)?;
        match self {
            Columns::Fixed(c) => c.parse(raw, &cells, file),
            Columns::Tracelab(t) => t.parse(raw, &cells, file),
        }
    }
}

impl Fixed {
    fn from_header(
        raw: &RawLine,
        cells: &[&str],
        columns: FixedColumns,
        format: Format,
        file: &Path,
    ) -> Result<Fixed> {
        let want = columns.names;
        let find = |name: &str| cells.iter().position(|c| *c == name);
        let mut at = [0; 3];
        for (slot, name) in at.iter_mut().zip(want) {
            *slot = find(name).ok_or_else(|| Error::Trace {
                file: file.to_path_buf(),
                line: raw.line,
                message: format!(
                    "missing column `{name}`: the header of a --format {} trace names {}",
                    format.name(),
                    want.join(", ")
                ),
            })?;
        }
        Ok(Fixed {
            timestamp: at[0],
            input: at[1],
            output: at[2],
            session: columns.session.and_then(find),
            columns,
        })
    }

    fn parse(&self, raw: &RawLine, cells: &[&str], file: &Path) -> Result<TraceRecord> {
        let fail = |message: String| Error::Trace {
            file: file.to_path_buf(),
            line: raw.line,
            message,
        };
        let cell = |i: usize, name: &str| {
            cells
                .get(i)
                .copied()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| fail(format!("column `{name}`: missing")))
        };
        let [ts_name, in_name, out_name] = self.columns.names;
        let ts = cell(self.timestamp, ts_name)?;
        let timestamp_ms = match self.columns.time {
            CsvTime::DateTime => datetime_ms(ts).ok_or_else(|| {
                fail(format!(
                    "column `{ts_name}`: not a date-time like 2023-11-16 18:15:46.6805900: {ts:?}"
                ))
            })?,
            CsvTime::Seconds => ts
                .parse::<f64>()
                .ok()
                .filter(|t| *t >= 0.0 && t.is_finite())
                .map(|t| t * 1000.0)
                .ok_or_else(|| fail(format!("column `{ts_name}`: not seconds: {ts:?}")))?,
        };
        let count = |i: usize, name: &str| -> Result<u64> {
            let c = cell(i, name)?;
            let n: u64 = c
                .parse()
                .map_err(|_| fail(format!("column `{name}`: not a token count: {c:?}")))?;
            if n > MAX_LENGTH {
                return Err(fail(format!("column `{name}`: {n} is above {MAX_LENGTH}")));
            }
            Ok(n)
        };
        let input_length = count(self.input, in_name)?;
        if input_length == 0 {
            return Err(fail(format!("column `{in_name}`: must be at least 1")));
        }
        let output_length = count(self.output, out_name)?;
        let session_id = self
            .session
            .and_then(|i| cells.get(i))
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string());
        Ok(TraceRecord {
            index: raw.index,
            line: raw.line,
            timestamp_ms: Some(timestamp_ms),
            input: Input::Synthetic {
                input_length,
                hash_ids: Vec::new(),
            },
            output_length: Some(output_length),
            ids: TraceIds {
                session_id,
                ..TraceIds::default()
            },
            extra: None,
        })
    }
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` (or with a `T`), UTC, in ms since the epoch.
fn datetime_ms(s: &str) -> Option<f64> {
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec: f64 = t.next()?.parse().ok()?;
    if t.next().is_some() || hh > 23 || mm > 59 || !(0.0..61.0).contains(&sec) {
        return None;
    }
    let days = crate::sys::wall_start::days_from_civil(y, m, day);
    Some(((days * 24 + hh) * 60 + mm) as f64 * 60_000.0 + sec * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_times_are_epoch_milliseconds() {
        assert_eq!(datetime_ms("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(datetime_ms("1970-01-02T00:00:01.5"), Some(86_401_500.0));
        // 2023-11-16 is day 19,677 of the epoch.
        let t = datetime_ms("2023-11-16 18:15:46.6805900").unwrap();
        assert!(
            (t - (19_677.0 * 86_400_000.0 + 65_746_680.59)).abs() < 1e-3,
            "{t}"
        );
        assert_eq!(datetime_ms("2023-13-01 00:00:00"), None);
        assert_eq!(datetime_ms("yesterday"), None);
    }
}
