//! Which cores the sender and producer threads are pinned to (`--pin-cores`), and the
//! scheduling class of background threads.

use core_affinity::CoreId;

use crate::error::{Error, Result};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// One entry per sender; `None` leaves it unpinned.
    pub senders: Vec<Option<CoreId>>,
    /// Cores the producers are spread over round-robin; empty leaves them unpinned.
    pub producers: Vec<CoreId>,
    /// Said to the user when the threads outnumber the cores.
    pub warning: Option<String>,
}

/// Plans the placement of `senders` and `producers` threads on the machine's cores.
pub fn plan(spec: &str, senders: usize, producers: usize) -> Result<Placement> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    plan_on(spec, senders, producers, &cores)
}

fn plan_on(spec: &str, senders: usize, producers: usize, cores: &[CoreId]) -> Result<Placement> {
    let mut placement = Placement {
        senders: vec![None; senders],
        ..Placement::default()
    };
    if senders + producers > cores.len() && !cores.is_empty() {
        placement.warning = Some(format!(
            "{senders} sender + {producers} producer threads on {} cores: threads will share cores and send drift may grow",
            cores.len()
        ));
    }
    let list: Vec<CoreId> = match spec {
        "none" => return Ok(placement),
        // Senders on their own cores, from the last one down; producers on the rest.
        "auto" if cores.len() >= 2 => {
            let own = senders.min(cores.len() - 1);
            let mut list: Vec<CoreId> = cores[cores.len() - own..].iter().rev().copied().collect();
            list.extend_from_slice(&cores[..cores.len() - own]);
            list
        }
        "auto" => return Ok(placement),
        _ => parse_list(spec)?
            .into_iter()
            .map(|id| CoreId { id })
            .collect(),
    };
    if let Some(bad) = list
        .iter()
        .find(|c| !cores.is_empty() && !cores.iter().any(|k| k.id == c.id))
    {
        return Err(Error::Usage(format!(
            "--pin-cores: core {} does not exist on this machine",
            bad.id
        )));
    }
    for (slot, core) in placement.senders.iter_mut().zip(&list) {
        *slot = Some(*core);
    }
    let rest = &list[senders.min(list.len())..];
    placement.producers = if rest.is_empty() {
        Vec::new()
    } else {
        rest.to_vec()
    };
    Ok(placement)
}

/// Restricts the calling thread (and the threads it starts meanwhile) to `cores` until the
/// returned guard is dropped; nothing when the list is empty. The replay's main thread, which
/// collects and writes the records, moves off the senders' cores this way: on kernels that do
/// not preempt kernel code (PREEMPT_NONE), a sender's wake-up waits until the thread on its
/// core leaves the kernel.
pub fn pin_current_to(cores: &[CoreId]) -> PinnedUntilDrop {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for ids below CPU_SETSIZE, and
    // sched_{get,set}affinity read or fill it for the calling thread (pid 0).
    unsafe {
        let mut previous: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if cores.is_empty() || libc::sched_getaffinity(0, size, &mut previous) != 0 {
            return PinnedUntilDrop(None);
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for core in cores.iter().filter(|c| c.id < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(core.id, &mut set);
        }
        libc::sched_setaffinity(0, size, &set);
        PinnedUntilDrop(Some(previous))
    }
}

/// Gives the thread back the cores it had before [`pin_current_to`] (so that a later replay
/// in the same process, as `calibrate` runs them, starts from the same place).
pub struct PinnedUntilDrop(Option<libc::cpu_set_t>);

impl Drop for PinnedUntilDrop {
    fn drop(&mut self) {
        if let Some(previous) = &self.0 {
            // SAFETY: restores a set sched_getaffinity filled, for the calling thread.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), previous) };
        }
    }
}

/// Parses `0,2,4-7`.
fn parse_list(spec: &str) -> Result<Vec<usize>> {
    let bad = || {
        Error::Usage(format!(
            "--pin-cores {spec:?}: expected auto, none or a list such as 0,2,4-7"
        ))
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Lowers the calling thread to SCHED_IDLE: it runs only where nothing else would, so an
/// event loop wins every core it wants (Linux; a thread may always lower its own policy, but
/// not raise it again). Failure leaves the thread as it was.
pub fn run_only_when_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets the calling thread's policy (pid 0) from a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(n: usize) -> Vec<CoreId> {
        (0..n).map(|id| CoreId { id }).collect()
    }

    fn current_cores() -> Vec<usize> {
        // SAFETY: fills a zeroed cpu_set_t for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    #[test]
    fn pinning_the_current_thread_is_undone_by_its_guard() {
        let before = current_cores();
        let first = before[0];
        {
            let _pinned = pin_current_to(&[CoreId { id: first }]);
            assert_eq!(current_cores(), vec![first]);
        }
        assert_eq!(
            current_cores(),
            before,
            "a later replay starts from the same cores"
        );
        let _nothing = pin_current_to(&[]);
        assert_eq!(current_cores(), before);
    }

    #[test]
    fn auto_gives_senders_their_own_cores() {
        let p = plan_on("auto", 1, 1, &cores(2)).unwrap();
        assert_eq!(p.senders, vec![Some(CoreId { id: 1 })]);
        assert_eq!(p.producers, vec![CoreId { id: 0 }]);
        assert!(p.warning.is_none());
        let p = plan_on("auto", 2, 4, &cores(4)).unwrap();
        assert_eq!(
            p.senders,
            vec![Some(CoreId { id: 3 }), Some(CoreId { id: 2 })]
        );
        assert_eq!(p.producers, vec![CoreId { id: 0 }, CoreId { id: 1 }]);
        assert!(p.warning.is_some());
        assert_eq!(
            plan_on("auto", 1, 1, &cores(1)).unwrap().senders,
            vec![None]
        );
    }

    #[test]
    fn lists_and_errors() {
        let p = plan_on("1,0", 1, 2, &cores(2)).unwrap();
        assert_eq!(p.senders, vec![Some(CoreId { id: 1 })]);
        assert_eq!(p.producers, vec![CoreId { id: 0 }]);
        assert_eq!(parse_list("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert!(plan_on("5", 1, 1, &cores(2)).is_err());
        assert!(plan_on("x", 1, 1, &cores(2)).is_err());
        assert_eq!(
            plan_on("none", 1, 1, &cores(2)).unwrap().senders,
            vec![None]
        );
    }
}
