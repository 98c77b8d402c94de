//! Shards: one trace replayed by K hosts, each sending its own share of the one effective
//! schedule ([`crate::schedule`]) from a common start ([`crate::sys::wall_start`]), merged exactly
//! afterwards (`llmreplay merge`).
//!
//! Every host reads the same trace, shapes it the same way and builds byte-identical prompts;
//! a shard only leaves out the records that are not its own. Which records are its own must
//! come out the same on every host without talking to the others, so it is a pure function of
//! the record (and of the router's pick, itself the same everywhere): a conversation's root
//! hashed with FNV-1a (stable across builds and machines, unlike std's hasher), plain records
//! round-robin by index, or the endpoint the record is routed to.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use serde_json::{json, Value};

use crate::digest::fnv1a;
use crate::error::Result;
use crate::fleet::Router;
use crate::schedule::{Shaping, Slot};
use crate::trace::{OrderedReader, TraceRecord};

crate::choices! {
    /// How records are given to shards.
    #[derive(Default)]
    pub enum ShardBy {
        /// A conversation (Bailian chain, Mooncake `session_id`) stays whole on one shard, chosen
        /// by a stable hash of its root; records outside any conversation go round-robin by index.
        #[default]
        Session = "session",
        /// Shard I drives endpoints I, I+N, I+2N, ... and sends the records routed to them (hosts
        /// placed near their instance group).
        Endpoint = "endpoint",
    }
}

/// This process's place among the shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    pub count: u32,
    pub by: ShardBy,
}

/// The most shards one run has: what `watch` and `merge` will read heartbeats for.
pub const MAX_SHARDS: u32 = 65_536;

/// The environment variables a shard's index and count may come from.
pub const INDEX_VARS: [&str; 2] = ["JOB_COMPLETION_INDEX", "SLURM_PROCID"];

impl Shard {
    /// `--shard I/N`, `--shard auto` and `--shard-count N`, resolved against the environment
    /// (`env` looks a variable up): Kubernetes Indexed Jobs set `JOB_COMPLETION_INDEX` (the
    /// count is given once, with `--shard-count`), Slurm sets `SLURM_PROCID` and
    /// `SLURM_NTASKS`. None when no option asks for shards.
    pub fn resolve(
        spec: Option<&str>,
        count: Option<u32>,
        by: ShardBy,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>, String> {
        let (index, n) = match (spec, count) {
            (None, None) => return Ok(None),
            (Some(spec), _) if spec != "auto" => {
                let (i, n) = spec
                    .split_once('/')
                    .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)))
                    .ok_or_else(|| {
                        format!("--shard {spec:?}: expected I/N (e.g. 0/4, 0-based) or auto")
                    })?;
                if count.is_some_and(|c| c != n) {
                    return Err(format!(
                        "--shard {spec} and --shard-count {} disagree on the count",
                        count.unwrap_or_default()
                    ));
                }
                (i, n)
            }
            _ => from_env(count, &env)?,
        };
        if n == 0 || index >= n {
            return Err(format!(
                "shard {index} of {n}: the index must be below the count (0-based, 0..{n})"
            ));
        }
        if n > MAX_SHARDS {
            return Err(format!(
                "shard {index} of {n}: a run has at most {MAX_SHARDS} shards"
            ));
        }
        Ok(Some(Shard {
            index,
            count: n,
            by,
        }))
    }

    /// `2/3` (0-based index / count), as the plan line and merge name it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.index, self.count)
    }
}

/// The index (and count) from a Kubernetes Indexed Job or a Slurm task.
fn from_env(
    count: Option<u32>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(u32, u32), String> {
    let number = |var: &str| -> Result<Option<u32>, String> {
        env(var)
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("${var}={v:?} is not a number"))
            })
            .transpose()
    };
    if let Some(index) = number("JOB_COMPLETION_INDEX")? {
        let n = count.ok_or(
            "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job): give the number of \
             shards once with --shard-count N (the Job's completions)",
        )?;
        return Ok((index, n));
    }
    if let Some(index) = number("SLURM_PROCID")? {
        let tasks = number("SLURM_NTASKS")?;
        let n = match (count, tasks) {
            (Some(c), Some(t)) if c != t => {
                return Err(format!(
                    "--shard-count {c} but SLURM_NTASKS={t}: one shard per Slurm task"
                ))
            }
            (Some(c), _) => c,
            (None, Some(t)) => t,
            (None, None) => {
                return Err("SLURM_PROCID is set but not SLURM_NTASKS: give --shard-count N".into())
            }
        };
        return Ok((index, n));
    }
    Err(format!(
        "--shard auto / --shard-count: none of {} is set; give --shard I/N",
        INDEX_VARS.join(", ")
    ))
}

/// Decides which shard owns each record, fed every record the schedule sends, in order (a
/// Bailian child finds its root through the chats seen before it).
#[derive(Default)]
pub struct Assigner {
    count: u32,
    by: ShardBy,
    /// Bailian chat id -> its conversation root's hash.
    chats: HashMap<i64, u64>,
}

