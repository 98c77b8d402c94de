//! Operating-system limits checked before a run (open file descriptors, disk space), the
//! connections opened ahead within them, and the allocator's settings for large bodies.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Descriptors a run needs besides its connections (trace, outputs, poll, timers, stdio).
pub const FD_RESERVE: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as servers and load generators do, and
/// returns the soft limit in force afterwards.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return u64::MAX;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
        lim.rlim_cur
    }
}

/// Bytes available to this user on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills a local struct from a NUL-terminated path.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// Whether an I/O error is the per-process descriptor limit.
pub fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE)
}

/// Connections for the requests due in the run's first second are opened before the start,
/// up to this many per sender and endpoint: a bound on what is opened in one go.
pub const WARM_MAX_PER_POOL: usize = 16_384;

/// Connections each sender opens per endpoint before the start, beyond the spare ones: its
/// share of the `opening` requests (those due in the run's first second). At most half the
/// descriptors left after the spare pools, so that the run keeps room to grow, and at most
/// [`WARM_MAX_PER_POOL`].
pub fn warm_connections(opening: usize, pools: usize, spare: usize, fd_limit: u64) -> usize {
    let free = fd_limit.saturating_sub(FD_RESERVE + (spare * pools) as u64);
    let room = usize::try_from(free / 2).unwrap_or(usize::MAX) / pools.max(1);
    opening
        .div_ceil(pools.max(1))
        .min(room)
        .min(WARM_MAX_PER_POOL)
}

/// Request bodies of large prompts (100 KB and more) would each be an mmap/munmap pair in
/// glibc's default malloc, and every such call takes the process's memory-map lock, which a
/// producer faulting in fresh bodies holds: measured as 10-15 ms sender stalls at the start of a
/// run. Raising the mmap threshold keeps bodies in the heap arenas.
pub fn keep_bodies_off_mmap() {
    // SAFETY: mallopt only tunes glibc's allocator; it is called before the worker threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        // Nor give freed memory back after each large free (that takes the same lock).
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_connections_share_the_opening_within_the_descriptors() {
        // 1000 opening requests over 2 senders x 2 endpoints, plenty of descriptors.
        assert_eq!(warm_connections(1000, 4, 8, 1 << 20), 250);
        // Half of what is left after the reserve and the spare pools: (1024-64-32)/2/4 = 116.
        assert_eq!(warm_connections(1000, 4, 8, 1024), 116);
        assert_eq!(warm_connections(1 << 20, 1, 8, u64::MAX), WARM_MAX_PER_POOL);
        assert_eq!(warm_connections(0, 1, 8, 1 << 20), 0);
    }

    #[test]
    fn limits_are_readable() {
        assert!(raise_fd_limit() >= FD_RESERVE);
        assert!(free_bytes(&std::env::temp_dir()).is_some());
        assert!(is_fd_exhaustion(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
    }
}
