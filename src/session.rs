//! Conversations (`--session-mode after-parent`): which earlier record a turn answers.
//!
//! Bailian records name their parent (`parent_chat_id`, -1 for a root); Mooncake records of
//! one `session_id` are turns in file order, each the child of the one before. A child waits
//! for its parent's end (on the sender that runs the whole conversation, see
//! [`crate::sender`]), then for the think time: `--think-time`, else the record's `delay` (ms;
//! a capture writes the wait it saw after the parent's answer), else the trace's
//! start-to-start gap (the public traces give no service time to subtract).
//!
//! A Bailian child's hash ids already hold the conversation's history, so its prompt is built
//! from them alone (the shared blocks hit the prefix cache); nothing is prepended.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::error::Result;
use crate::trace::{DagIds, OrderedReader, TraceRecord};

crate::choices! {
    /// `--carry-forward`: what a turn's prompt holds of its parent's.
    #[derive(Default)]
    pub enum CarryForward {
        /// As the format's origin does: synthetic turns carried, recorded messages threaded
        /// live where the format threads them (agentic traces, AIPerf's `message_mode:
        /// delta`), else sent verbatim.
        #[default]
        Auto = "auto",
        /// Every turn: its parent's prompt and actual answer, then its own tokens.
        On = "on",
        /// No turn: each as recorded (a delta turn with its recorded history).
        Off = "off",
    }
}

impl CarryForward {
    /// Whether synthetic turns carry their parent's prompt and answer.
    pub fn carries(self) -> bool {
        self != CarryForward::Off
    }

    /// Whether a recorded-messages turn is threaded with its parent's live answer.
    pub fn threads_live(self, ids: &crate::trace::TraceIds) -> bool {
        match self {
            CarryForward::On => true,
            CarryForward::Off => false,
            CarryForward::Auto => ids.dag.is_some() || ids.delta,
        }
    }
}

/// Conversation options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionPlan {
    /// `--carry-forward` (in after-parent mode; `off` in timestamp mode).
    pub carry_forward: CarryForward,
    pub require_cache_report: bool,
    /// `--max-active-sessions`.
    pub max_active: Option<usize>,
    /// `--measure-from`.
    pub measure_from: MeasureFrom,
}

impl Default for SessionPlan {
    fn default() -> Self {
        SessionPlan {
            carry_forward: CarryForward::Auto,
            require_cache_report: false,
            max_active: None,
            measure_from: MeasureFrom::Start,
        }
    }
}

crate::choices! {
    /// Where each conversation's measurement starts.
    #[derive(Default)]
    pub enum MeasureFrom {
        /// Every turn is measured.
        #[default]
        Start = "start",
        /// A turn drawn inside each conversation, between a quarter and three quarters of
        /// its turns (from `--seed` and the conversation's id, the same on every host): the
        /// turns before it run as an unmeasured warmup that fills the caches, as AgentX
        /// measures agents from mid-trajectory.
        Mid = "mid",
    }
}

/// `--measure-from mid`: each conversation's first measured turn (0-based), by its root.
pub type MeasureCuts = HashMap<String, u32>;

/// Where `--measure-from mid` draws a conversation's first measured turn: within this share
/// of its turns (AgentX's `trajectory-start` ratios).
const MID_FROM: f64 = 0.25;
const MID_TO: f64 = 0.75;
/// The random stream of those draws ("mid").
const MID_STREAM: u64 = 0x6d_6964;

/// `--measure-from mid`: one read of the trace; each conversation's first measured turn is
/// drawn among its N turns (floor of N times a fraction in [`MID_FROM`], [`MID_TO`]) from a
/// hash of `seed` and its id:
/// no state, so every shard and every `--loop` pass draws the same). By turn, not by time:
/// a closed-loop trace (TraceLab) gives only a conversation's arrival.
pub fn measure_cuts(mut reader: OrderedReader, seed: u64) -> Result<MeasureCuts> {
    let mut tracker = SessionTracker::new(SessionMode::AfterParent, None, 1.0);
    let mut turns: HashMap<String, u32> = HashMap::new();
    while let Some((record, _)) = reader.next_record()? {
        if let Some(link) = tracker.link(&record, 0) {
            let n = turns.entry(link.root).or_insert(0);
            *n = (*n).max(link.turn + 1);
        }
    }
    Ok(turns
        .into_iter()
        .map(|(root, n)| {
            // The id's hash, mixed (FNV's high bits barely move between ids that differ at
            // the end, as `s1` and `s2` do), then a uniform fraction.
            let id = crate::digest::fnv1a(root.as_bytes());
            let fraction = crate::rng::SplitMix64::new(seed, MID_STREAM, id).open01();
            // AgentX's trajectory start: between a quarter and three quarters of the way in.
            let at = MID_FROM + (MID_TO - MID_FROM) * fraction;
            (root, (at * f64::from(n)) as u32)
        })
        .collect())
}

