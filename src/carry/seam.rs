//! Exact carried prompts: how many tokens a parent's answer adds to the turn that carries it,
//! as the server will count them.
//!
//! The server's `completion_tokens` is not that number: the answer is pasted as text and
//! re-tokenized, and a model's tokens are not always the tokenizer's own split of their text
//! (up to 15 tokens off on llama.cpp's server for a few hundred). Where the answer meets the
//! text around it, pieces merge too: a completion answer beginning with a letter joins the
//! parent prompt's last word. So when a turn's record is in, its answer is counted once, in
//! the place it will sit, with the real tokenizer and template:
//! - a completion: `L + answer + P`, less `L` and `P`, where `L` is the parent prompt's last
//!   synthetic piece (the one an answer can merge with) and `P` a synthetic piece after it
//!   (a space and letters: it starts a new piece whatever the answer ends with);
//! - a chat turn: `[user U, assistant answer, user N]` rendered with the chat template, less
//!   `[user U]` and `N`: the answer with the turn boundaries around it (templates that trim or
//!   rewrite an answer are counted as they render it).
//!
//! The carried turn then keeps exactly as many of its own tokens as make its prompt its
//! `input_length` ([`super::splice`]).

use std::sync::Arc;

use serde_json::json;

use super::{History, Shape};
use crate::prompt::{PromptCounter, SafeVocab, Wrapping};

/// How one endpoint's answers are counted in place.
pub struct Seam {
    counter: Arc<PromptCounter>,
    wrapping: Wrapping,
    /// A synthetic piece to follow an answer (`P`), or the new user message after it (`N`).
    after: String,
    /// Tokens of `after` on its own.
    after_tokens: u64,
    /// Chat: the user message before the answer (`U`), and the tokens of `[user U]` rendered.
    before: String,
    before_tokens: u64,
}

impl Seam {
    /// The seam of prompts wrapped as `wrapping`, probed with pieces of `vocab`; None for a
    /// prompt of token ids (nothing is carried into one). Loads the tokenizer now, so no
    /// sender reads it mid-run.
    pub fn new(
        counter: Arc<PromptCounter>,
        wrapping: Wrapping,
        vocab: &SafeVocab,
    ) -> Result<Option<Seam>, String> {
        // A chat counted without a template cannot be exact anyway (the run warned).
        let untemplated = wrapping == Wrapping::Chat && counter.template_path().is_none();
        if wrapping == Wrapping::TokenIds || untemplated || vocab.len() < 8 {
            return Ok(None);
        }
        let pieces = |from: usize, n: usize| -> String {
            (0..n)
                .map(|i| vocab.text((from + i * 7) % vocab.len()))
                .collect()
        };
        let (before, after) = match wrapping {
            Wrapping::Chat => (pieces(1, 5), pieces(3, 3)),
            _ => (String::new(), pieces(3, 1)),
        };
        let after_tokens = counter.content_ids(&after)?.len() as u64;
        let before_tokens = match wrapping {
            Wrapping::Chat => counter
                .chat_ids(&json!([{"role": "user", "content": before}]), None)?
                .len() as u64,
            _ => 0,
        };
        Ok(Some(Seam {
            counter,
            wrapping,
            after,
            after_tokens,
            before,
            before_tokens,
        }))
    }

    /// The tokens `parent`'s answer adds to a turn that carries it (its turn boundaries
    /// included for a chat).
    pub fn measure(&self, parent: &History) -> Result<u64, String> {
        self.measure_job(&SeamJob::of(0, 0, parent))
    }

