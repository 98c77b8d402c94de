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

/// Writes records as they complete (flushed per batch), feeds the progress line, and on a
/// signal stops sending and drains.
pub(super) fn collect(
    plan: &ReplayPlan,
    trace: &TraceInput,
    stages: &Stages,
    out: Output,
    mut meeting: Option<&mut Rendezvous>,
) -> Result<Collected> {
    let mut c = Collector::new(plan, trace, stages, out);
    let mut beat_at = std::time::Instant::now();
    loop {
        if !c.got.stopped && signals_received() > 0 {
            c.stop_on_signal();
        }
        match stages.records.recv_timeout(Duration::from_millis(50)) {
            Ok(first) => {
                for r in std::iter::once(first).chain(stages.records.try_iter()) {
                    c.take(r);
                }
                c.flush();
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
            c.heartbeat(rv);
        }
        if !c.got.stopped && c.got.shard_lost.is_none() {
            c.live.tick(snapshot);
        }
    }
    if let Err(e) = c.writer.flush() {
        c.write_failed(&c.got.requests_path.clone(), e);
    }
    if let Some(rv) = meeting {
        // The closing heartbeat's counts: every record is in.
        rv.update(beat(&c.live, stages));
    }
    if !c.got.stopped {
        c.live.finish();
    }
    Ok(c.got)
}

/// The collector's state: the record files, the progress line, the error-rate judge, and
/// what it gathered so far (why the run stopped, the counts).
struct Collector<'a> {
    plan: &'a ReplayPlan,
    stages: &'a Stages,
    writer: RecordWriter,
    /// `--output-path`: the copy in the format asked for.
    copy: Option<RecordWriter>,
    live: LiveProgress,
    judge: Option<ErrorRateJudge>,
    on_loss: Option<OnShardLoss>,
    /// The shards lost that were said (under `--on-shard-loss continue`, once each).
    lost_said: Vec<u32>,
    got: Collected,
}

impl<'a> Collector<'a> {
    fn new(plan: &'a ReplayPlan, trace: &TraceInput, stages: &'a Stages, out: Output) -> Self {
        let (copy_path, copy) = match out.copy {
            Some((path, file)) => (
                Some(path),
                Some(RecordWriter::new(file, plan.record_format)),
            ),
            None => (None, None),
        };
        let conversations = trace.stats.turns_with_parent > 0;
        Collector {
            plan,
            stages,
            writer: RecordWriter::new(out.requests_file, RecordFormat::Llmreplay),
            copy,
            live: LiveProgress::new(trace.preview.last_ns as f64 / 1e9, !plan.quiet)
                .planning(trace.preview.records, conversations),
            judge: plan
                .max_error_rate
                .map(|limit| ErrorRateJudge::new(limit, trace.preview.skipped_by_offset)),
            on_loss: plan.hosts.rendezvous.as_ref().map(|r| r.on_loss),
            lost_said: Vec::new(),
            got: Collected {
                dir: out.dir,
                requests_path: out.requests_path,
                copy_path,
                stopped: false,
                stopped_early: None,
                write_failed: None,
                measured_ok: 0,
                measured_failed: 0,
                closed_unanswered: 0,
                shard_lost: None,
            },
        }
    }

    /// Asks the senders to stop: nothing new is sent, requests in flight drain.
    fn stop_sending(&mut self) {
        self.live.finish();
        self.stages.stop.request(self.stages.clock.now_ns());
    }

