//! What the mock answers: one generation per request, rendered like vLLM's responses.

use std::sync::Arc;

use serde_json::Value;

use super::count_job::{CountJob, PendingCount};
use super::faults::FaultPlan;
use super::fixture::StreamFixture;
use crate::api::{Answer, Api, MockRequest, Prompt, Route};
use crate::prompt::PromptCounter;

/// Timing and shape of the mock model.
#[derive(Clone, Debug)]
pub struct MockConfig {
    pub ttft_ns: u64,
    /// Gap between consecutive chunks.
    pub itl_ns: u64,
    pub tokens_per_chunk: u32,
    /// Each answer's first tokens are reasoning, streamed in the dialect's reasoning field
    /// (`--reasoning-tokens`; dialects without one stream none).
    pub reasoning_tokens: u64,
    /// `--replay-stream`: every request is answered with these recorded events.
    pub replay_stream: Option<Arc<StreamFixture>>,
    /// Model name served by `/v1/models`; requests may name any model.
    pub model: String,
    pub counting: PromptCounting,
    pub faults: FaultPlan,
    /// Where injected faults are logged (`--fault-log`).
    pub fault_log: Option<std::path::PathBuf>,
    /// Where each request's arrival time is logged (`--arrival-log`).
    pub arrival_log: Option<std::path::PathBuf>,
    /// Where each request's own timing is logged (`--timing-log`).
    pub timing_log: Option<std::path::PathBuf>,
    /// Serve https with this certificate (`--tls-cert`, `--tls-key`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `--http-workers`: serve at most this many connections at once, each holding a worker
    /// until it closes or idles out (see `workers`).
    pub http_workers: Option<usize>,
    /// With `http_workers`: an idle connection is closed after this long (`--keep-alive-s`).
    pub keep_alive_ns: u64,
    /// Keep the bodies of this many generation requests in [`super::MockStats`] (tests).
    pub keep_bodies: usize,
    /// With [`PromptCounting::Tokenizer`]: threads that count prompts (`--count-threads`).
    pub count_threads: usize,
    /// `--cache-blocks N --cache-block-size B`: a prefix cache of N blocks of B words that
    /// sets `usage.prompt_tokens_details.cached_tokens`.
    pub prefix_cache: Option<(usize, usize)>,
    /// `--max-running N`: at most N requests generate at once; the rest wait in arrival
    /// order, and their time to first token starts when they are admitted.
    pub max_running: Option<usize>,
    /// `--graceful-shutdown-after N`: at the Nth request the listener closes and no request
    /// is admitted any more; those generating finish.
    pub graceful_shutdown_after: Option<u64>,
    /// `--prefill-us-per-token`: time to first token added per prompt token not served by
    /// the prefix cache.
    pub prefill_ns_per_token: u64,
    /// Its clock, as `GET /health`'s `Date` header gives it, this many ms off the host's.
    pub date_offset_ms: i64,
}

/// How the mock counts a request's prompt tokens (its `usage.prompt_tokens`).
#[derive(Clone, Debug)]
pub enum PromptCounting {
    /// Whitespace-separated words, plus a fixed overhead for chat requests: exact for
    /// llmreplay's synthetic prompts (one word per token) once the template overhead is known.
    /// The in-process mock of `replay --mock` is given the overheads the replay measured:
    /// `turn_overhead` for each earlier answer and the user message after it (a
    /// carried-forward turn), as the template adds its turns' markers.
    Words {
        chat_overhead: u64,
        turn_overhead: u64,
    },
    /// Words with no template overhead (a stand-alone mock without `--tokenizer`): only an
    /// estimate, so every response says so in [`APPROXIMATE_COUNT_HEADER`] and the client
    /// reports the input length as not checked rather than as a mismatch.
    Approximate,
    /// The real tokenizer and chat template, counted as a vLLM server does (`mock
    /// --tokenizer`). Tokenizing costs far more than generating, so it runs on the
    /// [`super::counting`] threads while the answer streams; only the closing usage waits.
    Tokenizer(Arc<PromptCounter>),
}

/// Response header of a mock whose `usage.prompt_tokens` is an estimate.
pub const APPROXIMATE_COUNT_HEADER: &str = "x-llmreplay-prompt-count: approximate";

/// A request's prompt count: known at once, or left to the tokenizer threads.
enum Count {
    Known(u64),
    Deferred(CountJob),
}

