//! `mock --tokenizer`: prompts are counted on threads of their own. Tokenizing a long prompt
//! takes tens of milliseconds (about 0.2M tokens/s per thread), longer than the TTFT a mock
//! is asked to keep, so the event loop never does it: a request's answer starts streaming at
//! once and only the events that carry `usage` wait for the count.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use mio::Waker;

use super::generation::CountJob;
use crate::prompt::PromptCounter;

/// Which generation a count belongs to: (connection slot, slot generation, request id).
pub type CountFor = (usize, u32, u64);

pub struct Counted {
    pub of: CountFor,
    pub prompt_tokens: Result<u64, String>,
    /// The job comes back to be freed by the event loop that allocated it: a counting thread
    /// freeing it would take the loop's malloc arena lock, and a counting thread preempted
    /// while holding it (they run at SCHED_IDLE) stalls the loop for as long as it waits.
    #[allow(dead_code)] // held only to be dropped here
    pub job: CountJob,
}

/// Jobs waiting at most (the channels are arrays, so passing a job allocates nothing); a
/// mock this far behind blocks on the next one.
const QUEUE: usize = 4096;

pub struct CountPool {
    jobs: Option<Sender<(CountFor, CountJob)>>,
    results: Receiver<Counted>,
    threads: Vec<JoinHandle<()>>,
}

impl CountPool {
    /// Starts `threads` counting threads; each result wakes the event loop through `waker`.
    pub fn start(
        counter: Arc<PromptCounter>,
        threads: usize,
        waker: Arc<Waker>,
    ) -> std::io::Result<CountPool> {
        let (jobs, job_rx) = crossbeam_channel::bounded::<(CountFor, CountJob)>(QUEUE);
        let (result_tx, results) = crossbeam_channel::bounded(QUEUE);
        let threads = (0..threads.max(1))
            .map(|i| {
                let (jobs, results, counter, waker) = (
                    job_rx.clone(),
                    result_tx.clone(),
                    counter.clone(),
                    waker.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("mock-count-{i}"))
                    .spawn(move || {
                        lower_priority();
                        for (of, job) in jobs {
                            let prompt_tokens = job.count(&counter);
                            let counted = Counted {
                                of,
                                prompt_tokens,
                                job,
                            };
                            if results.send(counted).is_err() {
                                return;
                            }
                            waker.wake().ok();
                        }
                    })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(CountPool {
            jobs: Some(jobs),
            results,
            threads,
        })
    }

    pub fn submit(&self, of: CountFor, job: CountJob) {
        if let Some(jobs) = &self.jobs {
            jobs.send((of, job)).ok();
        }
    }

    /// The counts finished since the last call.
    pub fn finished(&self) -> impl Iterator<Item = Counted> + '_ {
        self.results.try_iter()
    }
}

/// Counting is background work: the event loop, whose timing is what the mock promises, must
/// win every core it wants. SCHED_IDLE threads run only where nothing else would (Linux; a
/// thread may always lower its own policy).
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets the calling thread's policy (pid 0); failure leaves it as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

impl Drop for CountPool {
    fn drop(&mut self) {
        self.jobs.take(); // the threads end when the queue closes
        for t in self.threads.drain(..) {
            t.join().ok();
        }
    }
}
