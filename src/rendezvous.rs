//! `--rendezvous DIR`: the shards of one run meet in a directory they all see (a Kubernetes
//! volume, Slurm's shared filesystem), with no coordinator process.
//!
//! - **Readiness barrier.** A shard that has read its trace, prepared its prompts, reached its
//!   endpoints and checked its clock writes `ready/<i>` with its clock reading, then waits for
//!   all K. The start instant is the latest reading plus [`START_LEAD`]: every shard reads the
//!   same K files and computes the same instant. A shard not ready within the bound fails the
//!   run for all (each one waiting gives up with the same message).
//! - **Heartbeats.** A thread of each shard rewrites `live/<i>` every [`BEAT_EVERY`], from
//!   joining to the end, with its state and counts (what `llmreplay watch` shows); the
//!   collector reads the others'. A shard that failed, was
//!   stopped, or whose heartbeat is older than the timeout is lost; the others stop, or carry
//!   on with `--on-shard-loss continue`.
//!
//! Every file is written whole under a temporary name and renamed into place, so a reader
//! never sees half of one (rename is atomic on NFS and local filesystems alike).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::wall_start::{reference_now, unix_ns_now};

/// From the last shard's readiness to the start: time for every shard to see the last
/// `ready` file (polled every [`POLL`]; a shared filesystem may show it a second late) and
/// then open its connections ([`crate::sys::wall_start::sleep_until`]'s lead).
pub const START_LEAD: Duration = Duration::from_secs(5);
/// How often a shard rewrites its heartbeat and looks at the others'.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// How often the barrier looks for the others' `ready` files.
const POLL: Duration = Duration::from_millis(50);
/// A note dated further ahead of this host's clock than this is not this run's (or its
/// writer's clock is broken): a heartbeat from the future would never go stale, a readiness
/// from the future would put the start there.
const MAX_AHEAD: Duration = Duration::from_secs(60);

crate::choices! {
    /// What a shard does when another is lost.
    #[derive(Default)]
    pub enum OnShardLoss {
        /// Stop sending: the run without that shard's share is not the load asked for.
        #[default]
        Stop = "stop",
        /// Carry on and say so (the merged run is then missing that shard's share).
        Continue = "continue",
    }
}

/// A shard's life, as its heartbeat says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Reading the trace, preparing prompts, checking its clock.
    Preparing,
    /// Waiting at the barrier.
    Ready,
    Running,
    /// The run ended as its `how` says (it may still have failed requests).
    Done,
    /// An error ended it before or during the run.
    Failed,
    /// A signal or a lost shard stopped it.
    Stopped,
}

/// `ready/<i>`: a shard's readiness.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadyNote {
    pub index: u32,
    pub count: u32,
    /// What makes shards one run's (the trace's digest): a shard of another run is refused.
    pub run: String,
    /// `--run-id`, when given: shards of another id are refused too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// When it was ready (Unix ns), on the reference clock: this host's plus its measured
    /// offset, so that the start instant drawn from these notes is one all shards agree on.
    pub unix_ns: u64,
    pub host: String,
    /// The reference clock (the endpoint's `Date`, or `--ntp`) minus this host's, when
    /// checked: the hosts compare their clocks through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ns: Option<i64>,
}

/// `refused/<i>`: a shard that would not join because the directory holds an earlier run's
/// files. It touches nothing of that run; this note is what tells `merge` the run now asked
/// for never started, so that the earlier one's results are not passed off as its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefusedNote {
    pub index: u32,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub unix_ns: u64,
    pub why: String,
}