impl PromptCounting {
    fn count(&self, prompt: &Prompt) -> Count {
        let tokenizer = matches!(self, PromptCounting::Tokenizer(_));
        let (overhead, per_answer) = match self {
            PromptCounting::Words {
                chat_overhead,
                turn_overhead,
            } => (*chat_overhead, *turn_overhead),
            _ => (0, 0),
        };
        match *prompt {
            Prompt::Messages {
                messages,
                tools,
                system,
                thinking,
            } => {
                if tokenizer {
                    return Count::Deferred(CountJob::Chat {
                        thinking,
                        messages: crate::api::with_system(messages, system),
                        tools: tools.cloned(),
                    });
                }
                let words: u64 = messages
                    .iter()
                    .map(|m| count_words_in(m.get("content")))
                    .sum::<u64>()
                    + count_words_in(system);
                let answers = messages
                    .iter()
                    .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                    .count() as u64;
                Count::Known(words + overhead + answers * per_answer)
            }
            Prompt::Text(prompt) => match prompt {
                // Token ids are taken as they are, as vLLM does.
                Value::Array(items) if items.iter().all(Value::is_u64) => {
                    Count::Known(items.len() as u64)
                }
                Value::String(text) if tokenizer => {
                    Count::Deferred(CountJob::Completion(text.clone()))
                }
                prompt => Count::Known(count_words_in(Some(prompt))),
            },
        }
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            ttft_ns: 20_000_000,
            itl_ns: 5_000_000,
            tokens_per_chunk: 1,
            reasoning_tokens: 0,
            replay_stream: None,
            model: "mock-model".into(),
            counting: PromptCounting::Words {
                chat_overhead: 0,
                turn_overhead: 0,
            },
            faults: FaultPlan::default(),
            fault_log: None,
            arrival_log: None,
            timing_log: None,
            tls: None,
            http_workers: None,
            keep_alive_ns: 5_000_000_000,
            keep_bodies: 0,
            count_threads: 2,
            prefix_cache: None,
            max_running: None,
            graceful_shutdown_after: None,
            prefill_ns_per_token: 0,
            date_offset_ms: 0,
        }
    }
}

