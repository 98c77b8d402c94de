//! The operating system: the run clock and timers, core pinning and scheduling, descriptor
//! and memory limits, raw socket calls and kernel receive timestamps, signals, and civil
//! time. Every `unsafe` block of the crate is here; the engine above calls safe functions.

pub mod affinity;
pub mod clock;
pub mod limits;
pub mod rx_stamp;
pub mod sockopt;
pub mod stop;
pub mod wall_start;
