//! Options of runs across many hosts: `replay`'s shard and start options, `merge` and
//! `k8s-job` (README "Running on many machines").

use std::path::PathBuf;

use clap::Args;

use super::ResultArgs;
use crate::rendezvous::OnShardLoss;
use crate::shard::ShardBy;

/// A replay as one shard of a run across hosts.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Many hosts")]
pub struct ShardArgs {
    /// Send only shard I of N (0-based) of the one schedule: every host reads the same trace
    /// and builds the same prompts, and `llmreplay merge` joins the shards' results exactly.
    /// `auto` reads the index from JOB_COMPLETION_INDEX (Kubernetes Indexed Job, with
    /// --shard-count) or SLURM_PROCID and SLURM_NTASKS (Slurm).
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,

    /// The number of shards, with the index from the environment (as --shard auto).
    #[arg(long, value_name = "N")]
    pub shard_count: Option<u32>,

    /// How records are shared out: `session` keeps each conversation on one shard (a stable
    /// hash of its root; other records round-robin by index); `endpoint` gives shard I the
    /// records routed to endpoints I, I+N, ... (hosts placed near their instance group).
    #[arg(long, value_parser = crate::cli::choice::<ShardBy>(), default_value_t)]
    pub shard_by: ShardBy,

    /// Put the schedule's time 0 at this wall-clock instant: Unix milliseconds or RFC 3339
    /// (`2026-11-24T10:00:00Z`). Shards given the same instant start together; one ready
    /// only after it starts at once, says how late, and run.json records it.
    #[arg(long, value_name = "RFC3339|UNIX_MS")]
    pub start_at: Option<String>,

    /// Measure this host's clock against an NTP server by SNTP (a few exchanges, the
    /// least-delay one kept), at the start and at the end, instead of the first endpoint's
    /// `Date` header. The start is corrected by the offset: every shard starts on the
    /// server's clock. run.json records offset and uncertainty.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub ntp: Option<String>,

    /// Each shard checks its clock against one reference (--ntp, else the first endpoint's
    /// HTTP `Date` header, asked about a dozen times) and starts on that clock. Once all are
    /// ready, the hosts' offsets are compared with each other: a host further than this from
    /// the others' median is refused (for every shard); a reference this far from all hosts
    /// is the server's clock, said and corrected. A check less sure than the verdict's
    /// shard-skew-ms (50) is refused.
    #[arg(long, value_name = "MS", default_value_t = 1000.0)]
    pub max_clock_offset_ms: f64,

    /// A directory every shard sees (a Kubernetes volume, Slurm's shared filesystem) where
    /// they meet with no coordinator: each writes ready/<i> once prepared, and all start
    /// together 5 s after the last is ready (unless --start-at sets the instant); each
    /// writes live/<i> every second (`llmreplay watch DIR` shows them) and stops when
    /// another shard fails, is stopped or goes silent (--on-shard-loss).
    #[arg(long, value_name = "DIR")]
    pub rendezvous: Option<PathBuf>,

    /// With --rendezvous: how long a shard waits for the others to be ready before the run
    /// is off for all.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 600.0,
        requires = "rendezvous"
    )]
    pub ready_timeout: f64,

    /// With --rendezvous: a shard whose heartbeat is older than this is lost.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 15.0,
        requires = "rendezvous"
    )]
    pub heartbeat_timeout: f64,

    /// With --rendezvous: when another shard is lost, `stop` this one (exit status 2, the
    /// records so far kept) or `continue` (the merged run then lacks that shard's share).
    #[arg(long, value_parser = crate::cli::choice::<OnShardLoss>(), default_value_t, requires = "rendezvous")]
    pub on_shard_loss: OnShardLoss,

    /// The run's name, the same for every shard (Slurm's job id, a Kubernetes Job's uid): kept
    /// in run.json, the heartbeats and the readiness notes; shards of another id are refused
    /// at the barrier and by `merge`. Without it, a run whose shards agree on a start
    /// (--rendezvous or --start-at), and a run of one host, get one minted from the start
    /// instant and the trace's digest.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Scrape --server-metrics / --scrape-server from every shard (by default only shard 0
    /// scrapes, so that N hosts do not multiply the scrapes).
    #[arg(long)]
    pub scrape_every_shard: bool,
}

#[derive(Debug, Args, Clone)]
pub struct MergeArgs {
    /// The merged run directory (created; empty unless --force).
    #[arg(value_name = "OUT")]
    pub out: PathBuf,

    /// The shards' run directories, every index of one run once.
    #[arg(value_name = "DIR", num_args = 1.., required = true)]
    pub dirs: Vec<PathBuf>,

    /// Wait up to this many seconds for every shard to finish (its run.json says how the run
    /// ended), as a merge step started beside the shards does.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub wait: f64,

    /// Write into a non-empty OUT.
    #[arg(long)]
    pub force: bool,