/// One request being answered.
#[derive(Debug)]
pub struct Generation {
    pub dialect: Api,
    pub stream: bool,
    /// Tokens to generate.
    pub tokens: u64,
    pub prompt_tokens: u64,
    /// The prompt is being counted on the tokenizer threads: the events that carry usage
    /// wait for it (see [`Generation::held`]).
    pub count_pending: bool,
    /// The count handed to those threads, kept until it is in so that a request held by it
    /// can hurry it (see [`super::counting`]).
    pub count_job: Option<Arc<PendingCount>>,
    /// Its place in the counting threads' arrival order (with `--tokenizer`).
    pub count_seq: Option<u64>,
    /// The count was hurried.
    pub count_hurried: bool,
    /// Prompt tokens the prefix cache served (with `--cache-blocks`).
    pub cached_tokens: Option<u64>,
    /// Where the prompt's blocks end in the prefix cache: its answer extends them.
    pub cache_chain: Option<crate::prefix_cache::Chain>,
    /// Prefill of the prompt tokens the cache did not serve (`--prefill-us-per-token`).
    pub prefill_ns: u64,
    /// `--timing-log`: this request's times on CLOCK_MONOTONIC.
    pub timing: Option<Box<Timing>>,
    /// Its answer reports the prompt count; a stream's first event already does (see
    /// [`crate::api::MockRequest`]).
    reports_usage: bool,
    usage_at_start: bool,
    include_usage: bool,
    continuous_usage: bool,
    /// Tokens already sent.
    pub sent: u64,
    /// The closing events (finish, usage, `[DONE]`) are written.
    closed: bool,
    /// Events stop here (a fault cuts the stream); `u64::MAX` otherwise.
    pub stop_at: u64,
    /// Arrival time of the request (mock clock, ns); with `--max-running`, its admission.
    pub arrival_ns: u64,
    /// Waiting for a free place under `--max-running`: nothing is scheduled yet.
    pub queued: bool,
    id: u64,
    model: String,
    /// Pre-rendered text of a content event around its token text: the hot path is memcpy
    /// (`None`: the dialect writes its token events whole).
    content_frame: Option<(Vec<u8>, &'static [u8])>,
    /// The answer's first tokens that are reasoning, and their event's text around the token
    /// text.
    reasoning: u64,
    reasoning_frame: Option<(Vec<u8>, &'static [u8])>,
    /// `--replay-stream`: the events sent instead of generated ones (one a "token").
    fixture: Option<Arc<StreamFixture>>,
}

/// A request's own timing (`--timing-log`), on CLOCK_MONOTONIC.
#[derive(Debug, Default)]
pub struct Timing {
    pub index: Option<u64>,
    pub received_ns: u64,
    /// When each write of its events returned...
    pub chunks_ns: Vec<u64>,
    /// ...and the tokens sent by then.
    pub chunks_tokens: Vec<u64>,
}

pub use crate::api::TOKEN_TEXT;

impl Generation {
    /// Reads a request body that came to `route` of `dialect`.
    pub fn from_request(
        dialect: Api,
        route: &Route,
        body: &Value,
        id: u64,
        arrival_ns: u64,
        counting: &PromptCounting,
    ) -> Result<Generation, String> {
        let obj = body
            .as_object()
            .ok_or("request body must be a JSON object")?;
        let req = dialect.mock_request(obj, route)?;
        Ok(Generation::new(
            dialect, &req, obj, id, arrival_ns, counting,
        ))
    }

    /// A generation for a request its dialect has read (`obj` is its body).
    pub fn new(
        dialect: Api,
        req: &MockRequest,
        obj: &serde_json::Map<String, Value>,
        id: u64,
        arrival_ns: u64,
        counting: &PromptCounting,
    ) -> Generation {
        let (prompt_tokens, count_job) = match counting.count(&req.prompt) {
            Count::Known(n) => (n, None),
            Count::Deferred(job) => (0, Some(PendingCount::new(job))),
        };
        let model = obj
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("mock-model")
            .to_string();
        let mut g = Generation {
            dialect,
            stream: req.stream,
            tokens: req.tokens,
            prompt_tokens,
            count_pending: count_job.is_some(),
            count_job,
            count_seq: None,
            count_hurried: false,
            cached_tokens: None,
            cache_chain: None,
            prefill_ns: 0,
            timing: None,
            reports_usage: req.reports_usage,
            usage_at_start: req.usage_at_start,
            include_usage: req.include_usage,
            continuous_usage: req.continuous_usage,
            sent: 0,
            closed: false,
            stop_at: u64::MAX,
            arrival_ns,
            queued: false,
            id,
            model,
            content_frame: None,
            reasoning: 0,
            reasoning_frame: None,
            fixture: None,
        };
        g.content_frame = dialect.content_frame(&g.answer());
        g
    }

    /// Its first `tokens` (of those asked for) are reasoning, where the dialect streams any.
    pub fn with_reasoning(mut self, tokens: u64) -> Generation {
        if tokens > 0 {
            self.reasoning_frame = self.dialect.reasoning_frame(&self.answer());
        }
        if self.reasoning_frame.is_some() {
            self.reasoning = tokens.min(self.tokens);
            self.content_frame = self.dialect.content_frame(&self.answer());
        }
        self
    }

    /// Answered with `fixture`'s events instead (`--replay-stream`): a stream of them, whatever
    /// was asked, with no usage of the mock's own.
    pub fn with_fixture(mut self, fixture: Option<Arc<StreamFixture>>) -> Generation {
        if let Some(f) = &fixture {
            self.stream = true;
            self.tokens = f.events.len() as u64;
            self.reports_usage = false;
            self.reasoning = 0;
        }
        self.fixture = fixture;
        self
    }

    /// The answer as the dialect renders it, now.
    fn answer(&self) -> Answer<'_> {
        Answer {
            id: self.id,
            model: &self.model,
            stream: self.stream,
            tokens: self.tokens,
            sent: self.sent,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            include_usage: self.include_usage,
            reasoning: self.reasoning,
            continuous_usage: self.continuous_usage,
        }
    }

    /// Number of chunks the answer is cut into.
    pub fn chunks(&self, cfg: &MockConfig) -> u64 {
        match self.fixture {
            Some(_) => self.tokens,
            None => self
                .tokens
                .div_ceil(u64::from(cfg.tokens_per_chunk.max(1)))
                .max(1),
        }
    }

    /// When chunk `k` (0-based) is due.
    pub fn chunk_due(&self, cfg: &MockConfig, k: u64) -> u64 {
        if let Some(f) = &self.fixture {
            let last = f.events.len().saturating_sub(1);
            return self.arrival_ns + f.events[(k as usize).min(last)].0;
        }
        self.arrival_ns + cfg.ttft_ns + self.prefill_ns + k * cfg.itl_ns
    }

    /// When the next chunk is due.
    pub fn next_due(&self, cfg: &MockConfig) -> u64 {
        let per = match self.fixture {
            Some(_) => 1,
            None => u64::from(cfg.tokens_per_chunk.max(1)),
        };
        self.chunk_due(cfg, self.sent / per)
    }

    pub fn done(&self) -> bool {
        self.sent >= self.tokens
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next event would carry the prompt count, which is not known yet: a whole
    /// response, every event of a stream whose first one or each one carries it, or a
    /// stream's closing usage event (its tokens are not held: the TTFT stays as configured).
    /// A dialect that reports no prompt count (TGI) never waits.
    pub fn held(&self) -> bool {
        if !self.count_pending || !self.reports_usage {
            return false;
        }
        !self.stream
            || self.continuous_usage
            || self.usage_at_start
            || (self.include_usage && self.done())
    }

    /// Every event of the stream is written, the closing ones included.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Tokens of its answer sent, its reasoning left out.
    pub fn answer_tokens(&self) -> u64 {
        self.sent.saturating_sub(self.reasoning)
    }

    /// The tokenizer threads counted the prompt.
    pub fn counted(&mut self, prompt_tokens: u64) {
        self.prompt_tokens = prompt_tokens;
        self.count_pending = false;
        self.count_job = None;
    }

    /// Appends the SSE events of every chunk due by `now` (and the closing events after the
    /// last one, unless they wait for the prompt count) to `out`. Returns the number of events
    /// written, the closing ones counted as one.
    pub fn write_due_events(&mut self, cfg: &MockConfig, now: u64, out: &mut Vec<u8>) -> u64 {
        if let Some(f) = self.fixture.clone() {
            let before = self.sent;
            while self.sent < self.tokens.min(self.stop_at) && self.chunk_due(cfg, self.sent) <= now
            {
                out.extend_from_slice(&f.events[self.sent as usize].1);
                self.sent += 1;
            }
            self.closed = self.done();
            return self.sent - before;
        }
        let per = u64::from(cfg.tokens_per_chunk.max(1));
        let dialect = self.dialect;
        let mut written = 0;
        while !self.done() && self.sent < self.stop_at && !self.held() {
            let k = self.sent / per;
            if self.chunk_due(cfg, k) > now {
                break;
            }
            if self.sent == 0 {
                dialect.write_open(&self.answer(), out);
            }
            if self.reasoning > 0 && self.sent == self.reasoning {
                dialect.write_answer_start(&self.answer(), out);
            }
            // A chunk is all reasoning or all answer.
            let thinking = self.sent < self.reasoning;
            let end = if thinking {
                self.reasoning
            } else {
                self.tokens
            };
            let n = per.min(end - self.sent);
            self.sent += n;
            written += 1;
            let frame = match thinking {
                true => &self.reasoning_frame,
                false => &self.content_frame,
            };
            let Some((prefix, suffix)) = frame else {
                dialect.write_tokens(&self.answer(), n, out);
                continue;
            };
            out.extend_from_slice(prefix);
            for _ in 0..n {
                out.extend_from_slice(TOKEN_TEXT.as_bytes());
            }
            out.extend_from_slice(suffix);
            if self.continuous_usage {
                dialect.write_running_usage(&self.answer(), out);
            }
            out.extend_from_slice(b"}\n\n");
        }
        if !self.done() || self.closed || self.held() {
            return written;
        }
        self.closed = true;
        if dialect.write_close(&self.answer(), out) {
            written += 1;
        }
        written
    }

    /// The whole non-streamed answer.
    pub fn full_response(&mut self) -> Value {
        self.sent = self.tokens;
        self.dialect.full_response(&self.answer())
    }
}

/// The words of a request's prompt (its messages' contents, or its prompt): the prefill work
/// of a prompt whose token count is not known yet (one word a token in synthetic prompts).
pub fn prompt_words(prompt: &Prompt) -> u64 {
    match *prompt {
        Prompt::Messages {
            messages, system, ..
        } => {
            messages
                .iter()
                .map(|m| count_words_in(m.get("content")))
                .sum::<u64>()
                + count_words_in(system)
        }
        Prompt::Text(prompt) => count_words_in(Some(prompt)),
    }
}

/// Whitespace-separated words of a prompt or message content (string or list of text parts):
/// the mock's token count without a tokenizer, exact for llmreplay's synthetic prompts.
fn count_words_in(content: Option<&Value>) -> u64 {
    match content {
        Some(Value::String(s)) => count_words(s.as_bytes()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                if p.is_string() {
                    count_words_in(Some(p))
                } else {
                    count_words_in(p.get("text"))
                }
            })
            .sum(),
        _ => 0,
    }
}

/// `str::split_ascii_whitespace().count()`, 6x faster: a word starts wherever a byte that is
/// not ASCII whitespace follows one that is (UTF-8 continuation bytes never are). Counted in
/// runs of 255 pairs into a byte, which the compiler turns into SIMD; the mock counts every
/// prompt it receives, and this count was a fifth of its CPU at 1000 requests/s.
fn count_words(s: &[u8]) -> u64 {
    let is_ws = |b: u8| matches!(b, b'\t' | b'\n' | b'\x0C' | b'\r' | b' ');
    let Some(&first) = s.first() else {
        return 0;
    };
    let mut words = u64::from(!is_ws(first));
    let mut i = 1;
    while i < s.len() {
        let end = (i + 255).min(s.len());
        let mut run: u8 = 0;
        for j in i..end {
            run += u8::from(is_ws(s[j - 1]) & !is_ws(s[j]));
        }
        words += u64::from(run);
        i = end;
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EventScanner;
    use serde_json::json;

    #[test]
    fn count_words_agrees_with_split_ascii_whitespace() {
        let pieces = [
            "", " ", "a", "wörd", "\t", "\r\n", "\x0C", "\u{a0}", "tok", "  ",
        ];
        let mut state = 7u64;
        for len in 0..600 {
            let mut s = String::new();
            for _ in 0..len {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                s.push_str(pieces[(state >> 33) as usize % pieces.len()]);
            }
            let expected = s.split_ascii_whitespace().count() as u64;
            assert_eq!(count_words(s.as_bytes()), expected, "{s:?}");
        }
    }

    fn gen(body: Value, dialect: Api) -> Generation {
        Generation::from_request(
            dialect,
            &dialect.routes()[0],
            &body,
            1,
            0,
            &PromptCounting::Words {
                chat_overhead: 0,
                turn_overhead: 0,
            },
        )
        .unwrap()
    }

    /// A carried-forward chat turn counts each earlier answer's template markers, as a real
    /// template does: the frame once, the turn overhead per assistant message.
    #[test]
    fn words_count_a_turn_overhead_per_answer() {
        let counting = PromptCounting::Words {
            chat_overhead: 8,
            turn_overhead: 10,
        };
        let turns = |n: usize| {
            let mut messages = vec![json!({"role": "user", "content": " a b"})];
            for _ in 0..n {
                messages.push(json!({"role": "assistant", "content": " x y y"}));
                messages.push(json!({"role": "user", "content": " c"}));
            }
            let body = json!({"messages": messages, "max_tokens": 4});
            Generation::from_request(
                Api::OpenaiChat,
                &Api::OpenaiChat.routes()[0],
                &body,
                1,
                0,
                &counting,
            )
            .unwrap()
            .prompt_tokens
        };
        assert_eq!(turns(0), 2 + 8);
        assert_eq!(turns(1), 2 + 3 + 1 + 8 + 10);
        assert_eq!(turns(2), 2 + 2 * (3 + 1) + 8 + 2 * 10);
    }

    #[test]
    fn output_length_rules() {
        let g = gen(
            json!({"messages": [{"role": "user", "content": " a b c"}], "max_tokens": 10}),
            Api::OpenaiChat,
        );
        assert_eq!(
            (g.tokens, g.prompt_tokens),
            (5, 3),
            "EOS at half without min_tokens"
        );
        let g = gen(
            json!({"messages": [], "max_tokens": 10, "min_tokens": 10}),
            Api::OpenaiChat,
        );
        assert_eq!(g.tokens, 10);
        let g = gen(
            json!({"prompt": "x y", "max_tokens": 10, "ignore_eos": true}),
            Api::OpenaiCompletions,
        );
        assert_eq!((g.tokens, g.prompt_tokens), (10, 2));
        assert!(Generation::from_request(
            Api::OpenaiChat,
            &Api::OpenaiChat.routes()[0],
            &json!({"max_tokens": 1}),
            1,
            0,
            &MockConfig::default().counting
        )
        .is_err());
        assert!(Generation::from_request(
            Api::OpenaiCompletions,
            &Api::OpenaiCompletions.routes()[0],
            &json!({"prompt": "a", "max_tokens": -1}),
            1,
            0,
            &MockConfig::default().counting
        )
        .is_err());
    }

    /// With a tokenizer the count is deferred: every token but the last streams on time, and
    /// the last one with the usage event waits until the count is in.
    #[test]
    fn usage_waits_for_a_deferred_count() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/tokenizers/qwen3");
        let (tokenizer, file) = crate::prompt::load_tokenizer(dir.as_ref()).unwrap();
        let counter = PromptCounter::new(tokenizer, &file, None).unwrap();
        let counting = PromptCounting::Tokenizer(Arc::new(counter));
        let cfg = MockConfig::default();
        let body = json!({"prompt": "hello world", "max_tokens": 4, "ignore_eos": true,
                          "stream": true, "stream_options": {"include_usage": true}});
        let mut g = Generation::from_request(
            Api::OpenaiCompletions,
            &Api::OpenaiCompletions.routes()[0],
            &body,
            1,
            0,
            &counting,
        )
        .unwrap();
        let job = g.count_job.take().expect("deferred");
        let mut out = Vec::new();
        assert_eq!(
            g.write_due_events(&cfg, u64::MAX, &mut out),
            4,
            "every token on time"
        );
        assert!(g.held() && g.done() && !g.closed());
        assert!(!String::from_utf8_lossy(&out).contains("usage"));
        let PromptCounting::Tokenizer(counter) = &counting else {
            unreachable!()
        };
        g.counted(job.ids(counter).unwrap().len() as u64);
        out.clear();
        assert_eq!(
            g.write_due_events(&cfg, u64::MAX, &mut out),
            1,
            "the closing events"
        );
        let text = String::from_utf8_lossy(&out);
        assert!(
            g.closed() && text.contains("\"prompt_tokens\":2,"),
            "{text}"
        );
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        // Without include_usage nothing carries the count, so nothing waits.
        let body = json!({"prompt": "hello world", "max_tokens": 4, "ignore_eos": true,
                          "stream": true});
        let mut g = Generation::from_request(
            Api::OpenaiCompletions,
            &Api::OpenaiCompletions.routes()[0],
            &body,
            1,
            0,
            &counting,
        )
        .unwrap();
        assert_eq!(g.write_due_events(&cfg, u64::MAX, &mut out), 5);
        assert!(g.closed());
    }

    #[test]
    fn stream_is_understood_by_the_client_scanner() {
        let cfg = MockConfig {
            ttft_ns: 10,
            itl_ns: 5,
            tokens_per_chunk: 2,
            model: "m".into(),
            ..MockConfig::default()
        };
        let mut g = gen(
            json!({"messages": [{"role": "user", "content": "a b"}], "max_tokens": 5, "min_tokens": 5, "stream": true, "stream_options": {"include_usage": true}}),
            Api::OpenaiChat,
        );
        let mut out = Vec::new();
        assert_eq!(g.write_due_events(&cfg, 9, &mut out), 0);
        assert_eq!(
            g.write_due_events(&cfg, 15, &mut out),
            2,
            "chunks due at 10 and 15"
        );
        assert_eq!(
            g.write_due_events(&cfg, 100, &mut out),
            2,
            "the last chunk, then closing"
        );
        assert!(g.closed());
        let scanner = EventScanner::new(Api::OpenaiChat);
        let mut content = 0;
        let mut usage = None;
        let mut done = false;
        for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let ev = scanner.scan(line.strip_prefix(b"data: ").unwrap());
            content += u64::from(ev.content);
            usage = ev.completion_tokens.or(usage);
            done |= ev.done;
        }
        assert_eq!((content, usage, done), (3, Some(5), true));
    }
}
