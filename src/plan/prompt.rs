//! How synthetic prompts are built (`--prompt-*`, `--block-size`, `--seed`), checked.

use std::path::PathBuf;

use crate::api::Api;
use crate::cli;
use crate::error::{Error, Result};
use crate::prompt::PromptMode;
use crate::prompt::{LengthOf, SynthOptions, Wrapping};
use crate::trace::Format;

/// How synthetic prompts are built.
#[derive(Clone, Debug, Default)]
pub struct PromptPlan {
    /// A file or directory: a model name given as `--tokenizer` is resolved already.
    pub tokenizer: Option<PathBuf>,
    /// The model and commit `--tokenizer ORG/NAME[@REV]` resolved to.
    pub tokenizer_model: Option<crate::prompt::hub::Snapshot>,
    pub tokenizer_config: Option<PathBuf>,
    pub length_of: LengthOf,
    /// `--thinking`.
    pub thinking: crate::prompt::Thinking,
    pub mode: PromptMode,
    /// Tokens per hash id; the format's default when not given.
    pub block_size: Option<u32>,
    pub seed: u64,
    /// `--fresh-prompts`: the salt mixed into `seed` (None: the seed as given).
    pub salt: Option<u64>,
    pub block_cache_mb: usize,
}

impl PromptPlan {
    /// What the server wraps around the content for this API and mode.
    pub fn wrapping(&self, api: Api) -> Result<Wrapping> {
        api.wrapping(self.mode).ok_or_else(|| {
            let able: Vec<String> = Api::sending(self.mode)
                .map(|a| format!("--api {a}"))
                .collect();
            Error::Usage(format!(
                "--prompt-mode {} needs {} ({api} cannot send it)",
                self.mode.name(),
                able.join(" or ")
            ))
        })
    }

    /// The synthesis options for this API and block size ([`crate::trace::block_size`]), or
    /// `None` without a tokenizer.
    pub fn synth_options(&self, api: Api, block_size: u32) -> Result<Option<SynthOptions>> {
        let wrapping = self.wrapping(api)?;
        Ok(self.tokenizer.as_ref().map(|t| SynthOptions {
            tokenizer: t.clone(),
            tokenizer_config: self.tokenizer_config.clone(),
            wrapping,
            length_of: self.length_of,
            seed: self.seed,
            block_size,
            thinking: self.thinking.switch(),
        }))
    }

    pub fn block_size(&self, format: Format) -> u32 {
        self.block_size.unwrap_or(format.default_block_size())
    }

    pub fn block_cache_bytes(&self) -> usize {
        self.block_cache_mb.saturating_mul(1 << 20)
    }

    pub(super) fn from_args(a: &cli::PromptArgs) -> Result<PromptPlan> {
        if a.block_size == Some(0) {
            return Err(Error::Usage("--block-size must be at least 1".into()));
        }
        let (tokenizer, tokenizer_model) = match &a.tokenizer {
            Some(spec) => {
                let (path, snapshot) = crate::prompt::hub::resolve(spec)?;
                (Some(path), snapshot)
            }
            None => (None, None),
        };
        if let Some(config) = a.tokenizer_config.as_deref().filter(|p| !p.is_file()) {
            return Err(Error::Usage(format!(
                "--tokenizer-config {}: no such file (give the model's tokenizer_config.json)",
                config.display()
            )));
        }
        Ok(PromptPlan {
            tokenizer,
            tokenizer_model,
            tokenizer_config: a.tokenizer_config.clone(),
            length_of: a.input_length_of,
            thinking: a.thinking,
            mode: a.prompt_mode,
            block_size: a.block_size,
            seed: a.seed,
            salt: None,
            block_cache_mb: a.block_cache_mb,
        })
    }
}