    /// The --rendezvous directory the shards met in (found from their run.json otherwise):
    /// its heartbeats end the merge at once when the run was called off before its start,
    /// or when a shard refused to join because an earlier run's files are there.
    #[arg(long, value_name = "DIR")]
    pub rendezvous: Option<PathBuf>,

    /// Exit with status 4 when the merged run's verdict is INVALID (as replay --strict).
    #[arg(long)]
    pub strict: bool,

    #[command(flatten)]
    pub results: ResultArgs,
}

#[derive(Debug, Args, Clone)]
pub struct WatchArgs {
    /// The --rendezvous directories of the runs to watch (their shards' heartbeats).
    #[arg(value_name = "DIR", num_args = 1.., required = true)]
    pub dirs: Vec<PathBuf>,

    /// Seconds between two views.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub every: f64,

    /// Print one view and exit.
    #[arg(long)]
    pub once: bool,

    /// A running shard silent this long is shown as lost (the shards' own
    /// --heartbeat-timeout).
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
    pub heartbeat_timeout: f64,
}

#[derive(Debug, Args, Clone)]
pub struct K8sJobArgs {
    /// Shards: the Indexed Job's completions and parallelism, one pod each.
    #[arg(long, value_name = "N")]
    pub shards: u32,

    /// The container image holding llmreplay (see Containerfile).
    #[arg(long, value_name = "IMAGE", default_value = concat!("llmreplay:", env!("CARGO_PKG_VERSION")))]
    pub image: String,

    /// The Job's name (the merge Job is NAME-merge).
    #[arg(long, value_name = "NAME", default_value = "llmreplay")]
    pub name: String,

    /// This run's id: results go to /results/NAME/ID/ and every pod's run.json and
    /// heartbeat carry it. By default one is minted from the time the manifest is written
    /// (YYYYMMDD-HHMMSS, UTC), so each manifest is a new run; a manifest applied again over
    /// its earlier run's files is refused by every shard, and its merge exits 2.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,

    /// A fixed common start this many seconds from now, written into the manifest, instead
    /// of the readiness barrier (by default the pods meet in RESULTS/NAME/meet and start
    /// together 5 s after the last is ready, however long scheduling and image pulls take).
    #[arg(long, value_name = "SECS", conflicts_with = "start_at")]
    pub start_in: Option<f64>,

    /// A fixed common start instant instead of the barrier (RFC 3339 or Unix ms).
    #[arg(long, value_name = "RFC3339|UNIX_MS")]
    pub start_at: Option<String>,

    /// Each pod's CPU request (the Kubernetes quantity): a shard's senders and producers want
    /// whole cores (`llmreplay calibrate` on one pod's resources sizes N).
    #[arg(long, value_name = "CPU", default_value = "2")]
    pub cpu: String,

    /// Each pod's memory request and limit.
    #[arg(long, value_name = "MEMORY", default_value = "4Gi")]
    pub memory: String,

    /// The longest the run may take, from the Jobs' start, in seconds: the shards' Job's
    /// activeDeadlineSeconds, and how long the merge Job waits for them.
    #[arg(long, value_name = "SECS", default_value_t = 7200)]
    pub deadline: u64,

    /// ConfigMap holding the trace (and small inputs), mounted at /inputs
    /// (`kubectl create configmap NAME --from-file=trace.jsonl`; ConfigMaps hold at most
    /// 1 MiB: larger traces go on a volume, --inputs-claim).
    #[arg(long, value_name = "NAME", conflicts_with = "inputs_claim")]
    pub inputs_configmap: Option<String>,

    /// PersistentVolumeClaim holding the trace and tokenizer, mounted read-only at /inputs.
    #[arg(long, value_name = "CLAIM")]
    pub inputs_claim: Option<String>,

    /// PersistentVolumeClaim (ReadWriteMany) the shards and the merge step write to, mounted
    /// at /results.
    #[arg(long, value_name = "CLAIM", default_value = "llmreplay-results")]
    pub results_claim: String,

    #[arg(long, value_parser = crate::cli::choice::<ShardBy>(), default_value_t)]
    pub shard_by: ShardBy,

    /// Environment variable VAR of every shard pod, from key KEY of the Kubernetes Secret
    /// SECRET (repeatable): how a credential reaches the pods without being written into the
    /// manifest. The API key (`--api-key-env`, default OPENAI_API_KEY) comes this way; a
    /// header refers to one as `$(VAR)`, which Kubernetes fills in:
    /// `--secret-env AUTH=llm-auth:token -- ... -H 'Authorization: Bearer $(AUTH)'`.
    #[arg(long, value_name = "VAR=SECRET:KEY")]
    pub secret_env: Vec<String>,

    /// The replay options every shard runs, after `--` (paths as the pods see them: the
    /// inputs under /inputs). --shard, --start-at and --output are the manifest's.
    #[arg(last = true, value_name = "REPLAY OPTIONS", required = true)]
    pub replay: Vec<String>,
}
