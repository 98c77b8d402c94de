//! `--null-sink` (hidden, for the producer benchmark): senders that send nothing. Each takes
//! the requests the producers built as fast as they come, gives their buffers back and lets
//! the producers build more, so that the run measures the producer pipeline alone
//! (`scripts/bench-producers.sh`).

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Select;

use super::{Inbox, SenderConfig, SenderEnded, SenderReport};

/// Starts null sender `id`: it opens no connection, and drains `rx` until the producers are
/// done.
pub fn spawn_null_sender(
    id: usize,
    cfg: Arc<SenderConfig>,
    rx: Inbox,
) -> JoinHandle<io::Result<SenderReport>> {
    std::thread::Builder::new()
        .name(format!("null-sender-{id}"))
        .spawn(move || {
            let _ended = SenderEnded(Arc::clone(&cfg.channel_budget));
            cfg.start.ready_then_wait(id, 0);
            let channels = [&rx.own, &rx.shared];
            let mut open = [true, true];
            while open.iter().any(|&o| o) {
                let mut select = Select::new();
                let mut which = Vec::new();
                for (k, channel) in channels.iter().enumerate().filter(|(k, _)| open[*k]) {
                    select.recv(channel);
                    which.push(k);
                }
                let op = select.select();
                let k = which[op.index()];
                match op.recv(channels[k]) {
                    Ok(req) => {
                        cfg.channel_budget.release(req.bytes.capacity());
                        cfg.buffers.give(req.bytes);
                    }
                    Err(_) => open[k] = false,
                }
            }
            Ok(SenderReport::default())
        })
        .expect("spawn sender thread")
}
