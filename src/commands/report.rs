//! `llmreplay report DIR [DIR2]`: re-renders a finished run from its requests.jsonl, or
//! compares two.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::plan::OutputFormat;
use crate::record::RequestRecord;
use crate::report::{self, compare, RenderOptions};
use crate::server_timing::{JoinKey, Source};
use crate::stats::Summary;

/// What `report` did: the re-rendered summary of one run (and the directory it was written
/// to), or the comparison of two (already printed in `format`, with compare.html written).
pub enum Reported {
    One(Box<Summary>, PathBuf),
    Compared { page: PathBuf },
}

fn requests(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("requests.jsonl");
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Usage(format!(
            "{}: no requests.jsonl (give a run directory written by llmreplay replay)",
            dir.display()
        )))
    }
}

/// A compared run's records: a run directory's requests.jsonl, or a records file given
/// itself (a capture's trace among them: its lines are what the proxy saw).
fn records_of(path: &Path) -> Result<PathBuf> {
    match path.is_file() {
        true => Ok(path.to_path_buf()),
        false => requests(path),
    }
}

/// Where the report of a records file goes by default: beside it, `client.jsonl` →
/// `client-report/`.
fn report_dir_for(file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map_or_else(|| "records".into(), |s| s.to_string_lossy().into_owned());
    file.with_file_name(format!("{stem}-report"))
}

pub fn run(
    dirs: &[PathBuf],
    output: Option<&Path>,
    render: &RenderOptions,
    format: OutputFormat,
) -> Result<Reported> {
    match dirs {
        [file] if file.is_file() => {
            let dir = output.map_or_else(|| report_dir_for(file), Path::to_path_buf);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let summary = report::render(&dir, file, render)?;
            Ok(Reported::One(Box::new(summary), dir))
        }
        [dir] => Ok(Reported::One(
            Box::new(report::render(dir, &requests(dir)?, render)?),
            dir.clone(),
        )),
        [a, b] => {
            let mut run_a = report::load_run(a, &records_of(a)?, render, None)?;
            let mut run_b = report::load_run(b, &records_of(b)?, render, None)?;
            let rows = compare::rows(&run_a.summary, &run_b.summary);
            let (name_a, name_b) = (a.display().to_string(), b.display().to_string());
            if let Some(why) = unlike(a, b) {
                eprintln!("warning: A and B are not the same experiment: {why}");
            }
            match format {
                OutputFormat::Text => print!("{}", compare::table(&rows, &name_a, &name_b)),
                OutputFormat::Json => println!(
                    "{}",
                    serde_json::json!({
                        "a": {"dir": name_a, "summary": run_a.summary.to_json()},
                        "b": {"dir": name_b, "summary": run_b.summary.to_json()},
                    })
                ),
            }
            let page = compare::page(&rows, &mut run_a, &mut run_b, &name_a, &name_b);
            let path = match output {
                Some(path) => path.to_path_buf(),
                None if b.is_file() => report_dir_for(b).with_extension("html"),
                None => b.join("compare.html"),
            };
            report::write_atomic(&path, page.as_bytes())?;
            Ok(Reported::Compared { page: path })
        }
        _ => Err(Error::Usage(
            "report takes one or two run directories (or records files)".into(),
        )),
    }
}

/// Joins each source's timings to the run's records (by trace id or request id, as the
/// source knows them), rewriting requests.jsonl (atomically; every other field as it was);
/// what it joined, to say.
pub fn join_server_timings(dir: &Path, sources: &[(&Source, PathBuf)]) -> Result<String> {
    let path = requests(dir)?;
    let mut records = Vec::new();
    crate::jsonl::each_json_line(&path, |line, v| {
        let r =
            RequestRecord::from_json(&v).map_err(|e| crate::jsonl::line_error(&path, line, e))?;
        records.push(r);
        Ok(())
    })?;
    // The run's request ids are RUN-INDEX, as run.json states them.
    let identity = report::run_config(dir).map(|run| run["request_identity"].clone());
    let run = identity
        .as_ref()
        .filter(|i| i["request_id_header"].is_string())
        .and_then(|i| i["run"].as_str());
    let mut said = Vec::new();
    for (source, file) in sources {
        let key_of = |r: &RequestRecord| match source.key {
            JoinKey::TraceId => r.trace_id.clone(),
            JoinKey::RequestId => run.map(|run| format!("{run}-{}", r.index)),
        };
        if records.iter().all(|r| key_of(r).is_none()) {
            let what = match source.key {
                JoinKey::TraceId => "a trace_id (it ran with --no-traceparent)",
                JoinKey::RequestId => "a request id (it ran with --request-id-header none)",
            };
            return Err(Error::Usage(format!(
                "--server-timings {}: no record of {} has {what}: nothing to join by",
                source.name,
                dir.display()
            )));
        }
        let phases = (source.read)(file).map_err(|why| {
            Error::Usage(format!(
                "--server-timings {}:{}: {why}",
                source.name,
                file.display()
            ))
        })?;
        let mut joined = 0;
        for r in &mut records {
            if let Some(p) = key_of(r).and_then(|k| phases.get(&k)) {
                r.server = Some(p.clone());
                joined += 1;
            }
        }
        said.push(format!(
            "server timings: {} of {} records joined from {} ({} requests in it)",
            joined,
            records.len(),
            file.display(),
            phases.len()
        ));
    }
    let mut out = Vec::new();
    for r in &records {
        out.extend_from_slice(r.to_json().to_string().as_bytes());
        out.push(b'\n');
    }
    report::write_atomic(&path, &out)?;
    Ok(said.join("\n"))
}

/// How two runs' experiments differ, from their run.json: the trace, or how it was replayed.
fn unlike(a: &Path, b: &Path) -> Option<String> {
    let (ra, rb) = (report::run_config(a)?, report::run_config(b)?);
    let differs: Vec<String> = ["trace", "time_scale", "max_requests", "format"]
        .iter()
        .filter(|k| ra[**k] != rb[**k])
        .map(|k| format!("{k} {} against {}", ra[*k], rb[*k]))
        .collect();
    (!differs.is_empty()).then(|| differs.join(", "))
}