impl Assigner {
    pub fn new(count: u32, by: ShardBy) -> Assigner {
        Assigner {
            count: count.max(1),
            by,
            chats: HashMap::new(),
        }
    }

    /// The shard of `record` of `--loop` pass `pass`, routed to `endpoint`.
    pub fn owner(&mut self, record: &TraceRecord, pass: u64, endpoint: u32) -> u32 {
        self.place(record, pass, endpoint).0
    }

    /// The shard, and the hash of the record's conversation root (None outside any).
    fn place(&mut self, record: &TraceRecord, pass: u64, endpoint: u32) -> (u32, Option<u64>) {
        let n = u64::from(self.count);
        let root = self.root_hash(record, pass);
        let own = match (self.by, root) {
            (ShardBy::Endpoint, _) => u64::from(endpoint) % n,
            (ShardBy::Session, Some(h)) => h % n,
            (ShardBy::Session, None) => record.index % n,
        };
        (own as u32, root)
    }

    /// The hash of the record's conversation root (with its pass: each pass's conversations
    /// are new ones), None outside any conversation.
    fn root_hash(&mut self, record: &TraceRecord, pass: u64) -> Option<u64> {
        let ids = &record.ids;
        let hash = |kind: &str, id: &str| fnv1a(format!("{kind}:{id}/{pass}").as_bytes());
        if let Some(chat) = ids.chat_id {
            let root = ids
                .parent_chat_id
                .filter(|p| *p >= 0)
                .and_then(|p| self.chats.get(&p).copied())
                .unwrap_or_else(|| hash("chat", &chat.to_string()));
            self.chats.insert(chat, root);
            return Some(root);
        }
        ids.session_id.as_deref().map(|s| hash("session", s))
    }

    /// `--loop`: chat ids repeat in the next pass as new conversations.
    pub fn new_pass(&mut self) {
        self.chats.clear();
    }
}

/// A shard's filter in the producers: the assigner and the index kept.
pub struct ShardFilter {
    pub shard: Shard,
    assigner: Assigner,
}

impl ShardFilter {
    pub fn new(shard: Shard) -> ShardFilter {
        ShardFilter {
            shard,
            assigner: Assigner::new(shard.count, shard.by),
        }
    }

    pub fn keeps(&mut self, record: &TraceRecord, pass: u64, endpoint: u32) -> bool {
        self.assigner.owner(record, pass, endpoint) == self.shard.index
    }

    pub fn new_pass(&mut self) {
        self.assigner.new_pass();
    }
}

/// Every shard's share of the schedule, counted before the start (the plan line and run.json
/// say them, so an uneven split is seen before it runs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shares {
    pub records: Vec<u64>,
    pub conversations: Vec<u64>,
    /// First and last planned send of each shard, ns after the start.
    pub first_ns: Vec<Option<u64>>,
    pub last_ns: Vec<u64>,
    /// Conversations whose turns fall on more than one shard (only `--shard-by endpoint`
    /// with a route that does not keep conversations together).
    pub split_conversations: u64,
}

