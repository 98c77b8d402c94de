//! Counting prompt tokens as the server will: chat templates and special tokens.
//!
//! A vLLM-style server renders chat messages with the model's chat template and tokenizes the
//! result without adding special tokens (the template writes them); a completions prompt is
//! tokenized with the tokenizer's special tokens (e.g. Llama-3's BOS). [`PromptCounter`] does
//! the same, so the replay can take the difference off the synthetic content and the mock can
//! report the `usage.prompt_tokens` a real server would.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Value as JinjaValue};
use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::SafeVocab;
use crate::error::{Error, Result};

/// What the server puts around the synthetic content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrapping {
    /// One user message, rendered with the chat template.
    Chat,
    /// A completions prompt string: the tokenizer adds its special tokens.
    Completion,
    /// A completions prompt of token ids: sent as they are.
    TokenIds,
}

/// The chat template of a `tokenizer_config.json`, ready to render.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

const TEMPLATE: &str = "chat";

impl ChatTemplate {
    /// Reads `chat_template` (a string, or a list of named templates: `default` is taken) and
    /// the BOS/EOS tokens; a config without `chat_template` takes the `chat_template.jinja`
    /// beside it (the layout of newer Hugging Face repositories). `Ok(None)` when there is no
    /// template; else the template and the file its text came from.
    pub fn load(config: &Path) -> Result<Option<(ChatTemplate, PathBuf)>> {
        let fail = |message: String| Error::Tokenizer {
            path: config.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(config).map_err(|e| Error::io(config, e))?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| fail(format!("invalid JSON: {e}")))?;
        let jinja = config.with_file_name("chat_template.jinja");
        let (source, from) = match json.get("chat_template") {
            None | Some(Value::Null) if jinja.is_file() => (
                std::fs::read_to_string(&jinja).map_err(|e| Error::io(&jinja, e))?,
                jinja,
            ),
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => (s.clone(), config.to_path_buf()),
            Some(Value::Array(named)) => (
                named
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .or_else(|| named.first())
                    .and_then(|t| t.get("template").and_then(Value::as_str))
                    .ok_or_else(|| {
                        fail("field `chat_template`: no usable template in the list".into())
                    })?
                    .to_owned(),
                config.to_path_buf(),
            ),
            Some(_) => {
                return Err(fail(
                    "field `chat_template`: expected a string or a list".into(),
                ))
            }
        };
        let special = |key: &str| match json.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        };
        let mut env = Environment::new();
        // As Hugging Face renders chat templates (jinja2 with these two options).
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| fail(e.to_string()))?,
        );
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        // Templates that print today's date (Llama 3.2's system header) get today's, as the
        // server renders it.
        env.add_function("strftime_now", |format: String| {
            strftime(
                &format,
                crate::sys::wall_start::unix_ns_now() / 1_000_000_000,
            )
        });
        env.add_template_owned(TEMPLATE, source)
            .map_err(|e| Error::Tokenizer {
                path: from.clone(),
                message: format!("chat template: {e}"),
            })?;
        let template = ChatTemplate {
            env,
            bos: special("bos_token"),
            eos: special("eos_token"),
        };
        Ok(Some((template, from)))
    }

    /// The prompt text for `messages` (and `tools`), with the generation prompt appended;
    /// `enable_thinking` is set when `thinking` is (else the template's default holds).
    pub fn render(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        thinking: Option<bool>,
    ) -> Result<String, String> {
        let template = self.env.get_template(TEMPLATE).map_err(|e| e.to_string())?;
        let base = minijinja::context! {
            messages => JinjaValue::from(minijinja::value::Serde(messages)),
            tools => tools.map(|t| JinjaValue::from(minijinja::value::Serde(t))),
            add_generation_prompt => true,
            bos_token => &self.bos,
            eos_token => &self.eos,
        };
        let ctx = match thinking {
            Some(on) => minijinja::context! { enable_thinking => on, ..base },
            None => base,
        };
        template
            .render(ctx)
            .map_err(|e| format!("chat template: {e}"))
    }
}

