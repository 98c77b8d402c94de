//! Operating-system limits checked before a run: open file descriptors and disk space.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_readable() {
        assert!(raise_fd_limit() >= FD_RESERVE);
        assert!(free_bytes(&std::env::temp_dir()).is_some());
        assert!(is_fd_exhaustion(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
    }
}
