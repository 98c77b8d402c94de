//! Where results go (CONTRACT §4): the output directory and the files written at the end.
//! Files are written through a temporary name and renamed, so a crash never leaves half a
//! summary behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::stats::Summary;

/// Creates the output directory, refusing a non-empty one unless `force`.
pub fn prepare_dir(dir: &Path, force: bool) -> Result<()> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(Error::Usage(format!(
                "--output {}: exists and is not a directory",
                dir.display()
            )));
        }
        let non_empty = fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .next()
            .is_some();
        if non_empty && !force {
            return Err(Error::Usage(format!(
                "--output {}: directory is not empty (add --force to write into it)",
                dir.display()
            )));
        }
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// `llmreplay-results/<UTC yyyymmdd-hhmmss>`.
pub fn default_dir() -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("llmreplay-results").join(utc_stamp(secs))
}

/// `yyyymmdd-hhmmss` of a Unix time (UTC), by the civil-from-days algorithm.
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Writes `content` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, content: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, content).map_err(|e| Error::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

pub fn write_json(path: &Path, value: &Value) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).expect("JSON values serialise");
    text.push(b'\n');
    write_atomic(path, &text)
}

/// `summary.json` and `summary.txt`.
pub fn write_summary(dir: &Path, summary: &Summary) -> Result<()> {
    write_json(&dir.join("summary.json"), &summary.to_json())?;
    write_atomic(&dir.join("summary.txt"), summary.to_table().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400 + 3661), "20000229-010101");
        assert_eq!(utc_stamp(1_795_392_000), "20261123-000000");
    }
}
