//! Where results go (CONTRACT §4): the output directory and the files written at the end.
//! Files are written through a temporary name and renamed, so a crash never leaves half a
//! summary behind.

mod chart;
pub mod compare;
mod data;
mod endpoints;
pub mod html;
mod parts;
mod server;
mod sessions;
mod xlsx;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde_json::Value;

pub use crate::jsonl::{each_json_line, each_json_line_at, line_error};
pub use data::RunData;
pub use xlsx::ResultsBook;

use crate::error::{Error, Result};
use crate::record::RecordFormat;
use crate::stats::{verdict, Bounds, Gaps, Percentiles, Slo, Summary, SummaryBuilder};
use crate::sys::small_file;

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
        // --force: the files a run writes go, so none of an earlier run's is left beside the
        // new ones (other files are the user's and stay).
        for name in RUN_FILES {
            match fs::remove_file(dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(dir.join(name), e))
                }
                _ => {}
            }
        }
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Every file a run or `report` writes into a run directory.
pub const RUN_FILES: [&str; 12] = [
    "requests.jsonl",
    "summary.json",
    "summary.txt",
    "report.html",
    "results.xlsx",
    "itl.json",
    "run.json",
    "prompts.jsonl",
    "compare.html",
    "synthetic_trace.jsonl",
    "shards.txt",
    "server_metrics.jsonl",
];

/// `llmreplay-results/<UTC yyyymmdd-hhmmss>`, with `-2`, `-3`... when runs start within the
/// same second.
pub fn default_dir() -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = PathBuf::from("llmreplay-results").join(crate::sys::wall_start::utc_stamp(secs));
    (1..)
        .map(|n| match n {
            1 => base.clone(),
            n => base.with_file_name(format!("{}-{n}", crate::sys::wall_start::utc_stamp(secs))),
        })
        .find(|dir| !dir.exists())
        .expect("a free name")
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

/// What a summary is computed with (`--goodput`, `--percentiles`).
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    pub slo: Option<Slo>,
    pub percentiles: Vec<f64>,
    /// `--bound NAME=VALUE` (checked): each replaces that bound of the run's own (run.json)
    /// or of the defaults; the others stay.
    pub bounds: Vec<String>,
}

/// A finished run, read back from its files.
pub struct LoadedRun {
    pub summary: Summary,
    pub data: RunData,
    pub itl: Histogram<u64>,
    /// Every record's index, in file order.
    pub indices: Vec<u64>,
    /// Its run.json, when it has a readable one.
    pub config: Option<Value>,
    /// What it is judged by ([`verdict::judge`]).
    pub bounds: Bounds,
}

const ITL_FILE: &str = "itl.json";

/// Saves the gap histograms (`itl.json`, [`Gaps::to_json`]): requests.jsonl holds chunk times
/// only with `--record-itl`, so this is what lets `report` recompute ITL statistics exactly.
pub fn save_itl(dir: &Path, gaps: &Gaps) -> Result<()> {
    write_atomic(&dir.join(ITL_FILE), gaps.to_json().to_string().as_bytes())
}

