//! The collector: the main thread during a run. It writes records as they complete, feeds
//! the progress line, and on a signal, an error rate or a failed write stops the sending.

use super::*;
use crate::rendezvous::{Beat, OnShardLoss, State, BEAT_EVERY};

/// What the collector gathered.
pub(super) struct Collected {
    pub(super) dir: PathBuf,
    pub(super) requests_path: PathBuf,
    pub(super) copy_path: Option<PathBuf>,
    pub(super) stopped: bool,
    pub(super) stopped_early: Option<String>,
    /// A write of the records failed (the disk full): why. The run stopped there.
    pub(super) write_failed: Option<String>,
    /// Measured (not warmup) requests that succeeded, and that failed.
    pub(super) measured_ok: u64,
    pub(super) measured_failed: u64,
    /// Requests whose connection the server closed before a byte of answer.
    pub(super) closed_unanswered: u64,
    /// `--rendezvous`, `--on-shard-loss stop`: the shard lost, and why; the run stopped there.
    pub(super) shard_lost: Option<String>,
}

/// Writes records as they complete (flushed per batch), feeds the progress line, and on a signal stops sending and drains.
pub(super) fn collect(
    plan: &ReplayPlan,
    trace: &TraceInput,
    stages: &Stages,
    out: Output,
    mut meeting: Option<&mut Rendezvous>,
) -> Result<Collected> {
    let on_loss = plan.hosts.rendezvous.as_ref().map(|r| r.on_loss);
    let mut shard_lost: Option<String> = None;
    let mut writer = RecordWriter::new(out.requests_file, RecordFormat::Llmreplay);
    let (copy_path, mut copy) = match out.copy {
        Some((path, file)) => (
            Some(path),
            Some(RecordWriter::new(file, plan.record_format)),
        ),
        None => (None, None),
    };
    let conversations = trace.stats.turns_with_parent > 0;
    let mut live = LiveProgress::new(trace.preview.last_ns as f64 / 1e9, !plan.quiet)
        .planning(trace.preview.records, conversations);
    let mut stopped = false;
    // A write that fails (the disk full) stops the run: what was written stays whole.
    let mut write_failed: Option<String> = None;
    let on_write_error =
        |failed: &mut Option<String>, path: &Path, e: io::Error, live: &mut LiveProgress| {
            if failed.is_none() {
                live.finish();
                let reason = format!("cannot write {}: {e}", path.display());
                eprintln!("error: {reason}; the run stops, nothing new is sent");
                stages.stop.request(stages.clock.now_ns());
                *failed = Some(reason);
            }
        };
    let (mut measured_ok, mut measured_failed, mut closed_unanswered) = (0u64, 0u64, 0u64);
    let mut judge = plan
        .max_error_rate
        .map(|limit| ErrorRateJudge::new(limit, trace.preview.skipped_by_offset));
    let mut stopped_early = None;
    let mut lost_said: Vec<u32> = Vec::new();
    let mut beat_at = std::time::Instant::now();
    loop {
        if !stopped && signals_received() > 0 {
            stopped = true;
            stages.stop.request(stages.clock.now_ns());
            live.finish();
            eprintln!(
                "stopping: nothing new is sent; waiting up to {} s for requests in flight \
                 (signal again to exit at once)",
                plan.drain_timeout_s
            );
            // A summary of what is recorded so far, so that a second signal or a kill during
            // the drain still leaves one; it says so (`ended.how: stopping`), and the end
            // writes it again with how the run ended.
            let mut run = report::run_config(&out.dir).unwrap_or_default();
            run["ended"] = json!({
                "how": "stopping",
                "detail": "a signal stopped the run; this summary covers the records written \
                           before the drain of the requests in flight, and is replaced when \
                           it ends",
            });
            let noted = report::write_json(&out.dir.join("run.json"), &run);
            if noted.is_ok() && writer.flush().is_ok() {
                if let Err(e) = report::render(&out.dir, &out.requests_path, &plan.render) {
                    eprintln!("warning: the summary before the drain: {e}");
                }
            }
        }
        match stages.records.recv_timeout(Duration::from_millis(50)) {
            Ok(first) => {
                for mut r in std::iter::once(first).chain(stages.records.try_iter()) {
                    if write_failed.is_some() {
                        continue; // draining: nothing more can be kept
                    }
                    log_sent_prompt(&mut r, stages);
                    if let Err(e) = writer.write(&r) {
                        on_write_error(&mut write_failed, &out.requests_path, e, &mut live);
                    }
                    if let (Some(c), Some(path)) = (copy.as_mut(), &copy_path) {
                        if let Err(e) = c.write(&r) {
                            on_write_error(&mut write_failed, path, e, &mut live);
                        }
                    }
                    live.add(&r);
                    if !r.warmup {
                        measured_ok += u64::from(r.ok());
                        measured_failed += u64::from(!r.ok());
                        closed_unanswered += u64::from(r.closed_unanswered());
                    }
                    let verdict = judge
                        .as_mut()
                        .and_then(|j| j.record(r.index, !r.ok(), r.warmup));
                    if let (None, Some(reason)) = (&stopped_early, verdict) {
                        live.finish();
                        eprintln!("{reason}; nothing new is sent, requests in flight drain");
                        stages.stop.request(stages.clock.now_ns());
                        stopped_early = Some(reason);
                    }
                }
                if let Err(e) = writer.flush() {
                    on_write_error(&mut write_failed, &out.requests_path, e, &mut live);
                }
                if let (Some(c), Some(path)) = (copy.as_mut(), &copy_path) {
                    if let Err(e) = c.flush() {
                        on_write_error(&mut write_failed, path, e, &mut live);
                    }
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
        let snapshot = Snapshot {
            sent: stages.progress.sent.load(Ordering::Relaxed),
            arrived_late: stages.progress.arrived_late.load(Ordering::Relaxed),
            out_of_descriptors: stages.progress.out_of_descriptors.load(Ordering::Relaxed),
            run_s: (stages.clock.now_ns() as f64 - stages.t0_ns as f64) / 1e9,
        };
        if let Some(rv) = meeting
            .as_deref_mut()
            .filter(|_| beat_at.elapsed() >= BEAT_EVERY)
        {
            beat_at = std::time::Instant::now();
            rv.update(beat(&live, stages));
            for (shard, why) in rv.lost_peers() {
                match on_loss {
                    Some(OnShardLoss::Stop) if shard_lost.is_none() && !stopped => {
                        live.finish();
                        eprintln!(
                            "{}; this shard stops: nothing new is sent, requests in flight \
                             drain (--on-shard-loss continue carries on)",
                            crate::printable::printable(&why)
                        );
                        stages.stop.request(stages.clock.now_ns());
                        shard_lost = Some(why);
                    }
                    // Said once a shard: its reason (a silence) grows with every look.
                    Some(OnShardLoss::Continue) if !lost_said.contains(&shard) => {
                        eprintln!(
                            "warning: {}; this shard carries on (--on-shard-loss continue): \
                             the merged run lacks that shard's share",
                            crate::printable::printable(&why)
                        );
                        lost_said.push(shard);
                    }
                    _ => {}
                }
            }
        }
        if !stopped && shard_lost.is_none() {
            live.tick(snapshot);
        }
    }
    if let Err(e) = writer.flush() {
        on_write_error(&mut write_failed, &out.requests_path, e, &mut live);
    }
    if let Some(rv) = meeting {
        // The closing heartbeat's counts: every record is in.
        rv.update(beat(&live, stages));
    }
    if !stopped {
        live.finish();
    }
    Ok(Collected {
        dir: out.dir,
        requests_path: out.requests_path,
        copy_path,
        stopped,
        stopped_early,
        write_failed,
        measured_ok,
        measured_failed,
        closed_unanswered,
        shard_lost,
    })
}

/// A rebuilt turn's prompts.jsonl line, as sent (`--save-prompts`).
fn log_sent_prompt(r: &mut RequestRecord, stages: &Stages) {
    if let (Some(line), Some(log)) = (r.sent_prompt.take(), &stages.builder.prompt_log) {
        if let Err(e) = log.late(&line) {
            eprintln!("warning: {e}");
        }
    }
}

/// The running shard's heartbeat: its counts so far.
fn beat(live: &LiveProgress, stages: &Stages) -> Beat {
    let (done, failed, output_tokens) = live.totals();
    let figures = live.figures();
    Beat {
        late_sends: figures.late_sends,
        drift_ns: figures.drift_ns,
        ttft_ns: figures.ttft_ns,
        state: Some(State::Running),
        sent: stages.progress.sent.load(Ordering::Relaxed),
        done,
        failed,
        late: stages.progress.arrived_late.load(Ordering::Relaxed),
        output_tokens,
        run_s: (stages.clock.now_ns() as f64 - stages.t0_ns as f64) / 1e9,
        ..Beat::default()
    }
}
