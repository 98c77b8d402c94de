//! `--mock`: the built-in server, in-process on a free loopback port, told what the replay
//! measured of its prompts so that its counts stand for a server's.

use std::net::SocketAddr;
use std::sync::Arc;

use super::carrying::turn_overheads;
use super::setup::{Prompts, Say};
use crate::error::{Error, Result};
use crate::mock::{MockConfig, MockServer, PromptCounting};
use crate::plan::{ReplayPlan, Targets};
use crate::prompt::Wrapping;

/// The chat synthesiser's turn overhead, for the in-process mock; 0 where there is none or
/// the template cannot say (carry-forward then refuses to run, see [`turn_overheads`]).
fn chat_turn_overhead(prompts: &Prompts) -> u64 {
    let chat = prompts.wrappings.iter().position(|w| *w == Wrapping::Chat);
    chat.zip(turn_overheads(prompts).ok())
        .and_then(|(i, overheads)| overheads.get(i).copied())
        .unwrap_or(0)
}

/// `--mock`: the built-in server, in-process on a free loopback port.
/// `--mock-cache-blocks N`: its prefix cache holds N blocks of `block_size` words, the
/// trace's block size, so that its hits line up with the trace's hash ids.
pub fn start_mock(
    plan: &ReplayPlan,
    prompts: &Prompts,
    block_size: u32,
    say: &Say,
) -> Result<Option<MockServer>> {
    let Targets::Mock {
        ttft_ms,
        itl_ms,
        cache_blocks,
        date_offset_ms,
    } = plan.targets
    else {
        return Ok(None);
    };
    // The in-process mock counts words; it is told the template overheads measured above so
    // that its usage.prompt_tokens stands for what a server would count, carried-forward
    // turns included. Dataset text is not one word a token: then it counts with the
    // tokenizer, as a server does.
    let counting = match (&plan.prompt_dataset, prompts.counters.first()) {
        (Some(_), Some(counter)) => PromptCounting::Tokenizer(Arc::clone(counter)),
        _ => PromptCounting::Words {
            chat_overhead: prompts.chat_overhead,
            turn_overhead: chat_turn_overhead(prompts),
        },
    };
    let cfg = MockConfig {
        ttft_ns: crate::sys::clock::ms_to_ns(ttft_ms),
        itl_ns: crate::sys::clock::ms_to_ns(itl_ms),
        counting,
        prefix_cache: cache_blocks.map(|n| (n, block_size.max(1) as usize)),
        date_offset_ms,
        ..MockConfig::default()
    };
    let server = MockServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), cfg)
        .map_err(|e| Error::Run(format!("cannot start the mock: {e}")))?;
    say.say(format!("mock server on {}", server.addr()));
    Ok(Some(server))
}