pub fn load_itl(dir: &Path) -> Result<Option<Gaps>> {
    let path = dir.join(ITL_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let text =
        small_file::read_text(&path, small_file::RUN_FILE_CAP).map_err(|e| Error::io(&path, e))?;
    let bad = |m: String| Error::Trace {
        file: path.clone(),
        line: 1,
        message: m,
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    Gaps::from_json(&v).map(Some).map_err(bad)
}

crate::choices! {
    /// `--output-format`.
    #[derive(Default)]
    pub enum OutputFormat {
        #[default]
        Text = "text",
        Json = "json",
    }
}

/// Reads a run's `requests.jsonl` once: summary, plot data and (when given) the Requests
/// sheet. ITL comes from `itl.json` in `dir`, else from recorded chunk times.
pub fn load_run(
    dir: &Path,
    requests: &Path,
    opts: &RenderOptions,
    mut book: Option<&mut ResultsBook>,
) -> Result<LoadedRun> {
    let saved = load_itl(dir)?;
    let from_chunks = saved.is_none();
    let mut gaps = saved.unwrap_or_default();
    let config = run_config(dir);
    let bounds = bounds(config.as_ref(), opts)?;
    let percentiles = Percentiles::new(
        &opts.percentiles,
        bounds.get(crate::stats::verdict::Bound::TailSamples),
    );
    let block = config.as_ref().and_then(|c| c["block_size"].as_u64());
    let mut builder = SummaryBuilder::new(opts.slo.clone()).with_block_size(block);
    let mut data = RunData::default();
    let mut indices = Vec::new();
    each_json_line_at(requests, |n, offset, value| {
        let r = RecordFormat::read_any(&value, n - 1).map_err(|m| line_error(requests, n, m))?;
        indices.push(r.index);
        builder.add(&r);
        data.add(&r);
        if let Some(book) = book.as_deref_mut() {
            book.add(r.index, offset);
        }
        if from_chunks && !r.warmup {
            gaps.record_chunks(&r);
        }
        Ok(())
    })?;
    let mut summary = builder.finish(&gaps, &percentiles);
    summary.server = crate::server_metrics::summary::load(dir)?;
    let itl = gaps.chunk;
    Ok(LoadedRun {
        summary,
        data,
        itl,
        indices,
        config,
        bounds,
    })
}

/// The bounds a run is judged by: its own (run.json's `verdict_bounds`, else the defaults),
/// with `--bound` replacing the ones it names.
fn bounds(config: Option<&Value>, opts: &RenderOptions) -> Result<Bounds> {
    let own = config.map_or_else(Bounds::default, |c| Bounds::from_json(&c["verdict_bounds"]));
    own.with(&opts.bounds).map_err(Error::Usage)
}

/// A run that completed holds every record it planned (run.json's `schedule.records`, a
/// shard's `shard.records`, less the turns a session bound cut): one fewer means lines were lost (a shard copied in part, a
/// line deleted), and every figure would be computed from the rest. The error names the
/// directory, how many are missing and, where the indices run from 0, which. A run stopped
/// early is not checked: it planned more than it sent.
pub fn check_complete(dir: &Path, run: &Value, indices: &mut [u64]) -> Result<()> {
    let completed = matches!(
        run["ended"]["how"].as_str(),
        Some("completed" | "no-success")
    );
    let planned = match run["shard"].is_object() {
        true => run["shard"]["records"].as_u64(),
        false => run["schedule"]["records"].as_u64(),
    };
    let Some(planned) = planned.filter(|_| completed) else {
        return Ok(());
    };
    let expected = planned.saturating_sub(run["schedule"]["turns_cut"].as_u64().unwrap_or(0));
    let found = indices.len() as u64;
    if found >= expected {
        return Ok(());
    }
    let mut which = String::new();
    if run["shard"].is_null() {
        indices.sort_unstable();
        let mut gaps = Vec::new();
        let mut next = 0u64;
        for &i in indices.iter().chain(std::iter::once(&planned)) {
            if i > next {
                gaps.push(match i - next {
                    1 => format!("{next}"),
                    _ => format!("{next}..={}", i - 1),
                });
            }
            next = next.max(i + 1);
        }
        if !gaps.is_empty() {
            which = format!(" (missing indices: {})", gaps.join(", "));
        }
    }
    Err(Error::Usage(format!(
        "{}: requests.jsonl holds {found} records of the {expected} its run.json says were \
         sent: {} are missing{which}; the figures would leave them out (copy the file whole)",
        dir.display(),
        expected - found
    )))
}

/// Writes `summary.json`, `summary.txt`, `report.html` and `results.xlsx` into `dir` from the
/// run's records: the same code for a live run and for `llmreplay report DIR`.
pub fn render(dir: &Path, requests: &Path, opts: &RenderOptions) -> Result<Summary> {
    let mut book = ResultsBook::new();
    let mut run = load_run(dir, requests, opts, Some(&mut book))?;
    let config = run.config.take();
    if let Some(c) = &config {
        check_complete(dir, c, &mut run.indices)?;
    }
    run.summary.ended = config
        .as_ref()
        .map(|c| c["ended"].clone())
        .filter(|e| e.is_object());
    run.summary.primed = config.as_ref().is_some_and(|c| c["prime"] == true);
    if let Some(sessions) = run.summary.sessions.as_mut() {
        let schedule = |key: &str| config.as_ref().and_then(|c| c["schedule"][key].as_u64());
        sessions.turns_cut = schedule("turns_cut");
        sessions.dropped = schedule("sessions_dropped");
    }
    let verdict = verdict::judge(&run.summary, config.as_ref(), &run.bounds);
    if config.as_ref().is_some_and(|c| c["strict"] == true) && !verdict.valid() {
        crate::ending::strict_invalid(run.summary.ended.as_mut());
    }
    run.summary.verdict = Some(verdict);
    write_summary(dir, &run.summary)?;
    let title = format!("llmreplay report: {}", run_title(dir, config.as_ref()));
    let page = html::report(
        &title,
        config.as_ref(),
        &run.summary,
        &mut run.data,
        &run.itl,
    );
    write_atomic(&dir.join("report.html"), page.as_bytes())?;
    book.finish(
        &run.summary,
        config.as_ref(),
        requests,
        &dir.join("results.xlsx"),
    )?;
    Ok(run.summary)
}

/// A run directory's `run.json`, when it has a readable one.
pub fn run_config(dir: &Path) -> Option<Value> {
    small_file::read_text(&dir.join("run.json"), small_file::RUN_FILE_CAP)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// The trace name from `run.json`, and the directory.
fn run_title(dir: &Path, run: Option<&Value>) -> String {
    let trace = run.and_then(|r| r["trace"].as_str().map(str::to_string));
    match trace {
        Some(t) => format!("{t} ({})", dir.display()),
        None => dir.display().to_string(),
    }
}
