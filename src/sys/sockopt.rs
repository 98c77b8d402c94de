//! The raw socket calls std and mio do not offer: `setsockopt(2)` (delayed ACKs, RST on
//! close, receive timestamps) and a listener's backlog.

use std::io;
use std::os::fd::AsRawFd;

/// Sets a socket option to `value` (an int or a struct, as the option expects).
pub fn set<T>(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, correctly sized object of the type the caller names for this
    // option; the kernel only reads `size_of::<T>()` bytes from it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the accept backlog of a socket that is already listening (listen(2) again only
/// updates it; the kernel caps it at net.core.somaxconn). Best effort: on failure the
/// backlog stays as it was.
pub fn widen_backlog(listener: &impl AsRawFd, backlog: libc::c_int) {
    // SAFETY: listen(2) on a descriptor the caller owns; it touches no memory of ours.
    unsafe { libc::listen(listener.as_raw_fd(), backlog) };
}
