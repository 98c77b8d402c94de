//! The one raw `setsockopt(2)` wrapper, for the socket options std and mio do not offer
//! (delayed ACKs, RST on close, receive timestamps).

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