    /// A signal: sending stops, and a summary of what is recorded so far is written, so that
    /// a second signal or a kill during the drain still leaves one; it says so (`ended.how:
    /// stopping`), and the end writes it again with how the run ended.
    fn stop_on_signal(&mut self) {
        self.got.stopped = true;
        self.stop_sending();
        eprintln!(
            "stopping: nothing new is sent; waiting up to {} s for requests in flight (signal \
             again to exit at once)",
            self.plan.drain_timeout_s
        );
        let dir = &self.got.dir;
        let mut run = report::run_config(dir).unwrap_or_default();
        run["ended"] = json!({
            "how": "stopping",
            "detail": "a signal stopped the run; this summary covers the records written \
                       before the drain of the requests in flight, and is replaced when \
                       it ends",
        });
        let noted = report::write_json(&dir.join("run.json"), &run);
        if noted.is_ok() && self.writer.flush().is_ok() {
            if let Err(e) = report::render(dir, &self.got.requests_path, &self.plan.render) {
                eprintln!("warning: the summary before the drain: {e}");
            }
        }
    }

    /// A write that fails (the disk full) stops the run: what was written stays whole.
    fn write_failed(&mut self, path: &Path, e: io::Error) {
        if self.got.write_failed.is_none() {
            let reason = format!("cannot write {}: {e}", path.display());
            self.stop_sending();
            eprintln!("error: {reason}; the run stops, nothing new is sent");
            self.got.write_failed = Some(reason);
        }
    }

    /// One record: written (and copied), counted, and judged against `--max-error-rate`.
    fn take(&mut self, mut r: RequestRecord) {
        if self.got.write_failed.is_some() {
            return; // draining: nothing more can be kept
        }
        log_sent_prompt(&mut r, self.stages);
        if let Some(identity) = &self.stages.builder.identity {
            r.trace_id = identity.trace_id(r.index);
        }
        if let Err(e) = self.writer.write(&r) {
            self.write_failed(&self.got.requests_path.clone(), e);
        }
        if let Some(Err(e)) = self.copy.as_mut().map(|c| c.write(&r)) {
            self.copy_failed(e);
        }
        self.live.add(&r);
        if !r.warmup {
            self.got.measured_ok += u64::from(r.ok());
            self.got.measured_failed += u64::from(!r.ok());
            self.got.closed_unanswered += u64::from(r.closed_unanswered());
        }
        let verdict = self
            .judge
            .as_mut()
            .and_then(|j| j.record(r.index, !r.ok(), r.warmup));
        if let (None, Some(reason)) = (&self.got.stopped_early, verdict) {
            self.stop_sending();
            eprintln!("{reason}; nothing new is sent, requests in flight drain");
            self.got.stopped_early = Some(reason);
        }
    }

    fn copy_failed(&mut self, e: io::Error) {
        let path = self.got.copy_path.clone().unwrap_or_default();
        self.write_failed(&path, e);
    }

    /// The batch's records reach the files.
    fn flush(&mut self) {
        if let Err(e) = self.writer.flush() {
            self.write_failed(&self.got.requests_path.clone(), e);
        }
        if let Some(Err(e)) = self.copy.as_mut().map(RecordWriter::flush) {
            self.copy_failed(e);
        }
    }

    /// `--rendezvous`: this shard's counts to the others, and the shards they lost: under
    /// `--on-shard-loss stop` this one stops too; under `continue` it says so once a shard.
    fn heartbeat(&mut self, rv: &mut Rendezvous) {
        rv.update(beat(&self.live, self.stages));
        for (shard, why) in rv.lost_peers() {
            match self.on_loss {
                Some(OnShardLoss::Stop) if self.got.shard_lost.is_none() && !self.got.stopped => {
                    self.stop_sending();
                    eprintln!(
                        "{}; this shard stops: nothing new is sent, requests in flight drain \
                         (--on-shard-loss continue carries on)",
                        crate::printable::printable(&why)
                    );
                    self.got.shard_lost = Some(why);
                }
                // Said once a shard: its reason (a silence) grows with every look.
                Some(OnShardLoss::Continue) if !self.lost_said.contains(&shard) => {
                    eprintln!(
                        "warning: {}; this shard carries on (--on-shard-loss continue): the \
                         merged run lacks that shard's share",
                        crate::printable::printable(&why)
                    );
                    self.lost_said.push(shard);
                }
                _ => {}
            }
        }
    }
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
