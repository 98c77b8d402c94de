//! Time: quanta TSC ticks turned into nanoseconds since a fixed origin, shared by all threads,
//! and a `timerfd` deadline timer that wakes a mio loop with microsecond resolution.
//!
//! mio rounds poll timeouts up to whole milliseconds (DESIGN-NOTES §4), so it cannot be the
//! dispatch timer. A timerfd armed slightly before the deadline wakes the loop inside `poll`
//! (sockets keep being served while waiting); the last stretch is spun.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

/// Milliseconds (as given on a command line) in whole nanoseconds; negative is 0.
pub fn ms_to_ns(ms: f64) -> u64 {
    (ms.max(0.0) * 1e6).round() as u64
}

/// CLOCK_MONOTONIC in ns: the clock two processes on one host share (the mock's timing log
/// and the client's run start in run.json are on it).
/// Async-signal-safe (the signal handler reads it).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime (async-signal-safe) writes one timespec it is given a valid
    // pointer to.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `inner()` minus the midpoint of two `outer()` reads around it, in ns: how to turn one clock
/// into another. The tightest of a few tries is kept: a preemption between the reads (a busy
/// machine) would otherwise shift every mapped time by a scheduling slice.
pub fn paired_offset(outer: impl Fn() -> u64, inner: impl Fn() -> u64) -> i128 {
    let (mut best_width, mut best) = (u64::MAX, 0i128);
    for _ in 0..16 {
        let before = outer();
        let read = inner();
        let after = outer();
        let width = after.saturating_sub(before);
        if width < best_width {
            (best_width, best) = (width, i128::from(read) - i128::from(before + width / 2));
        }
        if width < 2_000 {
            break;
        }
    }
    best
}

/// Nanoseconds since this clock's origin (the same origin in every clone).
#[derive(Clone)]
pub struct RunClock {
    clock: quanta::Clock,
    origin: u64,
}

impl Default for RunClock {
    fn default() -> Self {
        Self::new()
    }
}

impl RunClock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        RunClock { clock, origin }
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    /// Busy-waits until `deadline_ns`; returns the time it stopped at.
    #[inline]
    pub fn spin_until(&self, deadline_ns: u64) -> u64 {
        loop {
            let now = self.now_ns();
            if now >= deadline_ns {
                return now;
            }
            std::hint::spin_loop();
        }
    }
}

/// A one-shot monotonic timer file descriptor, registered in a mio `Poll`.
pub struct DeadlineTimer {
    fd: OwnedFd,
}

impl DeadlineTimer {
    pub fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        // SAFETY: plain syscall; the returned descriptor is owned below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(DeadlineTimer { fd })
    }

    /// Fires once after `nanos` (at least 1 ns), replacing any earlier setting.
    pub fn arm_in(&self, nanos: u64) -> io::Result<()> {
        let nanos = nanos.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (nanos / 1_000_000_000) as libc::time_t,
                tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: valid descriptor and pointers to initialised structs.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Consumes the expiry so that the descriptor stops being readable.
    pub fn drain(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a u64; errors (EAGAIN) are harmless.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Lowers this thread's timer slack to 1 ns so that sleeps and poll timeouts are not stretched
/// by the default 50 us slack.
pub fn minimise_timer_slack() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Raises this thread's scheduling priority so that on a busy machine the kernel preempts it
/// less for other threads (producers, collector, a local server): nice -10, or with
/// `realtime` the SCHED_FIFO policy (never preempted by ordinary threads; the kernel's RT
/// throttling still leaves others 5 %). Needs CAP_SYS_NICE; returns false, changing nothing,
/// without it.
pub fn raise_thread_priority(realtime: bool) -> bool {
    // SAFETY: gettid, setpriority and sched_setscheduler on the calling thread, with a local
    // sched_param.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid);
        if realtime {
            let param = libc::sched_param { sched_priority: 1 };
            libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_FIFO, &param) == 0
        } else {
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -10) == 0
        }
    }
}

/// CPU time this thread has used, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The run clock's `at_ns` on CLOCK_MONOTONIC.
pub fn on_monotonic(clock: &RunClock, at_ns: u64) -> u64 {
    let offset = paired_offset(monotonic_ns, || clock.now_ns());
    (i128::from(at_ns) - offset) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_wakes_poll_and_spin_reaches_deadline() {
        let mut poll = mio::Poll::new().unwrap();
        let timer = DeadlineTimer::new(poll.registry(), Token(7)).unwrap();
        let clock = RunClock::new();
        let start = clock.now_ns();
        timer.arm_in(2_000_000).unwrap();
        let mut events = mio::Events::with_capacity(4);
        let mut woke = false;
        // Bounded: a timer that never fires fails the test instead of hanging it.
        for _ in 0..100 {
            poll.poll(&mut events, Some(std::time::Duration::from_millis(50)))
                .unwrap();
            if events.iter().any(|e| e.token() == Token(7)) {
                woke = true;
                break;
            }
        }
        assert!(woke);
        timer.drain();
        assert!(clock.now_ns() - start >= 2_000_000);
        let target = clock.now_ns() + 100_000;
        assert!(clock.spin_until(target) >= target);
    }
}