/// Counts prompt tokens the way the server does.
pub struct PromptCounter {
    /// Loaded on first use when the analysis came from the cache (most runs never count).
    tokenizer: OnceLock<std::result::Result<Tokenizer, String>>,
    tokenizer_file: PathBuf,
    template: Option<ChatTemplate>,
    /// The file the template's text came from, for messages.
    template_path: Option<PathBuf>,
    /// The `tokenizer_config.json` read (its special tokens), when there is a template.
    config_path: Option<PathBuf>,
    /// `enable_thinking` for the template (`--thinking`), when set.
    thinking: Option<bool>,
}

impl PromptCounter {
    /// `config` is `--tokenizer-config`, else `tokenizer_config.json` beside the tokenizer
    /// file is used when present.
    pub fn new(tokenizer: Tokenizer, tokenizer_file: &Path, config: Option<&Path>) -> Result<Self> {
        Ok(PromptCounter::deferred(tokenizer_file, config)?.with_tokenizer(tokenizer))
    }

    /// This counter rendering its template with `enable_thinking` set (None: the default).
    pub fn with_thinking(mut self, thinking: Option<bool>) -> Self {
        self.thinking = thinking;
        self
    }

    /// This counter with its tokenizer already loaded.
    pub fn with_tokenizer(self, tokenizer: Tokenizer) -> Self {
        let _ = self.tokenizer.set(Ok(tokenizer));
        self
    }

    /// A counter whose tokenizer is read from `tokenizer_file` the first time it counts.
    pub fn deferred(tokenizer_file: &Path, config: Option<&Path>) -> Result<Self> {
        let path = Self::config_path(tokenizer_file, config);
        let (template, template_path) = match &path {
            Some(p) => ChatTemplate::load(p)?.unzip(),
            None => (None, None),
        };
        Ok(PromptCounter {
            tokenizer: OnceLock::new(),
            tokenizer_file: tokenizer_file.to_path_buf(),
            config_path: template.as_ref().and(path),
            thinking: None,
            template_path,
            template,
        })
    }

    /// `--tokenizer-config`, else the `tokenizer_config.json` beside the tokenizer, if any.
    pub fn config_path(tokenizer_file: &Path, config: Option<&Path>) -> Option<PathBuf> {
        let beside = tokenizer_file.with_file_name("tokenizer_config.json");
        match config {
            Some(p) => Some(p.to_path_buf()),
            None => beside.is_file().then_some(beside),
        }
    }

    /// The tokenizer, read now if it was deferred.
    pub fn tokenizer(&self) -> Result<&Tokenizer, String> {
        self.tokenizer
            .get_or_init(|| {
                super::load_tokenizer(&self.tokenizer_file)
                    .map(|(t, _)| t)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(String::clone)
    }

    /// The file the chat template came from, if there is one.
    pub fn template_path(&self) -> Option<&Path> {
        self.template_path.as_deref()
    }

    /// The files the template is read from: the config, and the `.jinja` when it is apart.
    pub fn template_files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.config_path.iter().map(PathBuf::as_path).collect();
        files.extend(
            self.template_path()
                .filter(|t| Some(*t) != files.first().copied()),
        );
        files
    }

    /// The prompt text a chat request becomes on the server.
    pub fn render_chat(&self, messages: &Value, tools: Option<&Value>) -> Result<String, String> {
        self.render_thinking(messages, tools, self.thinking)
    }

    fn render_thinking(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        thinking: Option<bool>,
    ) -> Result<String, String> {
        self.template
            .as_ref()
            .ok_or("no chat template (give --tokenizer-config, or a tokenizer directory with tokenizer_config.json)")?
            .render(messages, tools, thinking)
    }

    /// Token ids of a chat request's prompt on the server.
    pub fn chat_ids(&self, messages: &Value, tools: Option<&Value>) -> Result<Vec<u32>, String> {
        self.chat_ids_thinking(messages, tools, self.thinking)
    }

    /// Token ids of a chat request's prompt with the request's own `enable_thinking` (the
    /// mock counts each request as its kwargs say; None: this counter's).
    pub fn chat_ids_thinking(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        thinking: Option<bool>,
    ) -> Result<Vec<u32>, String> {
        let text = self.render_thinking(messages, tools, thinking.or(self.thinking))?;
        self.encode(&text, false)
    }

    /// Token ids of a completions prompt on the server (special tokens added).
    pub fn completion_ids(&self, prompt: &str) -> Result<Vec<u32>, String> {
        self.encode(prompt, true)
    }

    /// Token ids of text on its own (no special tokens, no template).
    pub fn content_ids(&self, text: &str) -> Result<Vec<u32>, String> {
        self.encode(text, false)
    }

    /// The text of token ids (special tokens left out).
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.tokenizer()?
            .decode(ids, true)
            .map_err(|e| format!("tokenizer: {e}"))
    }

    fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, String> {
        self.tokenizer()?
            .encode_fast(text, special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("tokenizer: {e}"))
    }

    /// What the server adds around synthetic content of the given wrapping, measured with
    /// probe contents of several lengths whose first tokens all differ:
    /// - the head is the tokens every probe's prompt begins with (so a probe token that also
    ///   occurs in the template's own text, a default system prompt say, cannot mislead it);
    /// - each prompt must hold exactly its content's tokens plus one fixed number more, and
    ///   end in the same tail (the generation prompt);
    /// - the content must come back intact after the head, its first token allowed to come
    ///   back as its bare word (templates that trim the content drop its leading space; the
    ///   safe table guarantees the bare word is one token).
    pub fn frame(&self, wrapping: Wrapping, vocab: &SafeVocab) -> Result<Frame, FrameError> {
        if wrapping == Wrapping::TokenIds {
            return Ok(Frame::default());
        }
        let mut probes = Vec::new();
        for (salt, n) in [1usize, 2, 7, 64].into_iter().enumerate() {
            let content = probe_text(vocab, n, salt + 1);
            let ids = match wrapping {
                Wrapping::Chat => {
                    self.chat_ids(&json!([{"role": "user", "content": content}]), None)?
                }
                _ => self.completion_ids(&content)?,
            };
            probes.push((self.content_ids(&content)?, ids));
        }
        let (own0, ids0) = &probes[0];
        let total = (ids0.len() as u64).saturating_sub(own0.len() as u64);
        for (own, ids) in &probes {
            let other = (ids.len() as u64).saturating_sub(own.len() as u64);
            if other != total || ids.len() < own.len() {
                return Err(FrameError::NotFixed { one: total, other });
            }
        }
        let head = probes
            .iter()
            .map(|(_, ids)| common_prefix(ids0, ids))
            .min()
            .unwrap_or(0);
        let frame = Frame {
            head: head as u64,
            tail: total - (head as u64).min(total),
        };
        let tail_of = |ids: &[u32]| ids[ids.len() - frame.tail as usize..].to_vec();
        for (own, ids) in &probes {
            let at = &ids[head..];
            let first_ok = at.first().is_some_and(|&first| {
                first == own[0] || self.bare_word(own[0]).is_some_and(|bare| bare == first)
            });
            if !first_ok || at.len() < own.len() || at[1..own.len()] != own[1..] {
                return Err(FrameError::ContentChanged {
                    tokens: own.len(),
                    prompt: ids.len(),
                });
            }
            if tail_of(ids) != tail_of(ids0) {
                return Err(FrameError::EndingDiffers);
            }
        }
        Ok(frame)
    }