crate::choices! {
    /// How turns of a conversation are timed.
    #[derive(Default)]
    pub enum SessionMode {
        /// A turn leaves at the later of its own time and its parent's end plus the think time.
        #[default]
        AfterParent = "after-parent",
        /// Every record at its own timestamp, answered or not (the stateless replay).
        Timestamp = "timestamp",
    }
}

/// A turn's place in its conversation, carried with its request to the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLink {
    /// The conversation: its root's chat id (Bailian) or its `session_id` (Mooncake).
    pub root: String,
    /// 0 for the root.
    pub turn: u32,
    /// The record this turn answers (None for a root).
    pub parent_index: Option<u64>,
    /// More records it waits for: a join of sub-agents (empty in a chain).
    pub joins: Vec<u64>,
    /// Its agent in a task graph (a sub-agent's name; None in a plain conversation).
    pub branch: Option<String>,
    /// A sub-agent's first turn: a context of its own, nothing to carry.
    pub fresh: bool,
    /// Its children that carry its prompt and answer forward (1 in a chain; more where
    /// forked branches all continue it).
    pub heirs: u32,
    /// Wait after the parent's end, ns of run time.
    pub think_ns: u64,
    /// The tokens of its prompt that production's server held when it came: its parent's
    /// prompt and answer (trace lengths), or the trace's own prefix (TraceLab).
    pub planned_prefix: Option<u64>,
    /// Its prompt begins with its parent's whole prompt and answer, so carry-forward puts
    /// them there; false where the trace's prefix keeps less (a compacted context).
    pub keeps_parent: bool,
    /// The conversation's last turn in the trace ([`last_turns`]): its end ends the
    /// conversation (its `--max-active-sessions` place is freed; it counts as finished).
    pub last: bool,
    /// It leaves at its own timestamp, not after its parent: a recorded-messages turn sent
    /// verbatim (AIPerf's history mode), whose history holds the recorded answer, not the
    /// live one.
    pub at_own_time: bool,
}

impl SessionLink {
    /// Every turn it waits for: its parent, then the branches it joins.
    pub fn waited_for(&self) -> impl Iterator<Item = u64> + '_ {
        self.parent_index
            .into_iter()
            .chain(self.joins.iter().copied())
    }

    /// Which of `n` senders runs this conversation (all its turns on one).
    pub fn sender(&self, n: usize) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.root.hash(&mut h);
        (h.finish() % n.max(1) as u64) as usize
    }
}

/// A turn on its way: its link, and once its parent has ended, how that moved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionTurn {
    pub link: SessionLink,
    /// When the parent's end released it (run ns).
    pub released_ns: Option<u64>,
    /// The parent failed or was cancelled; the turn is sent all the same.
    pub parent_failed: bool,
    /// Its parent's prompt and answer were carried into its prompt: their tokens.
    pub carried_tokens: Option<u64>,
    /// Why they were not (with carry-forward on).
    pub not_carried: Option<&'static str>,
    /// The hits production's server had ([`crate::pipeline::RequestBuilder::planned_cached`]).
    pub planned_cached_tokens: Option<u64>,
    /// A first turn held back by `--max-active-sessions`: how long (run ns).
    pub session_wait_ns: Option<u64>,
}

impl SessionTurn {
    /// A turn as the producer builds it: nothing has happened to it yet.
    pub fn new(link: SessionLink) -> SessionTurn {
        SessionTurn {
            link,
            released_ns: None,
            parent_failed: false,
            carried_tokens: None,
            not_carried: None,
            planned_cached_tokens: None,
            session_wait_ns: None,
        }
    }
}

/// A conversation's latest turn seen, or a Bailian chat.
#[derive(Clone)]
struct Seen {
    index: u64,
    scheduled_ns: u64,
    root: String,
    turn: u32,
    /// Its input and output lengths: the context its child finds (trace tokens).
    context: u64,
    /// TraceLab's wait after its answer before the next turn (run ns).
    wait_after_ns: Option<u64>,
}

