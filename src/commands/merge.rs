//! `llmreplay merge OUT DIR...`: the shards of one run (`replay --shard I/N`) joined into one
//! ordinary run directory.
//!
//! Every shard's run.json must say the same run (trace digest, schedule options, seed, shard
//! count) and every index must be there once. The records are written in index order and
//! every statistic is computed from them, as `report DIR` does: nothing is averaged or
//! merged from per-shard percentiles. The per-shard table says how far apart the shards
//! started (corrected by each one's measured clock offset) and how each kept its schedule.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::ending::Ending;
use crate::error::{Error, Result};
pub use crate::plan::hosts::MergePlan;
use crate::report;
use crate::stats::{Distribution, Summary};

/// run.json fields that make the schedule and the prompts: shards that differ in any of them
/// are not shards of one run.
const SAME_RUN: [&str; 25] = [
    "version",
    "trace_digest",
    "format",
    "block_size",
    "seed",
    "prompt_mode",
    "input_length_of",
    "time_scale",
    "duration_s",
    "max_requests",
    "time_in_secs",
    "loop",
    "load",
    "session_mode",
    "think_time_s",
    "warmup_requests",
    "route",
    "endpoints",
    "api",
    "model",
    "stream",
    "exact_output",
    "record_itl",
    "measure_from",
    // Last: a run's other fields say more of how two runs differ.
    "run_id",
];

/// One shard, read back.
struct ShardRun {
    dir: PathBuf,
    run: Value,
    index: u32,
}

/// What one shard did, for the per-shard table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ShardRow {
    pub shard: String,
    pub dir: String,
    pub records: u64,
    /// Measured (not warmup) records that succeeded, and that failed.
    pub ok: u64,
    pub failed: u64,
    pub ended: String,
    /// `--rendezvous`: its last heartbeat (RFC 3339), and why it ended when not complete.
    pub ended_at: Option<String>,
    pub why: Option<String>,
    /// Its time 0 minus the agreed instant (or shard 0's), corrected by its clock offset.
    pub start_skew_ms: Option<f64>,
    pub clock_offset_ms: Option<f64>,
    pub clock_uncertainty_ms: Option<f64>,
    /// The machine it ran on (shards of one host share a clock).
    pub host: Option<String>,
    pub late_ms: Option<f64>,
    pub drift_p50_ms: Option<f64>,
    pub drift_p99_ms: Option<f64>,
    pub drift_max_ms: Option<f64>,
}

/// A finished merge.
pub struct Merged {
    pub summary: Summary,
    pub rows: Vec<ShardRow>,
    pub dir: PathBuf,
    /// Notes on what was merged how (ITL, server metrics).
    pub notes: Vec<String>,
}

pub fn run(plan: &MergePlan) -> Result<Merged> {
    // An OUT that cannot be made (a volume this user may not write) fails now, not after
    // the wait.
    fs::create_dir_all(&plan.out).map_err(|e| Error::io(&plan.out, e))?;
    wait_for_shards(plan)?;
    let shards = read_shards(&plan.dirs)?;
    report::prepare_dir(&plan.out, plan.force)?;
    let mut rows = Vec::new();
    let mut lines: BTreeMap<u64, (u32, Vec<u8>)> = BTreeMap::new();
    for s in &shards {
        let (row, records) = read_records(s)?;
        let mut indices: Vec<u64> = records.iter().map(|(i, _)| *i).collect();
        report::check_complete(&s.dir, &s.run, &mut indices)
            .map_err(|e| Error::Usage(format!("shard {}: {e}", s.index)))?;
        for (index, line) in records {
            if let Some((other, _)) = lines.insert(index, (s.index, line)) {
                return Err(Error::Usage(format!(
                    "record {index} is in shard {other} and in shard {} ({}): not one run's \
                     shards",
                    s.index,
                    s.dir.display()
                )));
            }
        }
        rows.push(row);
    }
    correct_skew(&shards, &mut rows);
    let requests = plan.out.join("requests.jsonl");
    write_lines(&requests, lines.into_values().map(|(_, l)| l))?;
    let mut notes = Vec::new();
    merge_prompts(&shards, &plan.out, &mut notes)?;
    merge_itl(&shards, &plan.out, &mut notes)?;
    copy_server_metrics(&shards, &plan.out, &mut notes)?;
    let mut run = merged_run_json(&shards, &rows);
    if plan.strict {
        run["strict"] = json!(true);
    }
    report::write_json(&plan.out.join("run.json"), &run)?;
    let summary = report::render(&plan.out, &requests, &plan.render)?;
    let merged = Merged {
        summary,
        rows,
        dir: plan.out.clone(),
        notes,
    };
    report::write_atomic(&plan.out.join("shards.txt"), merged.to_string().as_bytes())?;
    Ok(merged)
}

