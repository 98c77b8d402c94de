//! Opens a sender's TCP connections on a helper thread.
//!
//! connect(2) on loopback usually returns in tens of microseconds, but now and then takes
//! 7-13 ms (measured in bench-configs/b-drift-1000rps.env): on the sender thread, every
//! deadline behind it would be that late. So the sender only asks; this thread calls the
//! non-blocking connect and hands the socket back, waking the sender's poll. The handshake
//! itself still completes in the sender's event loop.

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpStream;
use mio::Waker;

/// A connection asked for: the endpoint index and the socket, or why connect(2) failed.
pub type Opened = (usize, io::Result<TcpStream>);

pub struct Connector {
    requests: Option<Sender<(usize, SocketAddr)>>,
    opened: Receiver<Opened>,
    thread: Option<JoinHandle<()>>,
}

impl Connector {
    /// Starts the helper thread; `waker` wakes the sender when a socket is ready for it.
    pub fn spawn(name: String, waker: Waker) -> io::Result<Connector> {
        let (requests, todo) = crossbeam_channel::unbounded::<(usize, SocketAddr)>();
        let (done, opened) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for (target, addr) in todo {
                if done.send((target, TcpStream::connect(addr))).is_err() {
                    break;
                }
                let _ = waker.wake();
            }
        })?;
        Ok(Connector {
            requests: Some(requests),
            opened,
            thread: Some(thread),
        })
    }

    /// Asks for one more connection to endpoint `target`.
    pub fn request(&self, target: usize, addr: SocketAddr) {
        if let Some(tx) = &self.requests {
            let _ = tx.send((target, addr));
        }
    }

    /// A socket (or a failure) that is ready, if any.
    pub fn try_opened(&self) -> Option<Opened> {
        self.opened.try_recv().ok()
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.requests = None; // ends the thread's loop once the queued connects are done
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