/// `live/<i>`: a shard's heartbeat and live counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Beat {
    pub index: u32,
    pub count: u32,
    /// The run's id (`--run-id`, or the one minted once the start is agreed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// When it was written, by the shard's clock (Unix ns).
    pub unix_ns: u64,
    pub state: Option<State>,
    /// Why it failed or stopped, or how its run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub sent: u64,
    pub done: u64,
    pub failed: u64,
    /// Requests that reached their sender after their send time (producers behind).
    pub late: u64,
    pub output_tokens: u64,
    /// Seconds since the run's time zero (negative before it).
    pub run_s: f64,
    /// The verdict's late sends so far (measured records sent more than 1 ms late).
    #[serde(default)]
    pub late_sends: u64,
    /// The measured records' send drift and successful TTFT so far, as `[ns, count]`
    /// histogram pairs: `watch` adds the shards' up into the run's percentiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_ns: Vec<[u64; 2]>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ttft_ns: Vec<[u64; 2]>,
}

impl Beat {
    pub fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.done)
    }
}

/// This shard's place in the meeting directory, and the thread that writes its heartbeat.
pub struct Rendezvous {
    dir: PathBuf,
    index: u32,
    count: u32,
    heartbeat_timeout: Duration,
    /// When it joined (a shard that never writes a heartbeat is lost this long after).
    joined: Instant,
    /// What the next heartbeat says (state and counts), shared with the beating thread.
    now: Arc<Mutex<Beat>>,
    beating: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    /// Its readiness, once written: a shard becomes ready once (a second wait reads the
    /// same instant, or shards that read the first would compute another start).
    ready_written: bool,
    /// The reference clock minus this host's ([`ReadyNote::clock_offset_ns`]).
    clock_offset_ns: Option<i64>,
}

fn ready_path(dir: &Path, i: u32) -> PathBuf {
    dir.join("ready").join(i.to_string())
}

fn live_path(dir: &Path, i: u32) -> PathBuf {
    dir.join("live").join(i.to_string())
}

fn refused_path(dir: &Path, i: u32) -> PathBuf {
    dir.join("refused").join(i.to_string())
}

/// The shards that refused to join the meeting in `dir` (an earlier run's files there), in
/// index order.
pub fn refusals(dir: &Path) -> Vec<RefusedNote> {
    let Ok(entries) = fs::read_dir(dir.join("refused")) else {
        return Vec::new();
    };
    let mut notes: Vec<RefusedNote> = entries
        .flatten()
        .filter_map(|e| read_note(&e.path()).ok().flatten())
        .collect();
    notes.sort_by_key(|n| n.index);
    notes
}

/// Writes `value` as JSON to `path` whole ([`crate::report::write_atomic`]: a temporary name,
/// renamed).
fn write_whole(path: &Path, value: &impl Serialize) -> crate::error::Result<()> {
    let bytes = serde_json::to_vec(value).expect("notes serialise");
    crate::report::write_atomic(path, &bytes)
}

