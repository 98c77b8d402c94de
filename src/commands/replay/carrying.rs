//! Carry-forward's setup: what each endpoint's chat template adds around a carried answer,
//! and how each endpoint's answers are counted in place ([`crate::carry::seam`]), measured
//! once before the run.

use std::sync::Arc;

use super::setup::Prompts;
use crate::error::{Error, Result};
use crate::prompt::Wrapping;

/// Carry-forward: per synthesiser, what its chat template adds around an answer and the
/// next user message (0 for completions, and for a chat counted without a template).
pub fn turn_overheads(prompts: &Prompts) -> Result<Vec<u64>> {
    prompts
        .wrappings
        .iter()
        .zip(&prompts.counters)
        .zip(&prompts.synths)
        .map(|((wrapping, counter), synth)| match wrapping {
            Wrapping::Chat if counter.template_path().is_some() => counter
                .turn_overhead(synth.vocab())
                .map_err(|m| Error::Usage(format!("--carry-forward on: {m}"))),
            _ => Ok(0),
        })
        .collect()
}

/// Carry-forward: how each endpoint's answers are counted in place, so carried turns keep
/// their length exactly ([`crate::carry::seam`]); none when nothing is carried.
pub fn seams(prompts: &Prompts, carry: bool) -> Result<crate::carry::Seams> {
    if !carry || prompts.synths.is_empty() {
        return Ok(crate::carry::Seams::default());
    }
    let per_synth: Vec<Option<Arc<crate::carry::Seam>>> = prompts
        .synths
        .iter()
        .zip(&prompts.counters)
        .zip(&prompts.wrappings)
        .map(|((synth, counter), &wrapping)| {
            crate::carry::Seam::new(Arc::clone(counter), wrapping, synth.vocab())
                .map(|s| s.map(Arc::new))
                .map_err(|m| Error::Usage(format!("--carry-forward on: {m}")))
        })
        .collect::<Result<_>>()?;
    Ok(crate::carry::Seams(
        prompts
            .synth_of_endpoint
            .iter()
            .map(|&at| per_synth.get(at).cloned().flatten())
            .collect(),
    ))
}
