//! `--shard`, `--start-at`, `--ntp` validated: a replay as one shard of a run across hosts.

use crate::cli::ShardArgs;
use crate::error::{Error, Result};
use crate::fleet::Route;
use crate::load::Pace;
use crate::shard::{Shard, ShardBy};
use crate::sys::wall_start;

/// Where this replay stands among the hosts of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostsPlan {
    pub shard: Option<Shard>,
    /// `--start-at`, Unix ns.
    pub start_at_unix_ns: Option<u64>,
    pub ntp: Option<String>,
    /// A shard's clock further off its target's `Date` than this is refused.
    pub max_clock_offset_ms: f64,
    /// `--rendezvous`: where the shards meet.
    pub rendezvous: Option<RendezvousPlan>,
    /// Scraping was asked for, but this shard leaves it to shard 0.
    pub scrape_left_to_shard0: bool,
    /// `--run-id`, checked.
    pub run_id: Option<String>,
}

/// `--run-id`: a name for paths and labels (letters, digits, `.`, `_`, `-`; 1 to 128).
pub fn run_id(id: &str) -> Result<String> {
    let ok = (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !id.starts_with('.');
    match ok {
        true => Ok(id.to_string()),
        false => Err(Error::Usage(format!(
            "--run-id {id:?}: give 1 to 128 letters, digits, '.', '_' or '-' (not starting \
             with '.'): it names directories"
        ))),
    }
}

/// The id of a run given none: the agreed start (UTC, to the millisecond) and the trace's
/// digest, which every shard of the run computes alike.
pub fn minted_run_id(start_unix_ns: u64, trace_digest: &str) -> String {
    let at = wall_start::rfc3339_utc(start_unix_ns);
    let compact: String = at.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let hex = trace_digest.rsplit(':').next().unwrap_or_default();
    let digest: String = hex
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    match digest.is_empty() {
        true => compact,
        false => format!("{compact}-{digest}"),
    }
}

/// `--rendezvous DIR` and its bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct RendezvousPlan {
    pub dir: std::path::PathBuf,
    pub ready_timeout: std::time::Duration,
    pub heartbeat_timeout: std::time::Duration,
    pub on_loss: crate::rendezvous::OnShardLoss,
}

/// A `--start-at` instant this far in the past is refused: the shards could not have started
/// together (a shard ready after its instant starts at once, late by as much).
pub const MAX_LATE_START_S: u64 = 60;

/// What of the rest of the plan the shard options must agree with.
pub struct Context {
    pub pace: Pace,
    pub max_error_rate: bool,
    pub route: Route,
    pub endpoints: usize,
    pub scrapes: bool,
}

