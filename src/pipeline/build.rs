//! Building one request: its body in its endpoint's dialect, with the prompt synthesised
//! into it, and its line in prompts.jsonl. Producers call [`RequestBuilder::build`] once per
//! record; `prompts` calls it without sending.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::identity::Identity;
use super::{BufferPool, PreparedRequest};
use crate::api::{write_body, Api, BodyError, BodyOptions, Synthesis};
use crate::carry::CarrySlot;
use crate::error::{Error, Result};
use crate::expected_cache::PromptShape;
use crate::prompt::dataset::DatasetPrompts;
use crate::prompt::{BlockCache, PromptSynth};
use crate::trace::{Input, TraceRecord};

/// Why a record's request could not be built: its body, or the prompts.jsonl line beside it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error("cannot write {path}: {source}")]
    PromptLog {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How the bodies for one endpoint are written.
pub struct BodyStyle {
    pub api: Api,
    pub body: BodyOptions,
    /// Which of [`RequestBuilder::synths`] builds its prompts (they differ by what the
    /// server wraps around the content: a chat template, special tokens, nothing).
    pub synth: Option<usize>,
}

/// Turns records into request bytes.
pub struct RequestBuilder {
    /// Per endpoint, by [`PreparedRequest::endpoint`].
    pub styles: Vec<BodyStyle>,
    pub synths: Vec<Arc<PromptSynth>>,
    /// Block cache budget of each producer, in bytes (`--block-cache-mb` / producers).
    pub cache_bytes_per_producer: usize,
    /// `--save-prompts`: where each prompt is logged, in record order.
    pub prompt_log: Option<PromptLog>,
    /// Buffers the senders gave back.
    pub buffers: BufferPool,
    /// `--prompt-source dataset`: records with lengths get dataset text.
    pub dataset: Option<Arc<DatasetPrompts>>,
    /// `--carry-forward` on or auto: per synthesiser, the tokens a chat template adds around
    /// an answer and the next user message ([`CarrySlot::turn_overhead`]); None when off.
    pub carry: Option<Vec<u64>>,
    /// Which recorded-messages turns are threaded live ([`CarryForward::threads_live`]).
    pub carry_forward: crate::session::CarryForward,
    /// `--server-block-size`: planned prefix-cache hits are whole blocks.
    pub server_block: u64,
    /// [`crate::plan::ReplayPlan::slow_build`]: added to every request's build (tests).
    pub slow_build: Option<std::time::Duration>,
    /// The request's identity on the wire (None: only the record index, as `prompts`).
    pub identity: Option<Identity>,
}

/// Room kept in front of the body for the per-request headers that end every head: the
/// record index (so server logs and the mock's fault log name the record) and
/// `Content-Length`; the identity's lines ([`Identity`]) get room of their own.
const HEAD_ROOM: usize = 80;

/// A producer's block caches, one per synthesiser (shared by the endpoints that use it).
pub struct BlockCaches(Vec<BlockCache>);

impl BlockCaches {
    pub fn hits(&self) -> u64 {
        self.0.iter().map(BlockCache::hits).sum()
    }

    pub fn misses(&self) -> u64 {
        self.0.iter().map(BlockCache::misses).sum()
    }
}

impl RequestBuilder {
    /// A builder for one dialect and body, as every endpoint of a single-API run shares.
    pub fn uniform(
        api: Api,
        body: BodyOptions,
        synth: Option<Arc<PromptSynth>>,
        buffers: BufferPool,
    ) -> RequestBuilder {
        RequestBuilder {
            styles: vec![BodyStyle {
                api,
                body,
                synth: synth.as_ref().map(|_| 0),
            }],
            synths: synth.into_iter().collect(),
            cache_bytes_per_producer: 0,
            prompt_log: None,
            buffers,
            dataset: None,
            carry: None,
            identity: None,
            carry_forward: crate::session::CarryForward::Auto,
            server_block: 1,
            slow_build: None,
        }
    }

    /// Where a conversation turn's synthetic prompt is, for carry-forward; None when off,
    /// or for a prompt that is not synthetic text.
    pub(super) fn carry_slot(
        &self,
        request: &PreparedRequest,
        record: &TraceRecord,
    ) -> Option<CarrySlot> {
        let overheads = self.carry.as_ref()?;
        // Recorded messages are threaded live where their format threads them and the
        // answers can be read back: OpenAI chat and Anthropic Messages (tool calls included).
        if let Input::Messages { .. } = record.input {
            if !self.carry_forward.threads_live(&record.ids) {
                return None;
            }
            let form = self.styles[request.endpoint as usize].api.messages_form()?;
            let payload = request.payload();
            let body = memchr::memmem::find(payload, b"\r\n\r\n")? + 4;
            return crate::carry::messages::locate(payload, body, form);
        }
        if self.dataset.is_some() || !matches!(record.input, Input::Synthetic { .. }) {
            return None;
        }
        let at = self.styles[request.endpoint as usize].synth?;
        let synth = &self.synths[at];
        if synth.rendering() != crate::prompt::Rendering::Text {
            return None;
        }
        let content = synth.content_len(record.input_length()?);
        crate::carry::locate(request.payload(), content, overheads[at])
    }

    /// The hits production's server had for a turn: its planned prefix less the last token
    /// (always computed), in whole server blocks.
    pub fn planned_cached(&self, planned_prefix: u64, input_length: u64) -> u64 {
        let hit = planned_prefix.min(input_length.saturating_sub(1));
        hit / self.server_block.max(1) * self.server_block.max(1)
    }

    /// Tokens the server puts before every prompt at this endpoint (a chat template's head,
    /// a BOS): the same for all of them.
    pub fn frame_head(&self, endpoint: u32) -> u64 {
        self.styles[endpoint as usize]
            .synth
            .map_or(0, |at| self.synths[at].frame().head)
    }

    /// A synthetic record's prompt at this endpoint as a prefix cache sees it; None when its
    /// prompt is not built from hash ids.
    pub fn prompt_shape(&self, endpoint: u32, record: &TraceRecord) -> Option<PromptShape> {
        if self.dataset.is_some() {
            return None;
        }
        let Input::Synthetic {
            input_length,
            hash_ids,
        } = &record.input
        else {
            return None;
        };
        let synth = &self.synths[self.styles[endpoint as usize].synth?];
        Some(PromptShape::of(
            synth,
            record.index,
            *input_length,
            hash_ids,
        ))
    }

    /// The block caches of one producer; the budget is split among the synthesisers.
    pub fn new_caches(&self) -> BlockCaches {
        let each = self.cache_bytes_per_producer / self.synths.len().max(1);
        BlockCaches(self.synths.iter().map(|s| s.block_cache(each)).collect())
    }

    /// The bytes of `record` for endpoint `endpoint`; `seq` is its place among the records
    /// this run sends (0, 1, 2, ...: prompts.jsonl is written in that order), kept with its
    /// prompts.jsonl line (`--save-prompts`) for the caller to log ([`PromptLog::put`]).
    /// `session` is its conversation's (or task's) id, for the session header.
    pub fn build(
        &self,
        record: &TraceRecord,
        seq: u64,
        endpoint: u32,
        session: Option<&str>,
        scheduled_ns: u64,
        caches: &mut BlockCaches,
    ) -> Result<PreparedRequest, BuildError> {
        let style = &self.styles[endpoint as usize];
        let synth = style.synth.map(|i| (&*self.synths[i], i));
        let prompt_bytes = match (synth, record.input_length()) {
            (Some((s, _)), Some(len)) => s.estimated_bytes(len),
            (_, len) => len.unwrap_or(0) as usize * 8,
        };
        let mut head = Vec::new();
        if let Some(identity) = &self.identity {
            identity.write_lines(&mut head, record.index, session);
        }
        let room = HEAD_ROOM + head.len();
        let mut bytes = self.buffers.take(room + 512 + prompt_bytes);
        bytes.resize(room, 0);
        let mut synthesis = synth.map(|(synth, i)| Synthesis {
            synth,
            cache: &mut caches.0[i],
        });
        let mut saved = self.prompt_log.as_ref().map(|_| Vec::new());
        write_body(
            style.api,
            record,
            &style.body,
            synthesis.as_mut(),
            &mut bytes,
            saved.as_mut(),
        )?;
        let body_len = bytes.len() - room;
        write!(
            head,
            "X-Llmreplay-Index: {}\r\nContent-Length: {body_len}\r\n\r\n",
            record.index
        )
        .expect("a Vec takes any write");
        let start = room - head.len();
        bytes[start..room].copy_from_slice(&head);
        Ok(PreparedRequest {
            endpoint,
            bytes,
            start,
            prompt_line: saved.map(|line| (seq, line)),
            input_tokens: record.input_length(),
            output_tokens_target: record.output_length,
            ids: record.ids.clone(),
            ..PreparedRequest::empty(record.index, scheduled_ns)
        })
    }
}

/// `prompts.jsonl`, written in record order although producers finish out of order, so two
/// runs with the same seed write identical files. A turn the sender rebuilds around its
/// parent's answer (carry-forward, live threading) is written when it is sent, as sent. Lines are put by their place among the
/// records sent (not by record index, which has gaps after `--start-offset` or in a shard). Lines wait in a small reorder buffer (one per
/// producer in flight for a sorted trace; up to the reorder window for an unsorted one).
pub struct PromptLog {
    path: PathBuf,
    state: Mutex<PromptLogState>,
}

struct PromptLogState {
    out: BufWriter<File>,
    next: u64,
    /// Lines waiting for an earlier one (None: a deferred line, nothing to write there).
    waiting: BTreeMap<u64, Option<Vec<u8>>>,
}

impl PromptLog {
    pub fn create(path: &Path) -> Result<PromptLog> {
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        Ok(PromptLog {
            path: path.to_path_buf(),
            state: Mutex::new(PromptLogState {
                out: BufWriter::with_capacity(1 << 20, file),
                next: 0,
                waiting: BTreeMap::new(),
            }),
        })
    }

    /// Line `seq` (its place among the records sent), written once every earlier one is.
    pub fn put(&self, seq: u64, line: Vec<u8>) -> Result<(), BuildError> {
        self.settle(seq, Some(line))
    }

    /// Line `seq` comes later, from the sender that rebuilds its turn around its parent's
    /// answer ([`PromptLog::late`]): the lines after it need not wait for it.
    pub fn defer(&self, seq: u64) -> Result<(), BuildError> {
        self.settle(seq, None)
    }

    /// A rebuilt turn's line, as sent: written now, after the lines of the turns built
    /// before it was sent.
    pub fn late(&self, line: &[u8]) -> Result<(), BuildError> {
        let mut s = self.lock()?;
        s.out.write_all(line).map_err(|e| self.error(e))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, PromptLogState>, BuildError> {
        self.state
            .lock()
            .map_err(|_| self.error(std::io::Error::other("a producer panicked")))
    }

    fn error(&self, source: std::io::Error) -> BuildError {
        BuildError::PromptLog {
            path: self.path.clone(),
            source,
        }
    }

    fn settle(&self, seq: u64, line: Option<Vec<u8>>) -> Result<(), BuildError> {
        let mut s = self.lock()?;
        s.waiting.insert(seq, line);
        loop {
            let next = s.next;
            let Some(line) = s.waiting.remove(&next) else {
                return Ok(());
            };
            if let Some(line) = line {
                s.out.write_all(&line).map_err(|e| self.error(e))?;
            }
            s.next += 1;
        }
    }

    /// Writes what is left and flushes; called once the producers are done.
    pub fn finish(&self) -> Result<()> {
        let mut s = self
            .state
            .lock()
            .map_err(|_| Error::Run("a producer thread panicked".into()))?;
        let s = &mut *s;
        for line in std::mem::take(&mut s.waiting).into_values().flatten() {
            s.out
                .write_all(&line)
                .map_err(|e| Error::io(&self.path, e))?;
        }
        s.out.flush().map_err(|e| Error::io(&self.path, e))
    }
}
