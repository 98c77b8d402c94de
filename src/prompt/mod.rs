//! Prompt synthesis for traces without text.
//!
//! A trace gives only `input_length` and block hash ids. We build a prompt of exactly that many
//! tokens in which equal hash ids give identical token blocks, so a server's prefix cache hits
//! where production's did. Two facts make it exact and fast (DESIGN-NOTES §2):
//! - tokens are drawn from a *boundary-stable* subset of the vocabulary ([`SafeVocab`]): pieces
//!   made of a space and lowercase ASCII letters that re-encode to themselves, so any
//!   concatenation re-encodes to the same ids, one per piece;
//! - the tokens of a block are a pure function of (seed, hash id, block size) ([`PromptSynth`]),
//!   so the tokenizer only runs at start-up and every host builds the same bytes.

mod synth;
mod vocab;

pub use synth::PromptSynth;
pub use vocab::{load_tokenizer, SafeVocab};