/// Links records to their parents, in trace order (run under the producers' reader lock).
#[derive(Default)]
pub struct SessionTracker {
    mode: SessionMode,
    think_override_ns: Option<u64>,
    /// `--time-scale`: a record's `delay` (trace ms) is divided by it, as gaps are.
    time_scale: f64,
    /// `--loop`: the pass being read.
    pass: u64,
    chats: HashMap<i64, Seen>,
    sessions: HashMap<String, Seen>,
    /// Turns seen of each task graph.
    task_turns: HashMap<String, u32>,
    /// Record indices of every conversation's last turn ([`last_turns`]).
    last_turns: Arc<HashSet<u64>>,
    /// `--measure-from mid`: each conversation's first measured turn ([`measure_cuts`]).
    cuts: Arc<MeasureCuts>,
    /// `--carry-forward`: which recorded-messages turns wait for a live answer.
    carry: CarryForward,
}

impl SessionTracker {
    /// With `--carry-forward` as given (auto unless set).
    pub fn with_carry(mut self, carry: CarryForward) -> SessionTracker {
        self.carry = carry;
        self
    }

    pub fn new(
        mode: SessionMode,
        think_override_ns: Option<u64>,
        time_scale: f64,
    ) -> SessionTracker {
        SessionTracker {
            mode,
            think_override_ns,
            time_scale,
            ..SessionTracker::default()
        }
    }

    /// The conversations' last turns, from [`last_turns`].
    pub fn with_last_turns(mut self, last: Arc<HashSet<u64>>) -> SessionTracker {
        self.last_turns = last;
        self
    }

    /// `--measure-from mid`: the conversations' first measured turns.
    pub fn with_measure_cuts(mut self, cuts: Arc<MeasureCuts>) -> SessionTracker {
        self.cuts = cuts;
        self
    }

    /// Whether a turn comes before its conversation's first measured turn: then it is warmup.
    /// Nothing is looked up (or built) without `--measure-from mid`: this runs for every turn.
    pub fn before_measure(&self, link: &SessionLink) -> bool {
        if self.cuts.is_empty() {
            return false;
        }
        // A later `--loop` pass names its conversations `root/pass` ([`Self::root_name`]).
        let base = match self.pass {
            0 => link.root.as_str(),
            p => link
                .root
                .strip_suffix(p.to_string().as_str())
                .and_then(|r| r.strip_suffix('/'))
                .unwrap_or(&link.root),
        };
        self.cuts.get(base).is_some_and(|&first| link.turn < first)
    }

    /// `--loop`: the next pass's conversations are new ones (their ids repeat, so they are
    /// told apart by a `/pass` suffix).
    pub fn new_pass(&mut self) {
        self.chats.clear();
        self.sessions.clear();
        self.task_turns.clear();
        self.pass += 1;
    }

    fn root_name(&self, id: &str) -> String {
        match self.pass {
            0 => id.to_string(),
            p => format!("{id}/{p}"),
        }
    }

    /// The record's link, given its planned send time; None for a record outside any
    /// conversation, or in `timestamp` mode.
    pub fn link(&mut self, record: &TraceRecord, scheduled_ns: u64) -> Option<SessionLink> {
        if self.mode == SessionMode::Timestamp {
            return None;
        }
        let ids = &record.ids;
        if let (Some(dag), Some(task)) = (&ids.dag, &ids.session_id) {
            return Some(self.dag_link(record, dag, task));
        }
        if let Some(chat) = ids.chat_id {
            let parent = ids
                .parent_chat_id
                .filter(|p| *p >= 0)
                .and_then(|p| self.chats.get(&p).cloned());
            let (root, turn) = match &parent {
                Some(p) => (p.root.clone(), p.turn + 1),
                None => (self.root_name(&chat.to_string()), 0),
            };
            self.chats.insert(
                chat,
                Seen {
                    index: record.index,
                    scheduled_ns,
                    root: root.clone(),
                    turn,
                    context: context(record),
                    wait_after_ns: None,
                },
            );
            return Some(self.finish(record, root, turn, parent, scheduled_ns));
        }
        let session = ids.session_id.as_ref()?;
        let parent = self.sessions.get(session).cloned();
        let turn = parent.as_ref().map_or(0, |p| p.turn + 1);
        let root = self.root_name(session);
        self.sessions.insert(
            session.clone(),
            Seen {
                index: record.index,
                scheduled_ns,
                root: root.clone(),
                turn,
                context: context(record),
                wait_after_ns: ids.wait_after_ms.map(|w| self.run_ns(w)),
            },
        );
        Some(self.finish(record, root, turn, parent, scheduled_ns))
    }