pub fn hosts_plan(a: &ShardArgs, c: &Context) -> Result<HostsPlan> {
    let shard = Shard::resolve(a.shard.as_deref(), a.shard_count, a.shard_by, |v| {
        std::env::var(v).ok()
    })
    .map_err(Error::Usage)?;
    if let Some(s) = shard {
        let refuse = |why: String| Err(Error::Usage(format!("--shard {}: {why}", s.name())));
        if let Pace::Closed { .. } = c.pace {
            return refuse(
                "a closed loop (--concurrency) has no schedule to share out; give each host \
                 its own --concurrency and no --shard, or replay the trace's timing or a --rate"
                    .into(),
            );
        }
        if c.max_error_rate {
            return refuse(
                "--max-error-rate would stop one shard while the others go on; judge the \
                 merged run's errors instead"
                    .into(),
            );
        }
        if s.by == ShardBy::Endpoint {
            if c.route == Route::LeastInflight {
                return refuse(
                    "--shard-by endpoint needs the endpoint fixed when the request is built, \
                     but --route least-inflight picks it when the request is due, from one \
                     host's in-flight counts; use --route round-robin or session, or \
                     --shard-by session"
                        .into(),
                );
            }
            if c.endpoints < s.count as usize {
                return refuse(format!(
                    "--shard-by endpoint gives each shard its own endpoints, but there are {} \
                     for {} shards",
                    c.endpoints, s.count
                ));
            }
        }
    }
    let start_at_unix_ns = a
        .start_at
        .as_deref()
        .map(wall_start::parse)
        .transpose()
        .map_err(Error::Usage)?;
    if let Some(at) = start_at_unix_ns {
        let late_s = wall_start::unix_ns_now().saturating_sub(at) / 1_000_000_000;
        if late_s > MAX_LATE_START_S {
            return Err(Error::Usage(format!(
                "--start-at {} passed {late_s} s ago (at most {MAX_LATE_START_S} s): shards \
                 given it would each start at once, apart; give an instant ahead (or \
                 --rendezvous DIR, which finds one)",
                wall_start::rfc3339_utc(at)
            )));
        }
        let ahead_s = at.saturating_sub(wall_start::unix_ns_now()) / 1_000_000_000;
        if ahead_s > wall_start::MAX_AHEAD_S {
            return Err(Error::Usage(format!(
                "--start-at is {:.1} days ahead; at most {} days",
                ahead_s as f64 / 86_400.0,
                wall_start::MAX_AHEAD_S / 86_400
            )));
        }
    }
    let secs = |name: &str, s: f64| match s > 0.0 && s <= 30.0 * 86_400.0 {
        true => Ok(std::time::Duration::from_secs_f64(s)),
        false => Err(Error::Usage(format!("--{name} {s}: give seconds, above 0"))),
    };
    let rendezvous = match (&a.rendezvous, shard) {
        (None, _) => None,
        (Some(dir), None) => {
            return Err(Error::Usage(format!(
                "--rendezvous {}: shards meet there; give --shard I/N (or auto)",
                dir.display()
            )))
        }
        (Some(dir), Some(_)) => Some(RendezvousPlan {
            dir: dir.clone(),
            ready_timeout: secs("ready-timeout", a.ready_timeout)?,
            heartbeat_timeout: secs("heartbeat-timeout", a.heartbeat_timeout)?,
            on_loss: a.on_shard_loss,
        }),
    };
    if rendezvous
        .as_ref()
        .is_some_and(|r| r.heartbeat_timeout < 2 * crate::rendezvous::BEAT_EVERY)
    {
        return Err(Error::Usage(format!(
            "--heartbeat-timeout {}: at least 2 s (heartbeats are written every second)",
            a.heartbeat_timeout
        )));
    }
    if a.max_clock_offset_ms.is_nan() || a.max_clock_offset_ms <= 0.0 {
        return Err(Error::Usage(format!(
            "--max-clock-offset-ms {}: give milliseconds, above 0",
            a.max_clock_offset_ms
        )));
    }
    Ok(HostsPlan {
        shard,
        start_at_unix_ns,
        ntp: a.ntp.clone(),
        max_clock_offset_ms: a.max_clock_offset_ms,
        rendezvous,
        scrape_left_to_shard0: c.scrapes
            && !a.scrape_every_shard
            && shard.is_some_and(|s| s.index > 0),
        run_id: a.run_id.as_deref().map(run_id).transpose()?,
    })
}

/// Whether any option of a run across hosts is given (commands that run alone refuse them).
pub fn asked(a: &ShardArgs) -> bool {
    a.shard.is_some()
        || a.shard_count.is_some()
        || a.start_at.is_some()
        || a.ntp.is_some()
        || a.rendezvous.is_some()
        || a.run_id.is_some()
}

/// `merge`, validated.
#[derive(Clone, Debug)]
pub struct MergePlan {
    pub out: std::path::PathBuf,
    pub dirs: Vec<std::path::PathBuf>,
    pub wait: std::time::Duration,
    pub force: bool,
    pub render: crate::report::RenderOptions,
    /// `--rendezvous`: where the shards met (else found from their run.json).
    pub rendezvous: Option<std::path::PathBuf>,
    pub strict: bool,
}

