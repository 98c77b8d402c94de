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
//! connections open and silent, so a refused connect is what tells "gone" from "busy"; a
//! server whose engine hung keeps its listener, so the probe then asks `GET /health` and
//! wants an answer, any status, within the stall timeout (on a thread of its own, so that
//! connections are not held up meanwhile). A busy server answers it: its requests wait on.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpStream;
use mio::Waker;

use crate::http::blocking::GetError;
use crate::transport::{Stream, TlsTarget};

/// What the helper thread hands back.
pub enum Opened {
    /// A connection asked for: the endpoint index and the stream, or why connect(2) failed.
    Stream(usize, io::Result<Stream>),
    /// A probe of the endpoint: `Err` says why it takes no new connection, or answers none.
    Probe(usize, io::Result<()>),
}

/// How long a probe waits for its connect.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

enum Ask {
    Stream(usize),
    Probe(usize),
}

/// Where a connection goes: the address, and TLS for an https endpoint.
#[derive(Clone, Debug)]
pub struct Dial {
    pub addr: SocketAddr,
    /// The `Host` header of the probe's GET.
    pub host: String,
    pub tls: Option<TlsTarget>,
}

impl Dial {
    /// Does the endpoint still accept connections (a blocking connect, closed at once), and
    /// answer `GET /health` within `answer_within`? Any status is an answer; so is a close
    /// (a server that serves no such path may close on it).
    fn probe(&self, answer_within: Duration) -> io::Result<()> {
        std::net::TcpStream::connect_timeout(&self.addr, PROBE_TIMEOUT)?;
        let asked =
            crate::http::probe::get_health(self.addr, self.tls.as_ref(), &self.host, answer_within);
        match asked {
            // (ErrorKind::Other: it took the connection; the sender says so.)
            Err(GetError::Timeout(_)) => Err(io::Error::other(format!(
                "takes connections but answered no GET /health within {:.1} s (a hung engine \
                 behind a live listener)",
                answer_within.as_secs_f64()
            ))),
            Err(GetError::Refused) => Err(io::ErrorKind::ConnectionRefused.into()),
            _ => Ok(()),
        }
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
    /// A probe waits `answer_within` for the answer to its GET.
    pub fn spawn(
        name: String,
        waker: Arc<Waker>,
        dials: Vec<Dial>,
        answer_within: Duration,
    ) -> io::Result<Connector> {
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
                    Ask::Probe(target) => {
                        let (dial, tell, wake) =
                            (dials[target].clone(), done.clone(), Arc::clone(&waker));
                        let probe = move || {
                            let answer = dial.probe(answer_within);
                            if tell.send(Opened::Probe(target, answer)).is_ok() {
                                let _ = wake.wake();
                            }
                        };
                        if std::thread::Builder::new()
                            .name("probe".into())
                            .spawn(probe)
                            .is_err()
                        {
                            // No thread to spare: no verdict either; the sender asks again.
                            let _ = done.send(Opened::Probe(target, Ok(())));
                        }
                        continue;
                    }
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
