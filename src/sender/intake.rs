//! Where a sender takes its requests from ([`Inbox`]: the shared channel and its own), and
//! how late they came ([`Intake`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, TryRecvError};

use crate::pipeline::PreparedRequest;

use super::{Progress, LATE_ARRIVAL_NS};

/// Where a sender takes its requests from: the channel all senders share, and its own, with
/// the turns of the conversations it runs.
pub struct Inbox {
    pub shared: Receiver<PreparedRequest>,
    pub own: Receiver<PreparedRequest>,
}

impl Inbox {
    /// Requests waiting in both channels.
    fn backlog(&self) -> usize {
        self.own.len() + self.shared.len()
    }

    /// Its own turns first; Disconnected once both channels are.
    fn try_recv(&self) -> Result<PreparedRequest, TryRecvError> {
        match self.own.try_recv() {
            Ok(req) => Ok(req),
            Err(own) => match (self.shared.try_recv(), own) {
                (Ok(req), _) => Ok(req),
                (Err(TryRecvError::Disconnected), TryRecvError::Disconnected) => {
                    Err(TryRecvError::Disconnected)
                }
                _ => Err(TryRecvError::Empty),
            },
        }
    }
}

/// A sender's inbox, whether the producers are done, and the requests that came late.
pub(super) struct Intake {
    rx: Inbox,
    progress: Arc<Progress>,
    /// The channels are closed and empty: no more requests will come.
    pub done: bool,
    /// Requests taken after their send time, the producers behind (see
    /// [`super::SenderReport::arrived_late`]).
    pub arrived_late: u64,
    /// Requests taken after their send time from a channel that held more (see
    /// [`super::SenderReport::queued_late`]).
    pub queued_late: u64,
}

impl Intake {
    pub fn new(rx: Inbox, progress: Arc<Progress>) -> Intake {
        Intake {
            rx,
            progress,
            done: false,
            arrived_late: 0,
            queued_late: 0,
        }
    }

    /// The next request waiting, if any (once none will come, `done` is set).
    pub fn next(&mut self) -> Option<PreparedRequest> {
        match self.rx.try_recv() {
            Ok(req) => Some(req),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.done = true;
                None
            }
        }
    }

    /// Counts a request taken at `now`, due at `due` (both on the clock), if it came more
    /// than [`LATE_ARRIVAL_NS`] late. With requests still behind it in the channel it was
    /// built in time and waited there, the senders' heaps full of earlier ones (a burst
    /// larger than their lookahead): `queued_late`. With none, the producers had only just
    /// built it: `arrived_late`, the producers behind.
    pub fn note_lateness(&mut self, due: u64, now: u64) {
        if now <= due + LATE_ARRIVAL_NS {
            return;
        }
        if self.rx.backlog() > 0 {
            self.queued_late += 1;
            return;
        }
        self.arrived_late += 1;
        self.progress.arrived_late.fetch_add(1, Ordering::Relaxed);
    }
}