/// Where the pods find the trace (and tokenizer).
#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    /// Paths in the replay options are the image's or a URL's.
    None,
    ConfigMap(String),
    Claim(String),
}

/// `k8s-job`, validated.
#[derive(Clone, Debug)]
pub struct K8sJobPlan {
    pub shards: u32,
    pub image: String,
    pub name: String,
    /// `--run-id`, or minted: the results' directory under /results/NAME/, and a label.
    pub run_id: String,
    pub namespace: Option<String>,
    /// A fixed start (`--start-at`, `--start-in`); None: the readiness barrier.
    pub start_at_unix_ns: Option<u64>,
    pub cpu: String,
    pub memory: String,
    pub deadline_s: u64,
    pub inputs: Inputs,
    pub results_claim: String,
    pub shard_by: ShardBy,
    /// The replay options every shard runs (already checked to parse).
    pub replay: Vec<String>,
    /// `--secret-env`: (variable, Secret, key).
    pub secret_env: Vec<(String, String, String)>,
    /// What the user should hear (printed on stderr, not in the manifest).
    pub warnings: Vec<String>,
}

/// Where the inputs volume is mounted in the pods (`k8s-job`).
pub const INPUTS_DIR: &str = "/inputs";
/// The bundled tokenizer and sample trace in the image (Containerfile).
pub const IMAGE_ASSETS: &str = "/assets";
/// `watch`, validated.
#[derive(Clone, Debug)]
pub struct WatchPlan {
    pub dirs: Vec<std::path::PathBuf>,
    pub every: std::time::Duration,
    /// Print one view and return.
    pub once: bool,
    /// A running shard silent this long is shown as lost.
    pub heartbeat_timeout: std::time::Duration,
}

pub fn watch_plan(a: &crate::cli::WatchArgs) -> Result<WatchPlan> {
    for (name, s) in [
        ("every", a.every),
        ("heartbeat-timeout", a.heartbeat_timeout),
    ] {
        if !(s > 0.0 && s <= 86_400.0) {
            return Err(Error::Usage(format!("--{name} {s}: give seconds, above 0")));
        }
    }
    Ok(WatchPlan {
        dirs: a.dirs.clone(),
        every: std::time::Duration::from_secs_f64(a.every),
        once: a.once,
        heartbeat_timeout: std::time::Duration::from_secs_f64(a.heartbeat_timeout),
    })
}

/// `merge`, validated.
pub fn merge_plan(a: &crate::cli::MergeArgs) -> Result<MergePlan> {
    if !(a.wait >= 0.0 && a.wait <= 30.0 * 86_400.0) {
        return Err(Error::Usage(format!(
            "--wait {}: give seconds, 0 to 30 days",
            a.wait
        )));
    }
    Ok(MergePlan {
        out: a.out.clone(),
        dirs: a.dirs.clone(),
        wait: std::time::Duration::from_secs_f64(a.wait),
        force: a.force,
        render: super::parts::render_options(&a.results)?,
        rendezvous: a.rendezvous.clone(),
        strict: a.strict,
    })
}

/// Options of `replay` that `k8s-job` writes itself.
const MANIFEST_OWNS: [&str; 8] = [
    "--shard",
    "--run-id",
    "--shard-count",
    "--shard-by",
    "--start-at",
    "--output",
    "--dry-run",
    "--rendezvous",
];