/// `--wait`: until every shard's run.json says how its run ended, or its heartbeat says it is
/// gone. Ends at once, exit status 2, when the meeting says the run never started (a shard
/// refused an earlier run's directory, or every shard ended before writing run.json).
fn wait_for_shards(plan: &MergePlan) -> Result<()> {
    let dirs = &plan.dirs;
    // run.json is written whole (renamed into place): one that does not parse will not.
    for d in dirs {
        let path = d.join("run.json");
        let cap = crate::sys::small_file::RUN_FILE_CAP;
        if let Ok(text) = crate::sys::small_file::read_text(&path, cap) {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                return Err(Error::Trace {
                    file: path,
                    line: e.line() as u64,
                    message: format!(
                        "not valid JSON ({e}): this shard's run.json is damaged; run the shard \
                         again, or merge without it"
                    ),
                });
            }
        }
    }
    // Ended: its run.json says how, or its heartbeat does, or has gone silent (killed).
    let finished = |d: &PathBuf| {
        report::run_config(d).is_some_and(|r| r["ended"].is_object() || lost(&r).is_some())
    };
    let deadline = Instant::now() + plan.wait;
    loop {
        // Looked for each time: the shards' run.json, when one appears, says their timeout.
        let meeting = Meeting::find(plan);
        if let Some(refused) = meeting.as_ref().and_then(Meeting::refused) {
            return Err(Error::Run(refused));
        }
        let pending: Vec<&PathBuf> = dirs.iter().filter(|d| !finished(d)).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let names = || {
            pending
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        // A shard that failed before it wrote run.json: its heartbeat, and every other
        // shard's, says the meeting is over; waiting longer would find nothing new.
        let over = meeting.as_ref().map(Meeting::over);
        if let Some(Over::Ended(why)) = &over {
            return Err(Error::Run(format!(
                "not finished: {} has no run.json, and every shard of the run has ended: {why}",
                names()
            )));
        }
        // A shard gone quiet while the others have ended is waited for until its heartbeat
        // is old enough to call it lost, whatever --wait says.
        let settling = matches!(over, Some(Over::Settling));
        if Instant::now() >= deadline && !settling {
            let why = match plan.wait.is_zero() {
                true => "(add --wait SECS to wait for shards still running)".to_string(),
                false => format!("after waiting {} s", plan.wait.as_secs()),
            };
            return Err(Error::Run(format!(
                "not finished: {} has no run.json saying how its run ended {why}",
                names()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `--rendezvous` directory the shards met in, as merge reads it.
struct Meeting {
    dir: PathBuf,
    count: u32,
    timeout: Duration,
}

/// What the heartbeats say of a run not all of whose shards have finished.
enum Over {
    /// Every shard has ended (done, failed, stopped or silent): why those that did not
    /// finish ended.
    Ended(String),
    /// The others have ended, and the rest have not written a heartbeat for two beats: they
    /// are lost once silent for the heartbeat timeout.
    Settling,
    Running,
}

impl Meeting {
    /// `--rendezvous`, else the directory some shard's run.json names.
    fn find(plan: &MergePlan) -> Option<Meeting> {
        let run = plan.dirs.iter().find_map(|d| report::run_config(d));
        let named = run.as_ref().and_then(|r| r["rendezvous"]["dir"].as_str());
        let dir = plan.rendezvous.clone().or(named.map(PathBuf::from))?;
        let timeout = run
            .as_ref()
            .and_then(|r| r["rendezvous"]["heartbeat_timeout_s"].as_f64())
            .unwrap_or(15.0);
        let count = match run.as_ref().and_then(|r| r["shard"]["count"].as_u64()) {
            Some(c) => c as u32,
            None => crate::rendezvous::count_in(&dir)?.ok()?,
        };
        Some(Meeting {
            dir,
            count,
            timeout: Duration::from_secs_f64(timeout),
        })
    }

    /// A shard that refused to join: the directory holds an earlier run, and the run asked
    /// for now never started. Its files are the earlier run's, not this one's.
    fn refused(&self) -> Option<String> {
        let refused = crate::rendezvous::refusals(&self.dir);
        let first = refused.first()?;
        Some(format!(
            "the run never started: shard {}/{} refused to join ({}); the shard directories \
             hold an earlier run, which is not merged as this one's",
            first.index,
            first.count,
            crate::printable::printable(&first.why)
        ))
    }

    fn over(&self) -> Over {
        let now = crate::sys::wall_start::unix_ns_now();
        use crate::rendezvous::State;
        let (mut whys, mut quiet, mut running) = (Vec::new(), false, false);
        let beats = crate::rendezvous::beats(&self.dir, self.count);
        for (i, beat) in beats.into_iter().enumerate() {
            // One that never joined: still coming (a pod not yet scheduled), unless every
            // other has ended, when the run is off without it.
            let Some(beat) = beat else {
                whys.push((false, format!("shard {i}/{} never joined", self.count)));
                continue;
            };
            let lost = crate::rendezvous::lost_because(&beat, now, self.timeout);
            match (beat.state, lost) {
                (Some(State::Done), _) => {}
                // The causes first: shards that failed or went silent, then those stopped
                // for them.
                (state, Some(why)) => whys.push((
                    state == Some(State::Stopped),
                    format!("shard {i}/{} {why}", self.count),
                )),
                (_, None) => {
                    let age = now.saturating_sub(beat.unix_ns);
                    match age > 2 * crate::rendezvous::BEAT_EVERY.as_nanos() as u64 {
                        true => quiet = true,
                        false => running = true,
                    }
                }
            }
        }
        if running {
            return Over::Running;
        }
        if quiet {
            return Over::Settling;
        }
        whys.sort_by_key(|(stopped, _)| *stopped);
        let whys: Vec<String> = whys.into_iter().map(|(_, w)| w).collect();
        Over::Ended(whys.join("; "))
    }
}

/// Each shard's run.json, checked to be one run's, every index once, in index order.
fn read_shards(dirs: &[PathBuf]) -> Result<Vec<ShardRun>> {
    let mut shards: Vec<ShardRun> = Vec::new();
    for dir in dirs {
        let run = report::run_config(dir)
            .ok_or_else(|| Error::Usage(format!("{}: no readable run.json", dir.display())))?;
        let index = run["shard"]["index"].as_u64().ok_or_else(|| {
            Error::Usage(format!(
                "{}: not a shard (its run.json has no shard: it was replayed without --shard)",
                dir.display()
            ))
        })? as u32;
        if let Some(first) = shards.first() {
            check_same_run(first, dir, &run)?;
        }
        if let Some(twin) = shards.iter().find(|s| s.index == index) {
            return Err(Error::Usage(format!(
                "shard {index} given twice: {} and {}",
                twin.dir.display(),
                dir.display()
            )));
        }
        shards.push(ShardRun {
            dir: dir.clone(),
            run,
            index,
        });
    }
    let count = shards[0].run["shard"]["count"].as_u64().unwrap_or(0) as u32;
    let missing: Vec<String> = (0..count)
        .filter(|i| !shards.iter().any(|s| s.index == *i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Usage(format!(
            "shard {} missing: the run has {count} shards, {} given",
            missing.join(", "),
            shards.len()
        )));
    }
    shards.sort_by_key(|s| s.index);
    Ok(shards)
}

fn check_same_run(first: &ShardRun, dir: &Path, run: &Value) -> Result<()> {
    let field = |r: &Value, key: &str| match key {
        "shard.count" => r["shard"]["count"].clone(),
        "shard.by" => r["shard"]["by"].clone(),
        "shard.records_per_shard" => r["shard"]["records_per_shard"].clone(),
        "start" => r["start"]["at_unix_ms"].clone(),
        // Each shard's in-process mock listens on a port of its own.
        "endpoints" if !r["mock"].is_null() => json!("the in-process mock"),
        key => r[key].clone(),
    };
    let keys = SAME_RUN.iter().copied().chain([
        "shard.count",
        "shard.by",
        "shard.records_per_shard",
        "start",
    ]);
    for key in keys {
        let (a, b) = (field(&first.run, key), field(run, key));
        if a != b {
            return Err(Error::Usage(format!(
                "{} and {} are not shards of one run: their `{key}` differs ({a} vs {b})",
                first.dir.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Record lines as read, with their index.
type IndexedLines = Vec<(u64, Vec<u8>)>;

/// A shard's records as raw lines by index, and its row (counts, drift).
fn read_records(s: &ShardRun) -> Result<(ShardRow, IndexedLines)> {
    let (mut records, mut drifts, mut ok, mut failed) = (Vec::new(), Vec::new(), 0, 0);
    each_indexed_line(&s.dir.join("requests.jsonl"), |index, v, line| {
        if v["warmup"] != true {
            drifts.extend(v["drift_ms"].as_f64());
            let status = v["status"].as_u64().unwrap_or(0);
            let good = v["error"].is_null() && (200..300).contains(&status);
            ok += u64::from(good);
            failed += u64::from(!good);
        }
        records.push((index, line.to_vec()));
    })?;
    let drift = Distribution::of(&mut drifts, &crate::stats::Percentiles::default());
    let run = &s.run;
    let check = &run["clock_check"]["start"];
    // A shard that wrote no end: why it is gone, from its last heartbeat.
    let gone = lost(run);
    let row = ShardRow {
        shard: format!("{}/{}", s.index, run["shard"]["count"]),
        dir: s.dir.display().to_string(),
        records: records.len() as u64,
        ok,
        failed,
        ended: run["ended"]["how"]
            .as_str()
            .unwrap_or(if gone.is_some() { "lost" } else { "unknown" })
            .to_string(),
        ended_at: last_beat(run).map(|(b, _)| crate::sys::wall_start::rfc3339_utc(b.unix_ns)),
        why: match run["ended"]["how"].as_str() {
            Some("completed") => None,
            Some(_) => run["ended"]["detail"].as_str().map(String::from),
            None => gone,
        },
        start_skew_ms: None,
        clock_offset_ms: check["offset_ms"].as_f64(),
        clock_uncertainty_ms: check["uncertainty_ms"].as_f64(),
        host: run["clock"]["host"].as_str().map(String::from),
        late_ms: run["start"]["late_ms"].as_f64(),
        drift_p50_ms: drift.as_ref().and_then(|d| d.percentile(50.0)),
        drift_p99_ms: drift.as_ref().and_then(|d| d.percentile(99.0)),
        drift_max_ms: drift.as_ref().map(|d| d.max),
    };
    Ok((row, records))
}

/// `--rendezvous`: a shard's last heartbeat, and its heartbeat timeout (s), from the directory
/// its run.json names.
fn last_beat(run: &Value) -> Option<(crate::rendezvous::Beat, f64)> {
    let dir = Path::new(run["rendezvous"]["dir"].as_str()?);
    let beat = crate::rendezvous::beat(dir, run["shard"]["index"].as_u64()? as u32)?;
    Some((beat, run["rendezvous"]["heartbeat_timeout_s"].as_f64()?))
}

/// Why a shard that wrote no end is gone (its heartbeat failed, stopped or went silent).
fn lost(run: &Value) -> Option<String> {
    if run["ended"].is_object() {
        return None;
    }
    let (beat, timeout_s) = last_beat(run)?;
    let now = crate::sys::wall_start::unix_ns_now();
    crate::rendezvous::lost_because(&beat, now, Duration::from_secs_f64(timeout_s))
}

/// Calls `each` with every line of a shard's JSONL file (records or prompts) that has an
/// `index`: the index, the line parsed, and the line as written (copied verbatim). A last
/// line cut short (a shard killed mid-write) is left out with a warning.
fn each_indexed_line(path: &Path, mut each: impl FnMut(u64, &Value, &[u8])) -> Result<()> {
    let mut input = BufReader::new(fs::File::open(path).map_err(|e| Error::io(path, e))?);
    let mut line = Vec::new();
    for n in 1u64.. {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io(path, e))?
            == 0
        {
            return Ok(());
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.last() != Some(&b'\n') {
            eprintln!(
                "warning: {}:{n}: the last line is cut short; it is left out",
                path.display()
            );
            return Ok(());
        }
        let v: Value = serde_json::from_slice(&line)
            .map_err(|e| report::line_error(path, n, format!("invalid JSON: {e}")))?;
        let index = v["index"]
            .as_u64()
            .ok_or_else(|| report::line_error(path, n, "no `index`".into()))?;
        each(index, &v, &line);
    }
    Ok(())
}

/// Each shard's time 0 on the reference clock (its own plus its measured offset), against the
/// agreed `--start-at` instant, or against shard 0's without one. Unknown for a shard whose
/// clock was not checked, unless every shard ran on one host (one clock).
fn correct_skew(shards: &[ShardRun], rows: &mut [ShardRow]) {
    let host = rows[0].host.clone();
    let one_host = host.is_some() && rows.iter().all(|r| r.host == host);
    let start_of = |s: &ShardRun, row: &ShardRow| {
        let own = s.run["start"]["actual_unix_ms"]
            .as_f64()
            .or_else(|| s.run["started_unix_ms"].as_f64())?;
        Some(own + row.clock_offset_ms.unwrap_or(0.0))
    };
    let reference = shards[0].run["start"]["at_unix_ms"]
        .as_f64()
        .or_else(|| start_of(&shards[0], &rows[0]));
    for (s, row) in shards.iter().zip(rows.iter_mut()) {
        let known = one_host || row.clock_offset_ms.is_some();
        row.start_skew_ms = match (start_of(s, row), reference) {
            (Some(start), Some(r)) if known => Some(start - r),
            _ => None,
        };
    }
}

fn write_lines(path: &Path, lines: impl Iterator<Item = Vec<u8>>) -> Result<()> {
    let file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    for line in lines {
        out.write_all(&line).map_err(|e| Error::io(path, e))?;
    }
    out.flush().map_err(|e| Error::io(path, e))
}

/// `--save-prompts`: the shards' prompts.jsonl in index order, when every shard saved them.
fn merge_prompts(shards: &[ShardRun], out: &Path, notes: &mut Vec<String>) -> Result<()> {
    let files: Vec<PathBuf> = shards.iter().map(|s| s.dir.join("prompts.jsonl")).collect();
    if !files.iter().all(|f| f.is_file()) {
        if files.iter().any(|f| f.is_file()) {
            notes.push("prompts.jsonl: not every shard saved its prompts; none merged".into());
        }
        return Ok(());
    }
    let mut lines = BTreeMap::new();
    for path in &files {
        each_indexed_line(path, |index, _, line| {
            lines.insert(index, line.to_vec());
        })?;
    }
    write_lines(&out.join("prompts.jsonl"), lines.into_values())
}

/// ITL: recomputed from the records' chunk times when they have them (`--record-itl`);
/// else the shards' itl.json histograms are added, which gives the very histogram one process
/// would have filled with the same gaps.
fn merge_itl(shards: &[ShardRun], out: &Path, notes: &mut Vec<String>) -> Result<()> {
    if shards.iter().all(|s| s.run["record_itl"] == true) {
        notes.push("ITL: recomputed from every record's chunk times (--record-itl)".into());
        return Ok(());
    }
    let mut sum = crate::stats::Gaps::default();
    for s in shards {
        let Some(gaps) = report::load_itl(&s.dir)? else {
            notes.push(format!(
                "ITL: {} has no itl.json and no chunk times; ITL is left out",
                s.dir.display()
            ));
            return Ok(());
        };
        sum.add(&gaps);
    }
    if !shards.is_empty() {
        report::save_itl(out, &sum)?;
        notes.push(
            "ITL: the shards' gap histograms added (the records hold no chunk times; replay \
             with --record-itl to recompute ITL from them)"
                .into(),
        );
    }
    Ok(())
}

/// Server metrics come from the lowest shard that scraped them (shard 0 unless
/// `--scrape-every-shard` or shard 0 had none).
fn copy_server_metrics(shards: &[ShardRun], out: &Path, notes: &mut Vec<String>) -> Result<()> {
    let name = crate::server_metrics::METRICS_FILE;
    if let Some(s) = shards.iter().find(|s| s.dir.join(name).is_file()) {
        let (from, to) = (s.dir.join(name), out.join(name));
        fs::copy(&from, &to).map_err(|e| Error::io(&to, e))?;
        notes.push(format!("server metrics: shard {}'s scrapes", s.index));
    }
    Ok(())
}

/// Shard 0's run.json, without what is one shard's own, with the shards listed.
fn merged_run_json(shards: &[ShardRun], rows: &[ShardRow]) -> Value {
    let mut run = shards[0].run.clone();
    let whole = &shards[0].run["shard"];
    if let Some(m) = run.as_object_mut() {
        for own in [
            "shard",
            "connections_at_start",
            "clock_check",
            "num_producer",
        ] {
            m.remove(own);
        }
    }
    run["merged"] = json!({
        "count": whole["count"],
        "by": whole["by"],
        "records": whole["records_whole"],
        "conversations": whole["conversations_whole"],
        "shards": rows,
    });
    // For the verdict: the busiest shard's senders, and every shard's late arrivals.
    let share =
        |s: &&ShardRun| crate::stats::verdict::sender_cpu_share(&s.run["senders"]).unwrap_or(0.0);
    if let Some(busiest) = shards.iter().max_by(|a, b| share(a).total_cmp(&share(b))) {
        let sum = |key: &str| -> u64 {
            shards
                .iter()
                .filter_map(|s| s.run["senders"][key].as_u64())
                .sum()
        };
        let (late, queued) = (sum("arrived_late"), sum("queued_late"));
        run["senders"] = busiest.run["senders"].clone();
        run["senders"]["arrived_late"] = json!(late);
        run["senders"]["queued_late"] = json!(queued);
        run["senders"]["shard"] = json!(busiest.index);
        run["senders"]["out_of_descriptors"] = json!(shards
            .iter()
            .any(|s| s.run["senders"]["out_of_descriptors"] == true));
    }
    // Turns a session bound kept from being sent, and sessions it kept from starting, over
    // all the shards.
    for key in ["turns_cut", "sessions_dropped"] {
        if shards.iter().any(|s| s.run["schedule"][key].is_u64()) {
            let sum: u64 = shards
                .iter()
                .filter_map(|s| s.run["schedule"][key].as_u64())
                .sum();
            run["schedule"][key] = json!(sum);
        }
    }
    // A shard lost (killed, its host gone: it wrote no end) ends the merged run so, before
    // the shards that stopped for it; then a shard stopped early (a signal, a full disk, its
    // error rate); else it completed, with or without a success among all the shards' records.
    let gone = shards
        .iter()
        .zip(rows)
        .find(|(s, _)| !s.run["ended"].is_object());
    let stopped = shards.iter().find(|s| {
        !matches!(
            s.run["ended"]["how"].as_str(),
            Some("completed" | "no-success")
        )
    });
    run["ended"] = match (gone, stopped) {
        (Some((s, row)), _) => Ending::ShardLost {
            reason: format!(
                "shard {}/{} ended without a word{}: {}",
                s.index,
                shards.len(),
                row.ended_at
                    .as_ref()
                    .map_or(String::new(), |t| format!(" (last heartbeat {t})")),
                row.why
                    .as_deref()
                    .unwrap_or("no run.json end and no heartbeat")
            ),
        }
        .to_json(),
        (None, Some(s)) => {
            let mut ended = s.run["ended"].clone();
            ended["detail"] = json!(format!(
                "shard {}: {}",
                s.index,
                ended["detail"].as_str().unwrap_or("ended early")
            ));
            ended
        }
        (None, None) if rows.iter().all(|r| r.ok == 0) => Ending::NoSuccess {
            failed: rows.iter().map(|r| r.failed).sum(),
            hint: None,
        }
        .to_json(),
        (None, None) => Ending::Completed.to_json(),
    };
    run
}

impl fmt::Display for Merged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |x| format!("{x:.p$}"));
        writeln!(
            f,
            "{:<7} {:>9} {:>7} {:>11} {:>14} {:>10} {:>10} {:>10}  ended",
            "shard",
            "records",
            "failed",
            "skew ms",
            "clock ms",
            "drift p50",
            "drift p99",
            "drift max",
        )?;
        for r in &self.rows {
            let clock = match (r.clock_offset_ms, r.clock_uncertainty_ms) {
                (Some(o), Some(u)) => format!("{o:+.2}+-{u:.2}"),
                _ => "unchecked".into(),
            };
            let skew = match r.start_skew_ms {
                Some(s) => format!("{s:.3}"),
                None => "unknown".into(),
            };
            writeln!(
                f,
                "{:<7} {:>9} {:>7} {:>11} {:>14} {:>10} {:>10} {:>10}  {}",
                r.shard,
                r.records,
                r.failed,
                skew,
                clock,
                opt(r.drift_p50_ms, 3),
                opt(r.drift_p99_ms, 3),
                opt(r.drift_max_ms, 3),
                r.ended
            )?;
        }
        for r in self.rows.iter().filter(|r| r.why.is_some()) {
            writeln!(
                f,
                "shard {} ended {}{}: {}",
                r.shard,
                r.ended,
                r.ended_at
                    .as_ref()
                    .map_or(String::new(), |t| format!(" (last heartbeat {t})")),
                crate::printable::printable(r.why.as_deref().unwrap_or_default())
            )?;
        }
        for n in &self.notes {
            writeln!(f, "{n}")?;
        }
        Ok(())
    }
}