impl Shares {
    /// Reads the trace as the producers will (`open` gives a fresh reader per `--loop`
    /// pass), shaped, routed and shared out as they do.
    pub fn count(
        mut open: impl FnMut() -> Result<OrderedReader>,
        shaping: &Shaping,
        mut router: Router,
        shard: Shard,
    ) -> Result<Shares> {
        let n = shard.count as usize;
        let mut shares = Shares {
            records: vec![0; n],
            conversations: vec![0; n],
            first_ns: vec![None; n],
            last_ns: vec![0; n],
            split_conversations: 0,
        };
        let mut assigner = Assigner::new(shard.count, shard.by);
        let mut shaper = shaping.shaper();
        // Conversation root -> its first shard, and whether it was found split.
        let mut roots: HashMap<u64, (u32, bool)> = HashMap::new();
        'passes: for pass in 0..shaping.passes {
            assigner.new_pass();
            let mut reader = open()?;
            while let Some((record, ts)) = reader.next_record()? {
                let scheduled_ns = match shaper.place(pass, ts) {
                    Slot::Skip => continue,
                    Slot::End(_) => break 'passes,
                    Slot::Send { scheduled_ns, .. } => scheduled_ns,
                };
                let endpoint = router.pick(&record);
                let (own, root) = assigner.place(&record, pass, endpoint);
                let i = own as usize;
                shares.records[i] += 1;
                shares.first_ns[i].get_or_insert(scheduled_ns);
                shares.last_ns[i] = scheduled_ns;
                let Some(root) = root else { continue };
                match roots.entry(root) {
                    Entry::Vacant(v) => {
                        v.insert((own, false));
                        shares.conversations[i] += 1;
                    }
                    Entry::Occupied(mut o) => {
                        let (first, split) = o.get_mut();
                        if *first != own && !*split {
                            *split = true;
                            shares.split_conversations += 1;
                        }
                    }
                }
            }
        }
        Ok(shares)
    }

    /// What run.json says of this shard and the whole.
    pub fn to_json(&self, shard: Shard) -> Value {
        let i = shard.index as usize;
        json!({
            "index": shard.index,
            "count": shard.count,
            "by": shard.by,
            "records": self.records[i],
            "conversations": self.conversations[i],
            "records_whole": self.records.iter().sum::<u64>(),
            "conversations_whole": self.conversations.iter().sum::<u64>(),
            "records_per_shard": self.records,
            "split_conversations": self.split_conversations,
        })
    }

    /// The plan line's part: this shard's share, and every shard's.
    pub fn describe(&self, shard: Shard) -> String {
        let i = shard.index as usize;
        let whole: u64 = self.records.iter().sum();
        let by = match shard.by {
            ShardBy::Session => "by conversation",
            ShardBy::Endpoint => "by endpoint",
        };
        let mut text = format!(
            "shard {} {by}: this host sends {} of the {whole} records ({:.1} %; shards {})",
            shard.name(),
            self.records[i],
            100.0 * self.records[i] as f64 / whole.max(1) as f64,
            self.records
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join("/"),
        );
        let conversations: u64 = self.conversations.iter().sum();
        if conversations > 0 {
            text.push_str(&format!(
                ", {} of {conversations} conversations ({})",
                self.conversations[i],
                match self.split_conversations {
                    0 => "none split".to_string(),
                    n => format!("{n} split across shards"),
                }
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceIds;

    fn rec(index: u64, ids: TraceIds) -> TraceRecord {
        TraceRecord::for_test(index, ids)
    }

    #[test]
    fn shard_options_and_environment() {
        let none = |_: &str| None;
        let by = ShardBy::Session;
        assert_eq!(Shard::resolve(None, None, by, none), Ok(None));
        let s = Shard::resolve(Some("1/3"), None, by, none)
            .unwrap()
            .unwrap();
        assert_eq!((s.index, s.count, s.name()), (1, 3, "1/3".to_string()));
        for bad in ["3/3", "1", "a/b", "0/0"] {
            assert!(Shard::resolve(Some(bad), None, by, none).is_err(), "{bad}");
        }
        assert!(Shard::resolve(Some("1/3"), Some(4), by, none)
            .unwrap_err()
            .contains("disagree"));
        let k8s = |v: &str| (v == "JOB_COMPLETION_INDEX").then(|| "2".to_string());
        assert_eq!(
            Shard::resolve(None, Some(4), by, k8s)
                .unwrap()
                .unwrap()
                .index,
            2
        );
        assert!(Shard::resolve(Some("auto"), None, by, k8s)
            .unwrap_err()
            .contains("--shard-count"));
        let slurm = |v: &str| match v {
            "SLURM_PROCID" => Some("1".to_string()),
            "SLURM_NTASKS" => Some("2".to_string()),
            _ => None,
        };
        let s = Shard::resolve(Some("auto"), None, by, slurm)
            .unwrap()
            .unwrap();
        assert_eq!((s.index, s.count), (1, 2));
        assert!(Shard::resolve(Some("auto"), Some(3), by, slurm).is_err());
        assert!(Shard::resolve(Some("auto"), None, by, none)
            .unwrap_err()
            .contains("JOB_COMPLETION_INDEX"));
    }

    #[test]
    fn conversations_stay_whole_and_plain_records_go_round_robin() {
        let chat = |c: i64, p: i64| TraceIds {
            chat_id: Some(c),
            parent_chat_id: Some(p),
            ..TraceIds::default()
        };
        let mut a = Assigner::new(3, ShardBy::Session);
        // Chains 100 -> 101 -> 102 and 200 -> 201, interleaved.
        let owners: Vec<u32> = [
            chat(100, -1),
            chat(200, -1),
            chat(101, 100),
            chat(201, 200),
            chat(102, 101),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, ids)| a.owner(&rec(i as u64, ids), 0, 0))
        .collect();
        assert_eq!(owners[0], owners[2]);
        assert_eq!(owners[2], owners[4]);
        assert_eq!(owners[1], owners[3]);
        // The same on a fresh assigner (another host).
        let mut b = Assigner::new(3, ShardBy::Session);
        assert_eq!(b.owner(&rec(0, chat(100, -1)), 0, 0), owners[0]);
        let plain: Vec<u32> = (0..6)
            .map(|i| a.owner(&rec(i, TraceIds::default()), 0, 0))
            .collect();
        assert_eq!(plain, [0, 1, 2, 0, 1, 2]);
        // Many conversations spread over every shard.
        let mut seen = [0u32; 3];
        for c in 0..300 {
            seen[a.owner(&rec(c, chat(1000 + c as i64, -1)), 0, 0) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 60), "{seen:?}");
        let mut e = Assigner::new(2, ShardBy::Endpoint);
        assert_eq!(
            (0..4)
                .map(|ep| e.owner(&rec(0, TraceIds::default()), 0, ep))
                .collect::<Vec<_>>(),
            [0, 1, 0, 1]
        );
    }
}