/// `k8s-job`, validated: the replay options must parse as a shard's would.
pub fn k8s_job_plan(a: &crate::cli::K8sJobArgs) -> Result<K8sJobPlan> {
    if a.shards == 0 {
        return Err(Error::Usage("--shards must be at least 1".into()));
    }
    if let Some(own) = a.replay.iter().find(|o| {
        MANIFEST_OWNS
            .iter()
            .any(|m| *o == m || o.starts_with(&format!("{m}=")))
    }) {
        return Err(Error::Usage(format!(
            "{own}: the manifest sets --shard-count, --shard-by, --start-at, --run-id, \
             --rendezvous and --output itself (give --shard-by, --start-at and --run-id to \
             k8s-job, before `--`)"
        )));
    }
    let mut line: Vec<std::ffi::OsString> = vec!["llmreplay".into(), "replay".into()];
    line.extend(a.replay.iter().map(Into::into));
    line.extend(["--shard".into(), format!("0/{}", a.shards).into()]);
    let cli = crate::cli::parse(line).map_err(|e| {
        Error::Usage(format!(
            "the replay options after `--` do not parse:\n{}",
            e.message
        ))
    })?;
    let inputs = match (&a.inputs_configmap, &a.inputs_claim) {
        (Some(c), _) => Inputs::ConfigMap(c.clone()),
        (_, Some(c)) => Inputs::Claim(c.clone()),
        (None, None) => Inputs::None,
    };
    let secret_env = a
        .secret_env
        .iter()
        .map(|s| secret_env(s))
        .collect::<Result<Vec<_>>>()?;
    let mut warnings = Vec::new();
    if let crate::cli::Command::Replay(r) = &cli.command {
        // The combinations a shard refuses (a closed loop, --max-error-rate, ...), now.
        super::ReplayPlan::from_args(r)?;
        refuse_clear_credentials(r)?;
        let key = &r.api_key_env;
        if std::env::var_os(key).is_some() && !secret_env.iter().any(|(v, _, _)| v == key) {
            warnings.push(format!(
                "{key} is set here, but the pods will not have it: give \
                 --secret-env {key}=SECRET:KEY (a Kubernetes Secret holding the key)"
            ));
        }
        // With no inputs volume the pods see only the image's files and URLs.
        fn unseen(p: &Option<std::path::PathBuf>) -> Option<&std::path::PathBuf> {
            p.as_ref().filter(|p| {
                let text = p.to_string_lossy();
                !(p.starts_with(IMAGE_ASSETS) || text.contains("://"))
            })
        }
        if inputs == Inputs::None {
            if let Some(p) = unseen(&r.trace).or(unseen(&r.prompt.tokenizer)) {
                return Err(Error::Usage(format!(
                    "{}: the pods have no inputs volume, so they see only the image's files \
                     ({IMAGE_ASSETS}) and URLs; put the trace and tokenizer on a claim \
                     (--inputs-claim NAME, mounted at {INPUTS_DIR}) or a ConfigMap \
                     (--inputs-configmap NAME)",
                    p.display()
                )));
            }
        }
        let under_inputs = r.trace.as_ref().is_some_and(|t| t.starts_with(INPUTS_DIR));
        if inputs != Inputs::None && r.trace.is_some() && !under_inputs {
            return Err(Error::Usage(format!(
                "--trace {}: the pods see the inputs volume at {INPUTS_DIR}; give the trace's \
                 path there (e.g. --trace {INPUTS_DIR}/trace.jsonl)",
                r.trace
                    .as_ref()
                    .map(|t| t.display().to_string())
                    .unwrap_or_default()
            )));
        }
    }
    let start_at_unix_ns = match (&a.start_at, a.start_in) {
        (Some(t), _) => Some(wall_start::parse(t).map_err(Error::Usage)?),
        (None, Some(s)) if (0.0..=wall_start::MAX_AHEAD_S as f64).contains(&s) => {
            Some(wall_start::unix_ns_now() + (s * 1e9) as u64)
        }
        (None, Some(s)) => {
            return Err(Error::Usage(format!(
                "--start-in {s}: give seconds, 0 to 7 days"
            )))
        }
        (None, None) => None,
    };
    if a.deadline == 0 {
        return Err(Error::Usage("--deadline must be at least 1 s".into()));
    }
    Ok(K8sJobPlan {
        shards: a.shards,
        image: a.image.clone(),
        name: job_name(&a.name)?,
        run_id: match &a.run_id {
            Some(id) => label_value(id)?,
            None => minted_manifest_id(),
        },
        namespace: a.namespace.clone(),
        start_at_unix_ns,
        cpu: a.cpu.clone(),
        memory: a.memory.clone(),
        deadline_s: a.deadline,
        inputs,
        results_claim: a.results_claim.clone(),
        shard_by: a.shard_by,
        replay: a.replay.clone(),
        secret_env,
        warnings,
    })
}