    fn measure_job(&self, job: &SeamJob) -> Result<u64, String> {
        let answer: String = serde_json::from_slice(&quoted(&job.answer))
            .map_err(|e| format!("the answer is not a JSON string's inside: {e}"))?;
        let added = match (job.shape, self.wrapping) {
            (Shape::Chat, Wrapping::Chat) => {
                let three = self.counter.chat_ids(
                    &json!([
                        {"role": "user", "content": self.before},
                        {"role": "assistant", "content": answer},
                        {"role": "user", "content": self.after},
                    ]),
                    None,
                )?;
                (three.len() as u64).checked_sub(self.before_tokens + self.after_tokens)
            }
            (Shape::Completion, Wrapping::Completion) => {
                let last = job.last_piece.as_str();
                let alone = self.counter.completion_ids(last)?.len() as u64;
                let text = format!("{last}{answer}{}", self.after);
                let all = self.counter.completion_ids(&text)?.len() as u64;
                all.checked_sub(alone + self.after_tokens)
            }
            _ => return Err("the prompt's shape is not this endpoint's wrapping".into()),
        };
        added.ok_or_else(|| "the template dropped part of the conversation".into())
    }
}

/// What counting one answer needs: the turn it ended, its endpoint, the prompt's shape and
/// last piece, and the answer (JSON-escaped, as the server sent it).
pub struct SeamJob {
    pub index: u64,
    pub endpoint: u32,
    shape: Shape,
    last_piece: String,
    answer: Vec<u8>,
}

impl SeamJob {
    pub fn of(index: u64, endpoint: u32, parent: &History) -> SeamJob {
        SeamJob {
            index,
            endpoint,
            shape: parent.shape,
            last_piece: last_piece(&parent.prompt).to_string(),
            answer: parent.answer.clone(),
        }
    }
}

/// Counts answers in place on a thread of its own: tokenizing a long answer takes
/// milliseconds (about 3 ms for 1,000 words), which on a sender thread would hold up every
/// send and every token's timestamp behind it. The sender hands each finished turn's answer
/// over and goes on; its count comes back through [`SeamCounter::counted`], and the sender's
/// poll is woken. A turn that carries the answer waits for its count, not the sender.
pub struct SeamCounter {
    jobs: Option<crossbeam_channel::Sender<SeamJob>>,
    done: crossbeam_channel::Receiver<(u64, Option<u64>)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SeamCounter {
    /// The thread `name`, counting with `seams`; each count wakes `waker`.
    pub fn spawn(name: String, seams: Arc<Seams>, waker: Arc<mio::Waker>) -> std::io::Result<Self> {
        let (jobs, job_rx) = crossbeam_channel::unbounded::<SeamJob>();
        let (done_tx, done) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for job in job_rx {
                let counted = seams
                    .of(job.endpoint)
                    .and_then(|s| s.measure_job(&job).ok());
                if done_tx.send((job.index, counted)).is_err() {
                    return;
                }
                waker.wake().ok();
            }
        })?;
        Ok(SeamCounter {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Counts `job`'s answer; false when nothing can (the thread is gone).
    pub fn count(&self, job: SeamJob) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }

    /// The counts done since the last call: (turn, its answer's tokens in place, or None
    /// where they could not be counted).
    pub fn counted(&self) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
        self.done.try_iter()
    }
}

impl Drop for SeamCounter {
    fn drop(&mut self) {
        self.jobs.take(); // the thread ends when its queue closes
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

/// The seams of each endpoint (None where nothing is carried).
#[derive(Default)]
pub struct Seams(pub Vec<Option<Arc<Seam>>>);

impl Seams {
    pub fn of(&self, endpoint: u32) -> Option<&Seam> {
        self.0.get(endpoint as usize)?.as_deref()
    }

    /// Whether any endpoint's answers are counted.
    pub fn any(&self) -> bool {
        self.0.iter().any(Option::is_some)
    }
}

impl std::fmt::Debug for Seams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Seams({} endpoints)", self.0.len())
    }
}

/// `"` + inside + `"`.
fn quoted(inside: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(inside.len() + 2);
    v.push(b'"');
    v.extend_from_slice(inside);
    v.push(b'"');
    v
}

/// The last synthetic piece of a completion prompt (from its last space on): synthetic text
/// has no escapes, so its bytes are its text.
fn last_piece(prompt: &[u8]) -> &str {
    let from = memchr::memrchr(b' ', prompt).unwrap_or(0);
    std::str::from_utf8(&prompt[from..]).unwrap_or_default()
}