/// Reads `path` as JSON: None when absent; an error naming the file when unreadable.
fn read_note<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, String> {
    match crate::sys::small_file::read(path, crate::sys::small_file::NOTE_CAP) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: not a note of llmreplay's ({e})", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Shard `i`'s heartbeat in `dir`, None where there is none (yet) or it cannot be read.
pub fn beat(dir: &Path, i: u32) -> Option<Beat> {
    read_note(&live_path(dir, i)).ok().flatten()
}

/// Every shard's heartbeat in `dir`, for `count` shards.
pub fn beats(dir: &Path, count: u32) -> Vec<Option<Beat>> {
    (0..count).map(|i| beat(dir, i)).collect()
}

/// The shard count of the run met in `dir`, from the heartbeats there (`watch`, `merge`);
/// None when there are none. A heartbeat claiming more shards than a run has is an error
/// naming it (one claimed 4,294,967,295, and `watch` tried to read them all).
pub fn count_in(dir: &Path) -> Option<Result<u32, String>> {
    let entries = fs::read_dir(dir.join("live")).ok()?;
    let mut count = None;
    for e in entries.flatten() {
        let Ok(Some(b)) = read_note::<Beat>(&e.path()) else {
            continue;
        };
        if b.count == 0 || b.count > crate::shard::MAX_SHARDS {
            return Some(Err(format!(
                "{}: a heartbeat claiming {} shards (a run has 1 to {})",
                e.path().display(),
                b.count,
                crate::shard::MAX_SHARDS
            )));
        }
        count = count.max(Some(b.count));
    }
    count.map(Ok)
}

/// Whether a heartbeat says its shard is gone: ended badly, or silent past `timeout` while it
/// should be running (`now_ns` by this host's clock). None when it is fine.
pub fn lost_because(beat: &Beat, now_ns: u64, timeout: Duration) -> Option<String> {
    let age_s = now_ns.saturating_sub(beat.unix_ns) as f64 / 1e9;
    let ahead_s = beat.unix_ns.saturating_sub(now_ns) as f64 / 1e9;
    if ahead_s > MAX_AHEAD.as_secs_f64() {
        return Some(format!(
            "wrote a heartbeat dated {ahead_s:.0} s ahead of this host's clock (not this \
             run's, or a clock far off): it cannot be told from a silent one"
        ));
    }
    match beat.state {
        Some(State::Failed) => Some(format!(
            "failed: {}",
            beat.why.as_deref().unwrap_or("no reason given")
        )),
        Some(State::Stopped) => Some(beat.why.clone().unwrap_or_else(|| "stopped".into())),
        Some(State::Done) => None,
        _ if age_s > timeout.as_secs_f64() => Some(format!(
            "no heartbeat for {age_s:.1} s (its process was killed, or its host lost)"
        )),
        _ => None,
    }
}

/// A readiness older than the barrier's own timeout is an earlier run's (its shard would
/// have given up since); one dated far ahead would put the start there.
/// `now`: the reference clock (readiness notes are stamped on it).
fn stale_or_ahead(
    dir: &Path,
    i: u32,
    n: &ReadyNote,
    now: u64,
    timeout: Duration,
) -> Result<(), String> {
    let path = ready_path(dir, i);
    let ago_s = now.saturating_sub(n.unix_ns) as f64 / 1e9;
    let ahead_s = n.unix_ns.saturating_sub(now) as f64 / 1e9;
    if ahead_s > MAX_AHEAD.as_secs_f64() {
        return Err(format!(
            "{}: shard {i} says it was ready {ahead_s:.0} s from now (its clock, or the note, \
             is wrong); give each run a directory of its own",
            path.display()
        ));
    }
    // The slack: a shard's clock may read a little behind the writer's.
    if ago_s > timeout.as_secs_f64() + MAX_AHEAD.as_secs_f64() {
        return Err(format!(
            "{}: shard {i} was ready {ago_s:.0} s ago, longer than --ready-timeout: the note \
             is an earlier run's; give each run a directory of its own (or empty this one)",
            path.display()
        ));
    }
    Ok(())
}

impl Rendezvous {
    /// Joins the meeting in `dir` as shard `index` of `count`: its own `ready` file must not
    /// be there yet (one left from an earlier run would start this one at a wrong instant).
    pub fn join(
        dir: &Path,
        index: u32,
        count: u32,
        run_id: Option<&str>,
        heartbeat_timeout: Duration,
    ) -> Result<Rendezvous, String> {
        for sub in ["ready", "live"] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(|e| format!("--rendezvous {}: {e}", d.display()))?;
        }
        let own = ready_path(dir, index);
        if own.exists() {
            let earlier = read_note::<ReadyNote>(&own)
                .ok()
                .flatten()
                .and_then(|n| n.run_id)
                .map_or(String::new(), |id| format!(" (run {id})"));
            let why = format!(
                "--rendezvous {}: {} is there already, from an earlier run{earlier}; give each \
                 run a directory of its own (or empty this one)",
                dir.display(),
                own.display()
            );
            let note = RefusedNote {
                index,
                count,
                run_id: run_id.map(String::from),
                unix_ns: unix_ns_now(),
                why: why.clone(),
            };
            let _ = fs::create_dir_all(dir.join("refused"));
            if let Err(e) = write_whole(&refused_path(dir, index), &note) {
                eprintln!("warning: {e}");
            }
            return Err(why);
        }
        let now = Arc::new(Mutex::new(Beat {
            index,
            count,
            run_id: run_id.map(String::from),
            state: Some(State::Preparing),
            ..Beat::default()
        }));
        let path = live_path(dir, index);
        write_beat(&path, &now).map_err(|e| format!("--rendezvous {}: {e}", dir.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, now) = (Arc::clone(&stop), Arc::clone(&now));
            std::thread::Builder::new()
                .name("heartbeat".into())
                .spawn(move || beat_until(&path, &now, &stop))
                .map_err(|e| format!("cannot start the heartbeat thread: {e}"))?
        };
        Ok(Rendezvous {
            dir: dir.to_path_buf(),
            index,
            count,
            heartbeat_timeout,
            joined: Instant::now(),
            now,
            beating: Some((stop, thread)),
            ready_written: false,
            clock_offset_ns: None,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the next heartbeats say: the state and counts of `beat` (index, count and time are
    /// filled in when written).
    pub fn update(&self, beat: Beat) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now = Beat {
            index: self.index,
            count: self.count,
            run_id: now.run_id.take(),
            ..beat
        };
    }

    /// The reference clock minus this host's, as measured before the barrier: readiness is
    /// stamped on the reference clock.
    pub fn set_clock_offset(&mut self, offset_ns: Option<i64>) {
        self.clock_offset_ns = offset_ns;
    }

    /// Every shard's measured clock offset, from their readiness notes (after the barrier).
    pub fn offsets(&self) -> Vec<Option<i64>> {
        (0..self.count)
            .map(|i| {
                read_note::<ReadyNote>(&ready_path(&self.dir, i))
                    .ok()
                    .flatten()
                    .and_then(|n| n.clock_offset_ns)
            })
            .collect()
    }

    /// The run's id from now on (minted once the start is agreed).
    pub fn name_run(&self, run_id: &str) {
        self.now.lock().unwrap_or_else(|p| p.into_inner()).run_id = Some(run_id.to_string());
    }

    /// Says this shard is ready (`run`: the trace's digest) and waits for every other; returns
    /// the start instant (Unix ns): the latest readiness plus [`START_LEAD`]. Gives up when a
    /// shard failed, when the others are not all ready within `timeout`, or when `stop()`.
    pub fn wait_ready(
        &mut self,
        run: &str,
        timeout: Duration,
        stop: impl Fn() -> bool,
    ) -> Result<u64, String> {
        let run_id = self
            .now
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .run_id
            .clone();
        let note = ReadyNote {
            index: self.index,
            count: self.count,
            run: run.to_string(),
            run_id: run_id.clone(),
            unix_ns: reference_now(self.clock_offset_ns.unwrap_or(0)),
            host: crate::sys::hostname().unwrap_or_default(),
            clock_offset_ns: self.clock_offset_ns,
        };
        let own = ready_path(&self.dir, self.index);
        if !self.ready_written {
            write_whole(&own, &note).map_err(|e| e.to_string())?;
            self.ready_written = true;
        }
        self.update(Beat {
            state: Some(State::Ready),
            ..Beat::default()
        });
        let since = Instant::now();
        loop {
            let mut latest = 0;
            let mut waiting = Vec::new();
            for i in 0..self.count {
                match read_note::<ReadyNote>(&ready_path(&self.dir, i))? {
                    Some(n) if n.count != self.count || n.run != run || n.run_id != run_id => {
                        let id = |id: &Option<String>| {
                            id.as_deref()
                                .map_or(String::new(), |id| format!(", run {id}"))
                        };
                        return Err(format!(
                            "{}: shard {i} of another run ({} shards, trace {}{}; this one: {} \
                             shards, trace {run}{}); give each run a directory of its own",
                            ready_path(&self.dir, i).display(),
                            n.count,
                            n.run,
                            id(&n.run_id),
                            self.count,
                            id(&run_id),
                        ));
                    }
                    Some(n) => {
                        let now = reference_now(self.clock_offset_ns.unwrap_or(0));
                        stale_or_ahead(&self.dir, i, &n, now, timeout)?;
                        latest = latest.max(n.unix_ns);
                    }
                    None => waiting.push(i),
                }
                if let Some(b) = read_note::<Beat>(&live_path(&self.dir, i))? {
                    if i != self.index && b.state == Some(State::Failed) {
                        return Err(format!(
                            "shard {i}/{} failed before the start: {}; the run is off for \
                             every shard",
                            self.count,
                            b.why.as_deref().unwrap_or("no reason given")
                        ));
                    }
                }
            }
            if waiting.is_empty() {
                return Ok(latest + START_LEAD.as_nanos() as u64);
            }
            if since.elapsed() >= timeout {
                let names: Vec<String> = waiting
                    .iter()
                    .map(|i| format!("{i}/{}", self.count))
                    .collect();
                return Err(format!(
                    "shard {} not ready within {} s (--ready-timeout) in {}; the run is off for \
                     every shard",
                    names.join(", "),
                    timeout.as_secs_f64(),
                    self.dir.display()
                ));
            }
            if stop() {
                return Err("stopped by a signal at the barrier".into());
            }
            std::thread::sleep(POLL);
        }
    }

    /// The other shards found lost, each with why (`shard 2/3 ...`), in index order. A shard
    /// with no heartbeat at all counts as lost once this one has waited the timeout since it
    /// joined.
    pub fn lost_peers(&self) -> Vec<(u32, String)> {
        let now = unix_ns_now();
        (0..self.count)
            .filter(|&i| i != self.index)
            .filter_map(|i| {
                let waited = self.joined.elapsed() > self.heartbeat_timeout;
                let why = match read_note::<Beat>(&live_path(&self.dir, i)) {
                    Ok(Some(b)) => lost_because(&b, now, self.heartbeat_timeout),
                    Ok(None) if waited => Some(format!(
                        "never wrote a heartbeat in {} s",
                        self.heartbeat_timeout.as_secs()
                    )),
                    // Written whole and renamed: one that cannot be read is no heartbeat.
                    Err(e) if waited => Some(format!("has a heartbeat that cannot be read: {e}")),
                    _ => None,
                };
                why.map(|why| (i, format!("shard {i}/{} {why}", self.count)))
            })
            .collect()
    }

    /// The closing heartbeat, with the last counts: how this shard ended (`state` Done,
    /// Failed or Stopped). The heartbeat thread ends first.
    pub fn end(&mut self, state: State, why: &str) {
        self.stop_beating();
        {
            let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
            now.state = Some(state);
            now.why = Some(why.to_string());
        }
        if let Err(e) = write_beat(&live_path(&self.dir, self.index), &self.now) {
            eprintln!(
                "warning: --rendezvous {}: the last heartbeat: {e}",
                self.dir.display()
            );
        }
    }

    fn stop_beating(&mut self) {
        if let Some((stop, thread)) = self.beating.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        self.stop_beating();
    }
}

/// Writes the heartbeat `now` says, stamped with this host's clock.
fn write_beat(path: &Path, now: &Mutex<Beat>) -> crate::error::Result<()> {
    let beat = Beat {
        unix_ns: unix_ns_now(),
        ..now.lock().unwrap_or_else(|p| p.into_inner()).clone()
    };
    write_whole(path, &beat)
}

/// The heartbeat thread: a beat every [`BEAT_EVERY`] until `stop`. A write that fails (the
/// shared filesystem away for a moment) is said once and tried again at the next beat.
fn beat_until(path: &Path, now: &Mutex<Beat>, stop: &AtomicBool) {
    let mut said = false;
    let mut next = Instant::now() + BEAT_EVERY;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        next += BEAT_EVERY;
        match write_beat(path, now) {
            Ok(()) => said = false,
            Err(e) if !said => {
                eprintln!("warning: heartbeat: {e}");
                said = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("llmreplay-rv-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn every_shard_computes_the_same_instant_from_the_latest_readiness() {
        let d = dir("instant");
        let mut shards: Vec<Rendezvous> = (0..3)
            .map(|i| Rendezvous::join(&d, i, 3, None, Duration::from_secs(10)).unwrap())
            .collect();
        // Shards 0 and 1 ready; 2 not yet: the barrier does not pass.
        let err = shards[0]
            .wait_ready("t", Duration::ZERO, || false)
            .unwrap_err();
        assert!(err.contains("shard 1/3, 2/3 not ready"), "{err}");
        let starts: Vec<u64> = std::thread::scope(|scope| {
            let waits: Vec<_> = shards
                .iter_mut()
                .map(|s| scope.spawn(move || s.wait_ready("t", Duration::from_secs(30), || false)))
                .collect();
            waits
                .into_iter()
                .map(|w| w.join().unwrap().unwrap())
                .collect()
        });
        assert!(starts.iter().all(|&s| s == starts[0]), "{starts:?}");
        let latest = (0..3)
            .map(|i| {
                read_note::<ReadyNote>(&ready_path(&d, i))
                    .unwrap()
                    .unwrap()
                    .unix_ns
            })
            .max()
            .unwrap();
        assert_eq!(starts[0], latest + START_LEAD.as_nanos() as u64);
        // A second run in the same directory is refused, and so is another run's shard.
        let ready_before = read_note::<ReadyNote>(&ready_path(&d, 0)).unwrap();
        let again = Rendezvous::join(&d, 0, 3, None, Duration::from_secs(10))
            .err()
            .unwrap();
        assert!(again.contains("from an earlier run"), "{again}");
        // It leaves a note saying so, for merge, and nothing of the earlier run is touched.
        let refused = refusals(&d);
        assert_eq!(refused.len(), 1);
        assert_eq!(
            (refused[0].index, refused[0].why.as_str()),
            (0, again.as_str())
        );
        assert_eq!(
            read_note::<ReadyNote>(&ready_path(&d, 0)).unwrap(),
            ready_before
        );
        let d2 = dir("other");
        let mut a = Rendezvous::join(&d2, 0, 2, None, Duration::from_secs(10)).unwrap();
        let mut b = Rendezvous::join(&d2, 1, 2, None, Duration::from_secs(10)).unwrap();
        let _ = a.wait_ready("t1", Duration::ZERO, || false);
        let e = b.wait_ready("t2", Duration::ZERO, || false).unwrap_err();
        assert!(e.contains("another run"), "{e}");
        for d in [d, d2] {
            let _ = fs::remove_dir_all(d);
        }
    }

    #[test]
    fn a_failed_silent_or_stopped_shard_is_lost_and_a_done_one_is_not() {
        let d = dir("lost");
        let mut a = Rendezvous::join(&d, 0, 2, None, Duration::from_secs(3)).unwrap();
        let mut b = Rendezvous::join(&d, 1, 2, None, Duration::from_secs(3)).unwrap();
        assert_eq!(a.lost_peers(), []);
        // A failure before the start ends the barrier for the others.
        b.end(State::Failed, "no tokenizer");
        let e = a
            .wait_ready("t", Duration::from_secs(5), || false)
            .unwrap_err();
        assert!(
            e.contains("shard 1/2 failed before the start: no tokenizer"),
            "{e}"
        );
        assert_eq!(a.lost_peers().len(), 1);
        assert!(a.lost_peers()[0].1.contains("failed: no tokenizer"));
        b.end(State::Done, "completed");
        assert_eq!(a.lost_peers(), []);
        // Silent: a heartbeat written 4 s ago (by its clock) with a 3-s timeout.
        let old = Beat {
            index: 1,
            count: 2,
            unix_ns: unix_ns_now() - 4_000_000_000,
            state: Some(State::Running),
            ..Beat::default()
        };
        write_whole(&live_path(&d, 1), &old).unwrap();
        let why = a.lost_peers().remove(0).1;
        assert!(why.starts_with("shard 1/2 no heartbeat for 4."), "{why}");
        assert_eq!(count_in(&d), Some(Ok(2)));
        let claims = Beat {
            index: 0,
            count: u32::MAX,
            ..old
        };
        write_whole(&live_path(&d, 0), &claims).unwrap();
        let err = count_in(&d).unwrap().unwrap_err();
        assert!(err.contains("claiming 4294967295 shards"), "{err}");
        let _ = fs::remove_dir_all(d);
    }

    #[test]
    fn notes_from_another_time_or_unreadable_ones_do_not_pass_for_this_run() {
        let d = dir("hostile-notes");
        let a = Rendezvous::join(&d, 0, 2, None, Duration::from_secs(2)).unwrap();
        // A heartbeat dated a day ahead never goes stale: it is lost at once.
        let future = Beat {
            index: 1,
            count: 2,
            unix_ns: unix_ns_now() + 86_400_000_000_000,
            state: Some(State::Running),
            ..Beat::default()
        };
        write_whole(&live_path(&d, 1), &future).unwrap();
        let lost = a.lost_peers();
        assert!(lost[0].1.contains("dated 86400 s ahead"), "{lost:?}");
        // A heartbeat that is not one is lost once the timeout has passed since joining.
        fs::write(live_path(&d, 1), b"{not json").unwrap();
        let joined = Instant::now();
        assert_eq!(a.lost_peers(), []);
        while joined.elapsed() <= Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let lost = a.lost_peers();
        assert!(lost[0].1.contains("cannot be read"), "{lost:?}");
        drop(a);
        // A leftover readiness (with a "done" heartbeat beside it) from long ago, or one from
        // the future: the barrier refuses instead of starting alone, or at that time.
        for (name, at, says) in [
            ("old", unix_ns_now() - 3_600_000_000_000, "ready 3600 s ago"),
            (
                "ahead",
                unix_ns_now() + 3_600_000_000_000,
                "3600 s from now",
            ),
        ] {
            let d = dir(&format!("hostile-ready-{name}"));
            let mut a = Rendezvous::join(&d, 0, 2, None, Duration::from_secs(2)).unwrap();
            let note = ReadyNote {
                index: 1,
                count: 2,
                run: "t".into(),
                run_id: None,
                unix_ns: at,
                host: "h".into(),
                clock_offset_ns: None,
            };
            write_whole(&ready_path(&d, 1), &note).unwrap();
            let done = Beat {
                index: 1,
                count: 2,
                unix_ns: unix_ns_now(),
                state: Some(State::Done),
                ..Beat::default()
            };
            write_whole(&live_path(&d, 1), &done).unwrap();
            let e = a
                .wait_ready("t", Duration::from_secs(600), || false)
                .unwrap_err();
            assert!(e.contains(says), "{e}");
            let _ = fs::remove_dir_all(d);
        }
        let _ = fs::remove_dir_all(d);
    }

    #[test]
    fn every_lost_shard_is_named_not_only_the_first() {
        let d = dir("lost-all");
        let a = Rendezvous::join(&d, 0, 3, None, Duration::from_secs(3)).unwrap();
        let mut others: Vec<Rendezvous> = (1..3)
            .map(|i| Rendezvous::join(&d, i, 3, None, Duration::from_secs(3)).unwrap())
            .collect();
        others[1].end(State::Failed, "out of memory");
        assert_eq!(
            a.lost_peers().iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [2]
        );
        others[0].end(State::Stopped, "stopped by a signal");
        let lost = a.lost_peers();
        assert_eq!(lost.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 2]);
        assert!(
            lost[0].1.starts_with("shard 1/3 stopped by a signal"),
            "{lost:?}"
        );
        let _ = fs::remove_dir_all(d);
    }
}
