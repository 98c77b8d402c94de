//! Prompt synthesis for traces without text.
//!
//! A trace gives only `input_length` and block hash ids. We build a prompt of exactly that many
//! tokens in which equal hash ids give identical token blocks, so a server's prefix cache hits
//! where production's did. Three facts make it exact and fast (DESIGN-NOTES §2):
//! - tokens are drawn from a *boundary-stable* subset of the vocabulary ([`SafeVocab`]): pieces
//!   made of a space and lowercase ASCII letters that re-encode to themselves, so any
//!   concatenation re-encodes to the same ids, one per piece;
//! - the tokens of a block are a pure function of (seed, hash id, block size) ([`PromptSynth`]),
//!   so the tokenizer only runs at start-up, every host builds the same bytes, and a block is
//!   rendered once and reused from a bounded [`BlockCache`];
//! - what the server adds around the content (chat template, special tokens) is measured once
//!   with the real template and tokenizer ([`PromptCounter`]) and taken off the content.

pub mod analysis;
mod cache;
pub mod dataset;
pub mod hub;
mod synth;
mod template;
pub mod verify;
mod vocab;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use cache::BlockCache;
pub use synth::{PromptSynth, Rendering};
pub use template::{ChatTemplate, Frame, FrameError, PromptCounter, Wrapping};
pub use vocab::{load_tokenizer, SafeVocab};

use crate::error::{Error, Result};

crate::choices! {
    /// Which count `input_length` is (`--input-length-of`).
    #[derive(Default)]
    pub enum LengthOf {
        /// The prompt as the server counts it (`usage.prompt_tokens`), template included.
        #[default]
        Prompt = "prompt",
        /// The synthetic content alone; the server's count adds its template.
        Content = "content",
    }
}

crate::choices! {
    /// `--prompt-mode`.
    #[derive(Default)]
    pub enum PromptMode {
        #[default]
        Text = "text",
        TokenIds = "token-ids",
    }
}

crate::choices! {
    /// `--thinking`: the chat template's reasoning switch (`enable_thinking`).
    #[derive(Default)]
    pub enum Thinking {
        /// The template's own default; nothing is sent.
        #[default]
        Auto = "auto",
        /// `enable_thinking` true, in the count and in `chat_template_kwargs`.
        On = "on",
        /// `enable_thinking` false, in the count and in `chat_template_kwargs`.
        Off = "off",
    }
}

impl Thinking {
    /// The value of `enable_thinking`, when set.
    pub fn switch(self) -> Option<bool> {
        match self {
            Thinking::Auto => None,
            Thinking::On => Some(true),
            Thinking::Off => Some(false),
        }
    }
}

crate::choices! {
    /// Where prompt text comes from (`--prompt-source`).
    #[derive(Default)]
    pub enum PromptSource {
        #[default]
        Synthetic = "synthetic",
        Dataset = "dataset",
    }
}

/// Everything prompt synthesis is built from.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub tokenizer: PathBuf,
    pub tokenizer_config: Option<PathBuf>,
    pub wrapping: Wrapping,
    pub length_of: LengthOf,
    pub seed: u64,
    pub block_size: u32,
    /// `enable_thinking` for the chat template, when set.
    pub thinking: Option<bool>,
}

/// The `tokenizer.json` that `spec` names: the file, the one in a directory, or the one of
/// a model in the local Hugging Face cache.
pub fn tokenizer_file(spec: &Path) -> Result<PathBuf> {
    let (path, _) = hub::resolve(spec)?;
    let file = if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path
    };
    if !file.is_file() {
        return Err(Error::Tokenizer {
            path: file,
            message: "no such file (give a tokenizer.json, a directory holding one, or ORG/NAME of a model in the local Hugging Face cache)".into(),
        });
    }
    Ok(file)
}

/// A ready synthesiser, with the counter that measured its overhead (kept for verification).
pub struct Prepared {
    pub synth: Arc<PromptSynth>,
    pub counter: PromptCounter,
    /// One line for the user: tokenizer, table size, overhead and where it came from.
    pub description: String,
    /// A warning to show, e.g. chat requests without a template to count them.
    pub warning: Option<String>,
    /// For run.json: the analysed files' digests, and whether they came from the cache.
    pub analysis: serde_json::Value,
}

/// Loads the tokenizer, finds its stable tokens and measures the server-side overhead (or
/// reads what an earlier run found from the analysis cache, see [`analysis`]).
pub fn prepare(opts: &SynthOptions) -> Result<Prepared> {
    let started = std::time::Instant::now();
    let file = tokenizer_file(&opts.tokenizer)?;
    let cache = analysis::cache_dir(|k| std::env::var(k).ok());
    let (analysis, counter) = analysis::load_or_make(
        &file,
        opts.tokenizer_config.as_deref(),
        opts.thinking,
        cache.as_deref(),
    )?;
    let fail = |path: &Path, message: String| Error::Tokenizer {
        path: path.to_path_buf(),
        message,
    };
    let mut warning = None;
    // The frame is measured whichever count input_length is: the expected prefix-cache hits
    // include the head the server shares between prompts.
    let frame = match analysis.frame(opts.wrapping) {
        Ok(Some(frame)) => frame,
        Ok(None) => {
            if opts.length_of == LengthOf::Prompt {
                let missing = match &opts.tokenizer_config {
                    Some(config) => format!(
                        "--tokenizer-config {} holds no chat template (`chat_template`); give the \
                         model's tokenizer_config.json that does, or put its chat_template.jinja \
                         beside it",
                        config.display()
                    ),
                    None => format!(
                        "no chat template found beside {} (give --tokenizer-config)",
                        file.display()
                    ),
                };
                warning = Some(format!(
                    "{missing}: the server's prompt_tokens will exceed input_length by its template"
                ));
            }
            Frame::default()
        }
        Err(m) => return Err(fail(counter.template_path().unwrap_or(&file), m)),
    };
    let overhead = match opts.length_of {
        LengthOf::Prompt => frame.total(),
        LengthOf::Content => 0,
    };
    let rendering = match opts.wrapping {
        Wrapping::TokenIds => Rendering::TokenIds,
        Wrapping::Chat | Wrapping::Completion => Rendering::Text,
    };
    let took = match &analysis.source {
        analysis::Source::Cached(_) => "read from the analysis cache".to_string(),
        analysis::Source::Analysed(kept) => format!(
            "analysed{}",
            kept.as_ref()
                .map(|e| format!(", kept in {}", e.display()))
                .unwrap_or_default()
        ),
    };
    let description = format!(
        "tokenizer {}: {} boundary-stable tokens, {} tokens of server overhead{} ({took}, {:.2} s)",
        file.display(),
        analysis.vocab.len(),
        overhead,
        counter
            .template_path()
            .filter(|_| opts.wrapping == Wrapping::Chat)
            .map(|p| format!(" (chat template of {})", p.display()))
            .unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    let described = analysis.describe();
    let synth = PromptSynth::new(
        Arc::new(analysis.vocab),
        opts.seed,
        opts.block_size,
        rendering,
    )
    .with_overhead(overhead)
    .with_frame(frame);
    Ok(Prepared {
        synth: Arc::new(synth),
        counter,
        description,
        warning,
        analysis: described,
    })
}
