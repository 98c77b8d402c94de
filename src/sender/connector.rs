//! Opens a sender's TCP connections on a helper thread.
//!
//! connect(2) on loopback usually returns in tens of microseconds, but now and then takes
//! 7-13 ms (measured in bench-configs/b-drift-1000rps.env): on the sender thread, every
//! deadline behind it would be that late. So the sender only asks; this thread calls the
//! non-blocking connect and hands the socket back, waking the sender's poll. The handshake
//! itself still completes in the sender's event loop (and a TLS session is set up here, its
//! handshake there).

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpStream;
use mio::Waker;

use crate::transport::{Stream, TlsTarget};

/// A connection asked for: the endpoint index and the stream, or why connect(2) failed.
pub type Opened = (usize, io::Result<Stream>);

/// Where a connection goes: the address, and TLS for an https endpoint.
#[derive(Clone, Debug)]
pub struct Dial {
    pub addr: SocketAddr,
    pub tls: Option<TlsTarget>,
}

impl Dial {
    fn open(&self) -> io::Result<Stream> {
        let tcp = TcpStream::connect(self.addr)?;
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some(tls) => tls.wrap(tcp),
        }
    }
}

pub struct Connector {
    requests: Option<Sender<usize>>,
    opened: Receiver<Opened>,
    thread: Option<JoinHandle<()>>,
}

impl Connector {
    /// Starts the helper thread for endpoints `dials`; `waker` wakes the sender when a socket
    /// is ready for it.
    pub fn spawn(name: String, waker: Waker, dials: Vec<Dial>) -> io::Result<Connector> {
        let (requests, todo) = crossbeam_channel::unbounded::<usize>();
        let (done, opened) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for target in todo {
                if done.send((target, dials[target].open())).is_err() {
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
    pub fn request(&self, target: usize) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(target);
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
