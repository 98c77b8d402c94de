//! A prompt to be counted on the mock's tokenizer threads ([`super::counting`]), as the event
//! loop, the counting threads and the token cache all hold it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;

use crate::prompt::PromptCounter;

/// A prompt to be counted by the tokenizer, off the mock's event loop.
#[derive(Debug)]
pub enum CountJob {
    Chat {
        messages: Value,
        tools: Option<Value>,
        /// The request's `enable_thinking`, when it sets one.
        thinking: Option<bool>,
    },
    Completion(String),
}

impl CountJob {
    /// The prompt's token ids on the server.
    pub fn ids(&self, counter: &PromptCounter) -> Result<Vec<u32>, String> {
        match self {
            CountJob::Chat {
                messages,
                tools,
                thinking,
            } => counter.chat_ids_thinking(messages, tools.as_ref(), *thinking),
            CountJob::Completion(text) => counter.completion_ids(text),
        }
    }
}

/// Which generation a count belongs to: (connection slot, slot generation, request id).
pub type CountFor = (usize, u32, u64);

/// A job shared by the background queue and, once hurried, the urgent one.
#[derive(Debug)]
pub struct PendingCount {
    job: CountJob,
    /// A thread has finished counting it: the other one skips it.
    done: AtomicBool,
    /// Its place in arrival order (set when it is submitted).
    pub seq: AtomicU64,
}

impl PendingCount {
    pub fn new(job: CountJob) -> Arc<PendingCount> {
        Arc::new(PendingCount {
            job,
            done: AtomicBool::new(false),
            seq: AtomicU64::new(0),
        })
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The prompt's token ids; it is done.
    pub(super) fn ids(&self, counter: &PromptCounter) -> Result<Vec<u32>, String> {
        let ids = self.job.ids(counter);
        self.done.store(true, Ordering::Release);
        ids
    }
}

pub struct Counted {
    pub of: CountFor,
    /// `None`: the other thread had counted it first.
    pub prompt_tokens: Option<Result<u64, String>>,
    /// With a token cache: the prompt's hits in it.
    pub cached_tokens: Option<u64>,
    /// The job comes back to be freed by the event loop that allocated it: a counting thread
    /// freeing it would take the loop's malloc arena lock, and a counting thread preempted
    /// while holding it (the background ones run at SCHED_IDLE) stalls the loop for as long
    /// as it waits.
    #[allow(dead_code)] // held only to be dropped here
    pub job: Arc<PendingCount>,
}
