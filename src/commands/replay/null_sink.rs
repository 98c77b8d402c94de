//! `replay --null-sink` (hidden, for `scripts/bench-producers.sh`): the replay's producers
//! into senders that send nothing, and what the producers did.

use super::{expected_model, join_producers, mock, setup, start, time_zero, Say};
use crate::error::{Error, Result};
use crate::pipeline::Produced;
use crate::plan::ReplayPlan;

/// `--null-sink` (hidden): the producer pipeline's benchmark. Sets the run up as a replay
/// does, with senders that send nothing, and says what the producers did (nothing is
/// measured or written but run.json).
pub fn null_sink(plan: &ReplayPlan) -> Result<()> {
    let say = Say(plan.quiet);
    let trace = setup::scan_trace(plan, &say)?;
    let prompts = setup::prepare_prompts(plan, &setup::endpoint_apis(plan), &trace, &say)?;
    let mock = mock::start_mock(plan, &prompts, trace.stats.block_size, &say)?;
    let fleet = setup::connect(plan, mock.as_ref())?;
    let out = setup::prepare_output(plan, &trace)?;
    let starting = time_zero::Starting::default();
    let expected = expected_model(plan);
    let stages = start(
        plan, &trace, prompts, &fleet, &out, None, &expected, starting, &say,
    )?;
    let producers = stages.producers.len();
    let produced = join_producers(stages.producers)?;
    for s in stages.senders {
        s.join()
            .map_err(|_| Error::Run("a sender thread panicked".into()))?
            .map_err(|e| Error::Run(format!("sender: {e}")))?;
    }
    say_produced(producers, &produced);
    Ok(())
}

/// `--null-sink`: the producer pipeline's rate, and its serial share (the time the producers
/// held the reader's lock, where records are decided in trace order), one line on stdout.
fn say_produced(producers: usize, p: &Produced) {
    let wall_s = p.wall_ns as f64 / 1e9;
    let busy = (p.wall_ns * producers as u64).max(1) as f64;
    println!(
        "null sink: {} requests from {producers} producers in {wall_s:.3} s: {:.0} requests/s; \
         lock held {:.1} % of the producers' time (serial share {:.3}), waited for {:.1} %",
        p.built,
        p.built as f64 / wall_s.max(1e-9),
        100.0 * p.locked_ns as f64 / busy,
        p.locked_ns as f64 / p.wall_ns.max(1) as f64,
        100.0 * p.waited_ns as f64 / busy,
    );
}