    /// The id of a `" word"` token's bare word, when it is one token.
    fn bare_word(&self, id: u32) -> Option<u32> {
        let text = self.decode(&[id]).ok()?;
        match self.content_ids(text.strip_prefix(' ')?).ok()?.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// What a chat template adds when an answer and a new user message follow a user
    /// message, beyond their own tokens: the generation prompt, the end of the answer's turn
    /// and the next user's opening (carry-forward keeps a turn's length exact with it).
    /// Measured with two answers of different lengths, which must agree: a template that
    /// rewrites earlier turns by their content cannot keep a carried turn exact.
    pub fn turn_overhead(&self, vocab: &SafeVocab) -> Result<u64, FrameError> {
        let user = probe_text(vocab, 5, 1);
        let one = self.chat_ids(&json!([{"role": "user", "content": user}]), None)?;
        let mut seen = None;
        for (n, salt) in [(7, 2), (30, 4)] {
            let (answer, next) = (probe_text(vocab, n, salt), probe_text(vocab, 3, salt + 1));
            let three = self.chat_ids(
                &json!([
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": next},
                ]),
                None,
            )?;
            let own = self.content_ids(&answer)?.len() + self.content_ids(&next)?.len();
            let overhead = (three.len() as u64)
                .checked_sub((one.len() + own) as u64)
                .ok_or(FrameError::DropsHistory)?;
            if seen.is_some_and(|s| s != overhead) {
                return Err(FrameError::DropsHistory);
            }
            seen = Some(overhead);
        }
        Ok(seen.unwrap_or(0))
    }
}

/// Python's `strftime` for a Unix time (UTC), for the specifiers chat templates use (`%d %b
/// %Y`, `%B`, `%m`, `%y`, `%H`, `%M`, `%S`, `%-d`, `%%`); others are written as they are.
fn strftime(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let stamp = crate::sys::wall_start::utc_stamp(unix_secs); // yyyymmdd-hhmmss
    let field = |range: std::ops::Range<usize>| &stamp[range];
    let month = MONTHS[field(4..6).parse::<usize>().unwrap_or(1).clamp(1, 12) - 1];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(field(6..8)),
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                out.push_str(field(6..8).trim_start_matches('0'));
            }
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('m') => out.push_str(field(4..6)),
            Some('Y') => out.push_str(field(0..4)),
            Some('y') => out.push_str(field(2..4)),
            Some('H') => out.push_str(field(9..11)),
            Some('M') => out.push_str(field(11..13)),
            Some('S') => out.push_str(field(13..15)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `n` safe tokens from `salt` on: probes with different salts begin with different tokens.
fn probe_text(vocab: &SafeVocab, n: usize, salt: usize) -> String {
    (0..n)
        .map(|i| vocab.text((i * 7919 + salt) % vocab.len()))
        .collect()
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Why the prompt lengths of a wrapping cannot be made exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Rendering or tokenizing the probes failed.
    Render(String),
    /// The template adds a different number of tokens around different contents.
    NotFixed { one: u64, other: u64 },
    /// It adds as many, but ends different contents with different text.
    EndingDiffers,
    /// A content's tokens do not come back as they are after the template's opening.
    ContentChanged { tokens: usize, prompt: usize },
    /// An earlier answer does not come back whole in a longer conversation.
    DropsHistory,
}

impl From<String> for FrameError {
    fn from(message: String) -> FrameError {
        FrameError::Render(message)
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Render(message) => f.write_str(message),
            FrameError::NotFixed { one, other } => write!(
                f,
                "the chat template adds {one} tokens around one content and {other} around \
                 another: it does not wrap the content in a fixed text, so prompt lengths cannot \
                 be made exact"
            ),
            FrameError::EndingDiffers => f.write_str(
                "the chat template ends different contents with different text: it does not \
                 wrap the content in a fixed text, so prompt lengths cannot be made exact",
            ),
            FrameError::ContentChanged { tokens, prompt } => write!(
                f,
                "{tokens} content tokens are not found as they are after the template's opening \
                 in the {prompt} prompt tokens it makes of them: the template rewrites the \
                 content, so prompt lengths cannot be made exact (send --prompt-mode \
                 completions, or give a --tokenizer-config whose template passes content through)"
            ),
            FrameError::DropsHistory => f.write_str(
                "the chat template drops or rewrites part of an earlier answer: a \
                 carried-forward turn's length cannot be made exact (give --carry-forward off)",
            ),
        }
    }
}

/// The tokens a server puts before (`head`: the template's opening, a BOS) and after
/// (`tail`: the generation prompt) a prompt's content. Every prompt of one dialect shares the
/// head, so a prefix cache serves it to all but the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub head: u64,
    pub tail: u64,
}

impl Frame {
    pub fn total(&self) -> u64 {
        self.head + self.tail
    }
}

impl std::fmt::Debug for PromptCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCounter")
            .field("template", &self.template_path)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn strftime_writes_the_specifiers_templates_use() {
        // 2024-07-06 09:05:03 UTC
        let t = 1_720_256_703;
        assert_eq!(strftime("%d %b %Y", t), "06 Jul 2024");
        assert_eq!(strftime("%-d %B %y", t), "6 July 24");
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %% %q", t),
            "2024-07-06 09:05:03 % %q"
        );
    }
}