    /// A turn of a task graph: its loader gave every link (the task is the conversation, so
    /// all its agents run on one sender, which sees every end it waits for).
    fn dag_link(&mut self, record: &TraceRecord, dag: &DagIds, task: &str) -> SessionLink {
        let mut parents = dag
            .parents_back
            .iter()
            .filter_map(|back| record.index.checked_sub(*back));
        let parent_index = parents.next();
        // Its number in the task, in trace order (a loader writes a task's turns together).
        let root = self.root_name(task);
        let turn = self.task_turns.entry(root.clone()).or_insert(0);
        *turn += 1;
        let turn = *turn - 1;
        SessionLink {
            root,
            turn,
            parent_index,
            joins: parents.collect(),
            branch: Some(dag.branch.clone()),
            heirs: dag.heirs,
            fresh: dag.fresh,
            think_ns: self
                .think_override_ns
                .unwrap_or_else(|| self.run_ns(dag.wait_ms)),
            planned_prefix: record.ids.prefix_tokens,
            keeps_parent: dag.keeps_parent,
            last: self.last_turns.contains(&record.index),
            at_own_time: false,
        }
    }

    /// Trace ms as run ns (`--time-scale` divides them, as it does gaps).
    fn run_ns(&self, ms: f64) -> u64 {
        (ms * 1e6 / self.time_scale) as u64
    }

    /// The think time: `--think-time`, else the record's own `delay`, else its parent's
    /// wait after its answer (TraceLab's tool wait), else the trace's start-to-start gap.
    fn finish(
        &self,
        record: &TraceRecord,
        root: String,
        turn: u32,
        parent: Option<Seen>,
        scheduled_ns: u64,
    ) -> SessionLink {
        let gap = parent
            .as_ref()
            .map_or(0, |p| scheduled_ns.saturating_sub(p.scheduled_ns));
        let prefix = record.ids.prefix_tokens;
        SessionLink {
            root,
            turn,
            // A conversation's first turn has nothing of its own before it to find cached
            // (TraceLab's round-0 prefix_len counts a prefix no earlier round left).
            planned_prefix: parent.as_ref().map(|p| prefix.unwrap_or(p.context)),
            keeps_parent: match (prefix, &parent) {
                (Some(kept), Some(p)) => kept >= p.context,
                _ => true,
            },
            think_ns: self
                .think_override_ns
                .or(record.ids.delay_ms.map(|d| self.run_ns(d)))
                .or(parent.as_ref().and_then(|p| p.wait_after_ns))
                .unwrap_or(gap),
            parent_index: parent.map(|p| p.index),
            joins: Vec::new(),
            branch: None,
            heirs: 1,
            fresh: false,
            last: self.last_turns.contains(&record.index),
            at_own_time: self.verbatim_at_own_time(record),
        }
    }

    /// A turn of recorded messages sent verbatim, with a timestamp: AIPerf sends such a turn
    /// at its time (its history holds the recorded answer, so it needs no live one).
    fn verbatim_at_own_time(&self, record: &TraceRecord) -> bool {
        record.timestamp_ms.is_some()
            && matches!(record.input, crate::trace::Input::Messages { .. })
            && !self.carry.threads_live(&record.ids)
    }
}

/// Every conversation's last turn, in the order a replay reads the trace (record indices),
/// found by linking the whole trace once as the producers will. A Bailian conversation that
/// branches ends with the branch read last.
pub fn last_turns(mut reader: OrderedReader) -> Result<HashSet<u64>> {
    let mut tracker = SessionTracker::new(SessionMode::AfterParent, None, 1.0);
    let mut last: HashMap<String, u64> = HashMap::new();
    while let Some((record, _)) = reader.next_record()? {
        if let Some(link) = tracker.link(&record, 0) {
            last.insert(link.root, record.index);
        }
    }
    Ok(last.into_values().collect())
}