/// `k8s-job --name`: lower-case letters, digits and '-', at most 52 (the Indexed Job's pod
/// names add an index and a suffix within Kubernetes' 63).
fn job_name(name: &str) -> Result<String> {
    let ok = !name.is_empty()
        && name.len() <= 52
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    match ok {
        true => Ok(name.to_string()),
        false => Err(Error::Usage(format!(
            "--name {name:?}: a Job name is lower-case letters, digits and '-', at most 52 long"
        ))),
    }
}

/// A manifest's run id when none is given: when it is written, `YYYYMMDD-HHMMSS` (UTC).
fn minted_manifest_id() -> String {
    let at = wall_start::rfc3339_utc(wall_start::unix_ns_now());
    let digits: String = at.chars().filter(char::is_ascii_digit).take(14).collect();
    format!("{}-{}", &digits[..8], &digits[8..])
}

/// `k8s-job --run-id`: a run id that is also a Kubernetes label value (at most 63, starting
/// and ending with a letter or digit).
fn label_value(id: &str) -> Result<String> {
    let id = run_id(id)?;
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    match id.len() <= 63 && ends(id.chars().next()) && ends(id.chars().last()) {
        true => Ok(id),
        false => Err(Error::Usage(format!(
            "--run-id {id:?}: a Kubernetes label value: at most 63 characters, starting and \
             ending with a letter or digit"
        ))),
    }
}

/// `VAR=SECRET:KEY`, checked: an environment variable's name, a Secret's, a key's.
fn secret_env(spec: &str) -> Result<(String, String, String)> {
    let parsed = spec.split_once('=').and_then(|(var, from)| {
        let (secret, key) = from.split_once(':')?;
        let var_ok = var
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        };
        (var_ok && name_ok(secret) && name_ok(key))
            .then(|| (var.to_string(), secret.to_string(), key.to_string()))
    });
    parsed.ok_or_else(|| {
        Error::Usage(format!(
            "--secret-env {spec:?}: give VAR=SECRET:KEY (an environment variable, a Secret's \
             name, a key in it), e.g. OPENAI_API_KEY=llm-auth:api-key"
        ))
    })
}

/// Header names whose values are credentials.
fn credential_header(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    ["auth", "key", "token", "secret", "password", "cookie"]
        .iter()
        .any(|w| name.contains(w))
}

/// A credential written in the replay options would stand in clear in the manifest, which
/// is applied, kept and shared: refused, with the way to keep it in a Secret.
fn refuse_clear_credentials(r: &crate::cli::ReplayArgs) -> Result<()> {
    for h in &r.headers {
        let (name, value) = h.split_once(':').unwrap_or((h, ""));
        if credential_header(name) && !value.contains("$(") {
            return Err(Error::Usage(format!(
                "-H '{}: ***': the manifest would hold this value in clear; keep it in a \
                 Kubernetes Secret and refer to it: --secret-env VAR=SECRET:KEY before `--`, \
                 and -H '{}: $(VAR)' after it (Kubernetes fills in $(VAR))",
                name.trim(),
                name.trim()
            )));
        }
    }
    for e in &r.endpoints {
        let url = e.split(',').next().unwrap_or_default();
        let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = authority.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err(Error::Usage(
                "--endpoint with a user and password: the manifest would hold them in clear; \
                 give them as a header from a Secret instead (--secret-env AUTH=SECRET:KEY, \
                 -H 'Authorization: Basic $(AUTH)')"
                    .into(),
            ));
        }
    }
    Ok(())
}
