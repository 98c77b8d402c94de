//! The operating system: the run clock and timers, core pinning and scheduling, descriptor
//! and memory limits, raw socket calls and kernel receive timestamps, signals, and civil
//! time. Every `unsafe` block of the crate is here; the engine above calls safe functions.

pub mod affinity;
pub mod clock;
pub mod limits;
pub mod rx_stamp;
pub mod small_file;
pub mod sockopt;
pub mod stop;
pub mod wall_start;

/// This machine's name (None where the kernel does not say): shards on one host share a
/// clock, so their start instants compare without `--ntp`.
pub fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

/// How busy this machine is: its cores and its 1-minute load average (null where the kernel
/// does not say), for the verdict to tell a busy machine from a slow client.
pub fn host_load() -> serde_json::Value {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    serde_json::json!({"cpus": cpus, "load_avg_1m": load})
}