/// The tokens a record leaves in a server that caches generated tokens: its prompt and
/// its answer, as the trace gives them.
fn context(record: &TraceRecord) -> u64 {
    record.input_length().unwrap_or(0) + record.output_length.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceIds;

    fn rec(index: u64, ids: TraceIds) -> TraceRecord {
        TraceRecord::for_test(index, ids)
    }

    fn chat(chat: i64, parent: i64) -> TraceIds {
        TraceIds {
            chat_id: Some(chat),
            parent_chat_id: Some(parent),
            ..TraceIds::default()
        }
    }

    #[test]
    fn bailian_chains_and_mooncake_sessions() {
        let mut t = SessionTracker::new(SessionMode::AfterParent, None, 1.0);
        let root = t.link(&rec(0, chat(10, -1)), 0).unwrap();
        assert_eq!(
            (root.turn, root.parent_index, root.root.as_str()),
            (0, None, "10")
        );
        let other = t.link(&rec(1, chat(20, -1)), 1_000).unwrap();
        let child = t.link(&rec(2, chat(11, 10)), 5_000).unwrap();
        assert_eq!(
            (child.turn, child.parent_index, child.think_ns),
            (1, Some(0), 5_000)
        );
        let grandchild = t.link(&rec(3, chat(12, 11)), 9_000).unwrap();
        assert_eq!((grandchild.turn, grandchild.parent_index), (2, Some(2)));
        // A Bailian line's `delay` (ms; a capture writes the wait it saw after the parent's
        // answer) is its think time.
        let mut waited = TraceRecord::for_test(4, chat(13, 12));
        waited.ids.delay_ms = Some(2.5);
        assert_eq!(t.link(&waited, 9_500).unwrap().think_ns, 2_500_000);
        assert_eq!(grandchild.root, "10");
        assert_eq!(
            grandchild.sender(7),
            root.sender(7),
            "one sender per conversation"
        );
        assert_ne!(other.root, root.root);
        // A parent outside the replay: the turn starts a conversation of its own.
        let orphan = t.link(&rec(4, chat(30, 999)), 10_000).unwrap();
        assert_eq!((orphan.turn, orphan.parent_index), (0, None));

        let s = |id: &str| TraceIds {
            session_id: Some(id.into()),
            ..TraceIds::default()
        };
        let mut t = SessionTracker::new(SessionMode::AfterParent, Some(7), 1.0);
        assert_eq!(t.link(&rec(0, s("a")), 0).unwrap().parent_index, None);
        let second = t.link(&rec(1, s("a")), 100).unwrap();
        assert_eq!(
            (second.turn, second.parent_index, second.think_ns),
            (1, Some(0), 7)
        );
        assert!(t.link(&rec(2, TraceIds::default()), 0).is_none());
        // A Mooncake `delay` is the think time (trace ms, scaled like the gaps).
        let mut t = SessionTracker::new(SessionMode::AfterParent, None, 2.0);
        t.link(&rec(0, s("b")), 0);
        let delayed = TraceIds {
            delay_ms: Some(300.0),
            ..s("b")
        };
        assert_eq!(t.link(&rec(1, delayed), 10).unwrap().think_ns, 150_000_000);

        // TraceLab: the wait after a round's answer is its next round's think time, and a
        // prefix shorter than the round before and its answer keeps no carried answer.
        let mut t = SessionTracker::new(SessionMode::AfterParent, None, 2.0);
        let round = |prefix: u64, wait: f64| TraceIds {
            prefix_tokens: Some(prefix),
            wait_after_ms: Some(wait),
            ..s("c")
        };
        let first = t.link(&rec(0, round(0, 40.0)), 0).unwrap();
        assert!(first.keeps_parent);
        let second = t.link(&rec(1, round(17, 0.0)), 0).unwrap();
        assert_eq!(second.think_ns, 20_000_000);
        assert_eq!(second.planned_prefix, Some(17));
        assert!(second.keeps_parent, "16 input + 1 output tokens kept");
        let mut t = t.with_last_turns(Arc::new(HashSet::from([2])));
        let third = t.link(&rec(2, round(16, 0.0)), 0).unwrap();
        assert!(third.last && !second.last);
        assert_eq!(third.think_ns, 0);
        assert!(
            !third.keeps_parent,
            "compacted below the previous round's context"
        );

        let mut t = SessionTracker::new(SessionMode::Timestamp, None, 1.0);
        assert!(t.link(&rec(0, chat(10, -1)), 0).is_none());
    }
}
