//! Stopping a run early on SIGINT/SIGTERM, and on SIGHUP (the terminal or the ssh session
//! closed): a hangup first points standard output and error, where they are not files, at
//! /dev/null, since nobody reads them any more and a write to them would fail, then stops the
//! run as SIGTERM does.
//!
//! The first signal asks the run to stop: producers stop reading the trace, senders send
//! nothing new, requests in flight get `--drain-timeout` to finish and are then recorded as
//! `cancelled`, and every output is written. A second signal exits at once: `requests.jsonl`
//! is written in whole lines per `write(2)`, so it stays intact up to its last line. A second
//! signal within a second of the first is taken as the same stop: `timeout -s INT`, or Ctrl-C
//! under `timeout --foreground`, delivers two signals microseconds apart, and the user meant
//! one (the hard exit lost the summary in 2 runs of 4).
//!
//! Before the run starts (reading the trace, which may be a FIFO with no writer yet or an
//! endless pipe, loading a tokenizer, checking endpoints) there is nothing to drain or keep:
//! a signal exits at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::sys::clock::monotonic_ns;

/// The status a run stopped by a signal exits with: 128 + SIGINT, as shells report Ctrl-C.
pub const STOPPED_EXIT_CODE: i32 = 128 + libc::SIGINT;

static SIGNALS: AtomicUsize = AtomicUsize::new(0);
/// CLOCK_MONOTONIC time of the first signal, in ns.
static FIRST_SIGNAL_NS: AtomicU64 = AtomicU64::new(0);
/// A later signal exits at once only when it comes at least this long after the first.
const SAME_STOP_NS: u64 = 1_000_000_000;
/// Requests are being sent: a signal stops the run instead of the process.
static RUNNING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    if !RUNNING.load(Ordering::SeqCst) {
        const MSG: &[u8] = b"\nstopped by a signal before the run started: nothing was sent\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(STOPPED_EXIT_CODE);
        }
    }
    let now = monotonic_ns();
    if SIGNALS.fetch_add(1, Ordering::SeqCst) == 0 {
        FIRST_SIGNAL_NS.store(now, Ordering::SeqCst);
        return;
    }
    if now.saturating_sub(FIRST_SIGNAL_NS.load(Ordering::SeqCst)) >= SAME_STOP_NS {
        const MSG: &[u8] =
            b"\nsecond signal: exiting now (requests.jsonl holds what was recorded)\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(STOPPED_EXIT_CODE);
        }
    }
}

extern "C" fn on_hangup(sig: libc::c_int) {
    // SAFETY: open(2), fstat(2), dup2(2) and close(2) are async-signal-safe.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if null >= 0 {
            for fd in [1, 2] {
                let mut st: libc::stat = std::mem::zeroed();
                let file =
                    libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG;
                if !file {
                    libc::dup2(null, fd);
                }
            }
            libc::close(null);
        }
    }
    on_signal(sig);
}

/// Routes SIGINT, SIGTERM and SIGHUP to [`signals_received`] (the binary's replay calls this
/// once). A hangup ignored when the process started (`nohup`) stays ignored.
pub fn install_signal_handlers() {
    let handlers: [(libc::c_int, extern "C" fn(libc::c_int)); 3] = [
        (libc::SIGINT, on_signal),
        (libc::SIGTERM, on_signal),
        (libc::SIGHUP, on_hangup),
    ];
    for (sig, handler) in handlers {
        // SAFETY: installs a handler that only touches an atomic and async-signal-safe calls.
        unsafe {
            let mut before: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut before);
            if sig == libc::SIGHUP && before.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// For a command that sends nothing (`merge`): SIGINT, SIGTERM and SIGHUP end the process at
/// once with [`STOPPED_EXIT_CODE`] (as PID 1 in a container, SIGTERM would otherwise be
/// ignored, and a Job's delete wait out its grace period). A merge cut short leaves no
/// summary.json, which it writes last but one.
pub fn exit_on_signal() {
    extern "C" fn on_stop(_: libc::c_int) {
        const MSG: &[u8] = b"\nstopped by a signal\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(STOPPED_EXIT_CODE);
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only makes async-signal-safe calls.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The run is about to send: from now on a signal stops it and keeps what it measured.
pub fn run_started() {
    RUNNING.store(true, Ordering::SeqCst);
}

/// How many stop signals have arrived since the handlers were installed.
pub fn signals_received() -> usize {
    SIGNALS.load(Ordering::SeqCst)
}

/// A stop request made by the collector and read by the producers and senders: the run-clock
/// time it was made.
#[derive(Debug, Default)]
pub struct StopRequest {
    /// 0 while running, else the request time + 1 (so that time 0 is representable).
    at_ns: AtomicU64,
}

impl StopRequest {
    /// Asks the run to stop; the first request's time is kept.
    pub fn request(&self, now_ns: u64) {
        let _ = self
            .at_ns
            .compare_exchange(0, now_ns + 1, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// When the stop was requested, if it was.
    pub fn requested_at(&self) -> Option<u64> {
        match self.at_ns.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_time_is_kept() {
        let s = StopRequest::default();
        assert_eq!(s.requested_at(), None);
        s.request(0);
        s.request(50);
        assert_eq!(s.requested_at(), Some(0));
    }
}
