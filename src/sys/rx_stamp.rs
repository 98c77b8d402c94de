//! When a request reached this host: the kernel's receive timestamp of its first byte
//! (SO_TIMESTAMPNS), so the arrival log says when the request came, not when the mock's busy
//! loop got round to reading it.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{SystemTime, UNIX_EPOCH};

use mio::net::TcpStream;

use crate::sys::sockopt;

/// Asks the kernel to timestamp what this socket receives. Accepted sockets inherit it from
/// a listener. The kernel turns timestamping on a moment later (deferred work), so the mock
/// sets it on its listener at start, long before the first request.
pub fn enable(socket: &impl AsRawFd) -> io::Result<()> {
    sockopt::set(
        socket,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        &1 as &libc::c_int,
    )
}

/// The wall clock in ns, the clock of the kernel's receive timestamps.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Reads one byte, the first of a request, with the wall-clock time (ns) the kernel received
/// it, when the socket has timestamps on. One byte, because TCP reports the timestamp of the
/// last segment a read consumed, and later segments of a large request came later.
pub fn read_first_byte(stream: &TcpStream, byte: &mut [u8; 1]) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one cmsghdr and a timespec, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg on an open socket with a valid msghdr (one 1-byte iovec, 64-byte control).
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled, within
    // msg_controllen; the data of an SCM_TIMESTAMPNS message is a timespec.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn first_byte_carries_the_time_the_kernel_received_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let server = TcpStream::from_std(server);
        enable(&server).unwrap();
        // The kernel switches timestamping on in a deferred work item: wait for the first
        // stamped byte before the real check.
        let mut byte = [0u8; 1];
        for _ in 0..500 {
            client.write_all(b"x").unwrap();
            if read_first_byte(&server, &mut byte).unwrap().1.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        client.write_all(b"GET").unwrap();
        let sent = wall_ns();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (n, stamp) = read_first_byte(&server, &mut byte).unwrap();
        assert_eq!((n, byte[0]), (1, b'G'));
        let stamp = stamp.expect("a receive timestamp");
        // Received before the read, around the write: far nearer the write than the read.
        assert!(stamp <= wall_ns());
        assert!(
            stamp < sent + 150_000_000,
            "stamped {} ms after the write",
            (stamp - sent) / 1_000_000
        );
    }
}
