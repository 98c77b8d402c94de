//! `mock --tokenizer`: prompts are counted on threads of their own. Tokenizing a long prompt
//! takes tens of milliseconds (about 0.2M tokens/s per thread), longer than the TTFT a mock
//! is asked to keep, so the event loop never does it: a request's answer starts streaming at
//! once and only the events that carry `usage` wait for the count.
//!
//! Two kinds of thread count. The background ones run at `SCHED_IDLE`, so counting ahead
//! never takes a core from the event loop, whose timing is what the mock promises. But an
//! idle thread gets nothing while anything else wants the core (a busy machine), and a
//! stream whose last event waits for its count would then wait without end. So when the
//! event loop finds a request held by its count it *hurries* it: the same job goes to one
//! thread at normal priority, which counts it unless a background thread already has. Only
//! a request that is waiting anyway is counted at the loop's own priority.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use mio::Waker;

use super::count_job::{CountFor, Counted, PendingCount};
use super::token_cache::TokenCache;
use crate::prompt::PromptCounter;

/// Jobs waiting at most (the channels are arrays, so passing a job allocates nothing); a
/// mock this far behind blocks on the next one.
const QUEUE: usize = 4096;

type Job = (CountFor, Arc<PendingCount>);

pub struct CountPool {
    jobs: Option<Sender<Job>>,
    urgent: Option<Sender<Job>>,
    results: Receiver<Counted>,
    threads: Vec<JoinHandle<()>>,
    /// `--cache-blocks` over token ids: counts go through it in arrival order.
    token_cache: Option<Arc<TokenCache>>,
    arrivals: AtomicU64,
}

impl CountPool {
    /// Starts `threads` background counting threads and the urgent one; each result wakes
    /// the event loop through `waker`.
    pub fn start(
        counter: Arc<PromptCounter>,
        threads: usize,
        token_cache: Option<TokenCache>,
        waker: Arc<Waker>,
    ) -> std::io::Result<CountPool> {
        let (jobs, job_rx) = crossbeam_channel::bounded::<Job>(QUEUE);
        let (urgent, urgent_rx) = crossbeam_channel::bounded::<Job>(QUEUE);
        let (result_tx, results) = crossbeam_channel::bounded(2 * QUEUE);
        let token_cache = token_cache.map(Arc::new);
        let spawn = |name: String, jobs: Receiver<Job>, background: bool| {
            let (results, counter, waker) = (result_tx.clone(), counter.clone(), waker.clone());
            let token_cache = token_cache.clone();
            std::thread::Builder::new().name(name).spawn(move || {
                // Counting ahead is background work: the event loop must win every core it
                // wants. An idle thread cannot raise itself again, hence the separate urgent
                // thread for requests that wait on their count.
                if background {
                    crate::sys::affinity::run_only_when_idle();
                }
                for (of, job) in jobs {
                    let done = match &token_cache {
                        None => {
                            let prompt_tokens = (!job.is_done())
                                .then(|| job.ids(&counter).map(|ids| ids.len() as u64));
                            vec![Counted {
                                of,
                                prompt_tokens,
                                cached_tokens: None,
                                job,
                            }]
                        }
                        Some(cache) => {
                            // A hurried request waits for every arrival before it.
                            let seq = job.seq.load(Ordering::Relaxed);
                            let todo = match background {
                                true => vec![(of, job)],
                                false => cache.uncounted_up_to(seq),
                            };
                            todo.into_iter()
                                .filter(|(_, job)| !job.is_done())
                                .flat_map(|(_, job)| {
                                    let seq = job.seq.load(Ordering::Relaxed);
                                    cache.counted(seq, job.ids(&counter))
                                })
                                .collect()
                        }
                    };
                    for counted in done {
                        if results.send(counted).is_err() {
                            return;
                        }
                        waker.wake().ok();
                    }
                }
            })
        };
        let mut handles = (0..threads)
            .map(|i| spawn(format!("mock-count-{i}"), job_rx.clone(), true))
            .collect::<std::io::Result<Vec<_>>>()?;
        handles.push(spawn("mock-count-urgent".into(), urgent_rx, false)?);
        Ok(CountPool {
            jobs: Some(jobs),
            urgent: Some(urgent),
            results,
            threads: handles,
            token_cache,
            arrivals: AtomicU64::new(0),
        })
    }

    /// A prompt to count, in arrival order: its place in that order.
    pub fn submit(&self, of: CountFor, job: Arc<PendingCount>) -> u64 {
        let seq = self.arrivals.fetch_add(1, Ordering::Relaxed);
        job.seq.store(seq, Ordering::Relaxed);
        if let Some(cache) = &self.token_cache {
            cache.arrived(of, Arc::clone(&job));
        }
        if let Some(jobs) = &self.jobs {
            jobs.send((of, job)).ok();
        }
        seq
    }

    /// Arrival `seq` answered `tokens` tokens: the token cache keeps them after its prompt,
    /// as a server caches what it generates.
    pub fn answered(&self, seq: u64, tokens: u64) {
        if let Some(cache) = &self.token_cache {
            cache.answered(seq, tokens);
        }
    }

    /// A request waits for this count: count it at normal priority unless it is done.
    pub fn hurry(&self, of: CountFor, job: Arc<PendingCount>) {
        if job.is_done() && self.token_cache.is_none() {
            return; // its result is on the way
        }
        if let Some(urgent) = &self.urgent {
            urgent.send((of, job)).ok();
        }
    }

    /// The counts finished since the last call.
    pub fn finished(&self) -> impl Iterator<Item = Counted> + '_ {
        self.results.try_iter()
    }
}

impl Drop for CountPool {
    fn drop(&mut self) {
        self.jobs.take(); // the threads end when their queues close
        self.urgent.take();
        // The urgent thread (last) is joined; the background ones run at SCHED_IDLE, and on
        // a machine busy to the last core they may not run again for as long as it stays
        // so: waiting for them would hang the mock's stop. They end when they next run.
        if let Some(urgent) = self.threads.pop() {
            urgent.join().ok();
        }
        self.threads.clear();
    }
}
