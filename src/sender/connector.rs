//! Opens a sender's TCP connections on a helper thread.
//!
//! connect(2) on loopback usually returns in tens of microseconds, but now and then takes
//! 7-13 ms (measured in bench-configs/b-drift-1000rps.env): on the sender thread, every
//! deadline behind it would be that late. So the sender only asks; this thread calls the
//! non-blocking connect and hands the socket back, waking the sender's poll. The handshake
//! itself still completes in the sender's event loop (and a TLS session is set up here, its
//! handshake there).
//!
//! It also probes an endpoint that has left requests silent for `--stall-timeout`: a server
//! shutting down gracefully (llama-server on SIGTERM) closes its listener but keeps queued
//! connections open and silent, so a refused connect is what tells "gone" from "busy".

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpStream;
use mio::Waker;

use crate::transport::{Stream, TlsTarget};

/// What the helper thread hands back.
pub enum Opened {
    /// A connection asked for: the endpoint index and the stream, or why connect(2) failed.
    Stream(usize, io::Result<Stream>),
    /// A probe of the endpoint: `Err` says why it takes no new connection.
    Probe(usize, io::Result<()>),
}

/// How long a probe waits for its connect.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

enum Ask {
    Stream(usize),
    Probe(usize),
}

/// Where a connection goes: the address, and TLS for an https endpoint.
#[derive(Clone, Debug)]
pub struct Dial {
    pub addr: SocketAddr,
    pub tls: Option<TlsTarget>,
}

impl Dial {
    /// A blocking connect, closed at once: does the endpoint still accept connections?
    fn probe(&self) -> io::Result<()> {
        std::net::TcpStream::connect_timeout(&self.addr, PROBE_TIMEOUT).map(drop)
    }

    fn open(&self) -> io::Result<Stream> {
        let tcp = TcpStream::connect(self.addr)?;
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some(tls) => tls.wrap(tcp),
        }
    }
}

pub struct Connector {
    requests: Option<Sender<Ask>>,
    opened: Receiver<Opened>,
    /// Set at the run's stop request: asks still queued are dropped.
    stopped: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Connector {
    /// Starts the helper thread for endpoints `dials`; `waker` wakes the sender when a socket
    /// is ready for it.
    pub fn spawn(name: String, waker: Waker, dials: Vec<Dial>) -> io::Result<Connector> {
        let (requests, todo) = crossbeam_channel::unbounded::<Ask>();
        let (done, opened) = crossbeam_channel::unbounded();
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopped);
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for ask in todo {
                if stop.load(Ordering::Relaxed) {
                    continue;
                }
                let answer = match ask {
                    Ask::Stream(target) => Opened::Stream(target, dials[target].open()),
                    Ask::Probe(target) => Opened::Probe(target, dials[target].probe()),
                };
                if done.send(answer).is_err() {
                    break;
                }
                let _ = waker.wake();
            }
        })?;
        Ok(Connector {
            requests: Some(requests),
            opened,
            stopped,
            thread: Some(thread),
        })
    }

    /// Asks for one more connection to endpoint `target`.
    pub fn request(&self, target: usize) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(Ask::Stream(target));
        }
    }

    /// The run stops: no more connections are made.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Asks whether endpoint `target` still takes new connections.
    pub fn probe(&self, target: usize) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(Ask::Probe(target));
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
