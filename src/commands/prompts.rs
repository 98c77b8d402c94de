//! `llmreplay prompts`: builds the request of every record through the producers' own code
//! path, without sending anything, to measure build throughput and (with `--verify`) prove
//! that every prompt has exactly the intended length and that records sharing leading hash
//! ids share their leading tokens on the server.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use crate::api::BodyOptions;
use crate::error::{Error, Result};
use crate::pipeline::{BufferPool, PromptLog, RequestBuilder};
use crate::plan::PromptsPlan;
use crate::prompt::{self, verify, LengthOf, PromptCounter, Wrapping};
use crate::trace::{detect_format, Input, ReadOptions, TraceFile, TraceReader, TraceRecord};

/// Records taken from the reader at once by a thread.
const BATCH: usize = 64;
/// Mismatches described in full; the rest are only counted.
const MAX_EXAMPLES: usize = 10;

/// What a `prompts` run measured.
#[derive(Debug, Default, serde::Serialize)]
pub struct PromptsReport {
    pub records: u64,
    /// Records with lengths and hash ids (the rest carry text and are sent verbatim).
    pub synthetic_records: u64,
    /// Content tokens synthesised.
    pub tokens: u64,
    pub body_bytes: u64,
    pub threads: usize,
    /// Time spent building requests, summed over threads (trace parsing excluded).
    pub build_s: f64,
    pub tokens_per_s_per_thread: f64,
    pub wall_s: f64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    /// Tokens the server adds around the content (chat template, special tokens).
    pub overhead_tokens: u64,
    /// Records whose `hash_ids` count disagrees with their length (padded or cut).
    pub hash_length_mismatches: u64,
    pub peak_rss_mb: f64,
    pub verify: Option<Verification>,
}

/// `--verify`: each checked prompt re-encoded as the server would.
#[derive(Debug, Default, serde::Serialize)]
pub struct Verification {
    pub checked: u64,
    /// Prompts with exactly the intended count (`usage.prompt_tokens == input_length`, or the
    /// content alone with `--input-length-of content`) and their synthetic ids intact.
    pub exact: u64,
    /// Records shorter than what the server adds around any content plus one token (the
    /// chat template, a BOS): no prompt can have their length. Not counted as failures.
    pub shorter_than_frame: u64,
    pub max_abs_diff: u64,
    /// Pairs (record, earlier record) compared on a shared prefix of k hash ids: their first
    /// k*B content token ids must be equal.
    pub prefix_pairs_checked: u64,
    pub prefix_pairs_differing: u64,
    pub examples: Vec<String>,
}

impl Verification {
    /// Prompts that could have been exact and are not.
    pub fn failed(&self) -> u64 {
        self.checked - self.exact - self.shorter_than_frame
    }

    fn fail(&mut self, message: String) {
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(message);
        }
    }
}

pub fn run(args: &PromptsPlan) -> Result<PromptsReport> {
    let trace = TraceFile::resolve(&args.trace, None)?;
    let format = detect_format(&trace, args.format, false)?;
    let block = crate::trace::block_size(&trace, format, args.prompt.block_size)?;
    let opts = args.prompt.synth_options(args.api, block)?.ok_or_else(|| {
        Error::Usage("give --tokenizer PATH: prompts are synthesised with it".into())
    })?;
    let prepared = prompt::prepare(&opts)?;
    if let Some(w) = &prepared.warning {
        eprintln!("warning: {w}");
    }
    let prompt_log = match &args.output {
        Some(path) => Some(PromptLog::create(path)?),
        None => None,
    };
    let builder = RequestBuilder {
        cache_bytes_per_producer: args.prompt.block_cache_bytes() / args.threads,
        prompt_log,
        ..RequestBuilder::uniform(
            args.api,
            BodyOptions {
                model_json: json!("model").to_string(),
                stream: true,
                exact_output: true,
                extra_body: None,
            },
            Some(Arc::clone(&prepared.synth)),
            BufferPool::new(0),
        )
    };
    let shared = Shared {
        reader: Mutex::new(
            TraceReader::open(&trace, format)?.with_options(ReadOptions {
                skip_invalid: false,
                max_records: args.max_requests,
            }),
        ),
        args,
        builder,
        counter: &prepared.counter,
        wrapping: opts.wrapping,
        length_of: opts.length_of,
        block_size: u64::from(opts.block_size),
        prefixes: Mutex::new(HashMap::new()),
    };
    let started = Instant::now();
    let mut report = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| scope.spawn(|| shared.work()))
            .collect();
        let mut total = PromptsReport {
            verify: args.verify.then(Verification::default),
            ..PromptsReport::default()
        };
        for w in workers {
            let part = w
                .join()
                .map_err(|_| Error::Run("a prompt-building thread panicked".into()))??;
            total.add(part);
        }
        Ok::<_, Error>(total)
    })?;
    if let Some(log) = &shared.builder.prompt_log {
        log.finish()?;
    }
    report.threads = args.threads;
    report.wall_s = started.elapsed().as_secs_f64();
    report.overhead_tokens = prepared.synth.overhead();
    // build_s sums the threads' build time, so this is the rate of one thread.
    report.tokens_per_s_per_thread = report.tokens as f64 / report.build_s.max(1e-9);
    report.peak_rss_mb = peak_rss_bytes() as f64 / (1 << 20) as f64;
    Ok(report)
}

struct Shared<'a> {
    reader: Mutex<TraceReader>,
    args: &'a PromptsPlan,
    builder: RequestBuilder,
    counter: &'a PromptCounter,
    wrapping: Wrapping,
    length_of: LengthOf,
    block_size: u64,
    /// Digest of the hash ids of a prefix -> digest of its content token ids.
    prefixes: Mutex<HashMap<u64, u64>>,
}

impl Shared<'_> {
    fn next_batch(&self) -> Result<Vec<TraceRecord>> {
        let mut reader = self
            .reader
            .lock()
            .map_err(|_| Error::Run("a prompt-building thread panicked".into()))?;
        let mut batch = Vec::with_capacity(BATCH);
        while batch.len() < BATCH {
            let Some(record) = reader.next_record()? else {
                break;
            };
            batch.push(record);
        }
        Ok(batch)
    }

    fn work(&self) -> Result<PromptsReport> {
        let mut part = PromptsReport {
            verify: self.args.verify.then(Verification::default),
            ..PromptsReport::default()
        };
        let mut cache = self.builder.new_caches();
        let synth = &*self.builder.synths[0];
        let mut verify_cache = synth.block_cache(self.builder.cache_bytes_per_producer);
        loop {
            let batch = self.next_batch()?;
            if batch.is_empty() {
                break;
            }
            for record in &batch {
                part.records += 1;
                let t = Instant::now();
                // Every record is read (none skipped): its index is its place in the file.
                let mut request = self
                    .builder
                    .build(record, record.index, 0, None, 0, &mut cache)
                    .map_err(|e| Error::Trace {
                        file: self.args.trace.clone(),
                        line: record.line,
                        message: e.to_string(),
                    })?;
                if let (Some(log), Some((seq, line))) =
                    (&self.builder.prompt_log, request.prompt_line.take())
                {
                    log.put(seq, line).map_err(|e| Error::Run(e.to_string()))?;
                }
                part.build_s += t.elapsed().as_secs_f64();
                part.body_bytes += request.payload().len() as u64;
                let Input::Synthetic {
                    input_length,
                    hash_ids,
                } = &record.input
                else {
                    continue;
                };
                part.synthetic_records += 1;
                part.tokens += synth.content_len(*input_length);
                let needed = input_length.div_ceil(self.block_size);
                if !hash_ids.is_empty() && hash_ids.len() as u64 != needed {
                    part.hash_length_mismatches += 1;
                }
                if let Some(v) = part.verify.as_mut() {
                    if record.index % self.args.verify_every == 0 {
                        self.verify(
                            v,
                            synth,
                            &mut verify_cache,
                            record.index,
                            *input_length,
                            hash_ids,
                        );
                    }
                }
            }
        }
        part.block_cache_hits = cache.hits();
        part.block_cache_misses = cache.misses();
        Ok(part)
    }

    fn verify(
        &self,
        v: &mut Verification,
        synth: &prompt::PromptSynth,
        cache: &mut prompt::BlockCache,
        index: u64,
        input_length: u64,
        hash_ids: &[u64],
    ) {
        v.checked += 1;
        let checked = match verify::check_record(
            synth,
            self.counter,
            self.wrapping,
            cache,
            index,
            input_length,
            hash_ids,
        ) {
            Ok(c) => c,
            Err(e) => {
                v.fail(format!("record {index}: {e}"));
                return;
            }
        };
        let got = match self.length_of {
            LengthOf::Prompt => checked.server_tokens(),
            LengthOf::Content => checked.content_len as u64,
        };
        if got == input_length {
            v.exact += 1;
        } else if self.length_of == LengthOf::Prompt && input_length <= synth.overhead() {
            v.shorter_than_frame += 1;
            v.fail(format!(
                "record {index}: input_length {input_length} is not above the {} tokens the server adds",
                synth.overhead()
            ));
        } else {
            v.max_abs_diff = v.max_abs_diff.max(got.abs_diff(input_length));
            v.fail(format!(
                "record {index}: {got} tokens, input_length {input_length}"
            ));
        }
        // Every prefix of whole blocks: the same hash ids must mean the same token ids.
        let content = checked.content_ids();
        let b = self.block_size as usize;
        let mut ids_digest = DefaultHasher::new();
        let mut hash_digest = DefaultHasher::new();
        let mut prefixes = match self.prefixes.lock() {
            Ok(p) => p,
            Err(_) => return,
        };
        for (k, hash) in hash_ids.iter().enumerate() {
            if (k + 1) * b > content.len() {
                break;
            }
            hash.hash(&mut hash_digest);
            content[k * b..(k + 1) * b].hash(&mut ids_digest);
            let (key, ids) = (hash_digest.finish(), ids_digest.finish());
            match prefixes.get(&key) {
                Some(&earlier) => {
                    v.prefix_pairs_checked += 1;
                    if earlier != ids {
                        v.prefix_pairs_differing += 1;
                        v.fail(format!(
                            "record {index}: its first {} hash ids match an earlier record's but not its first {} token ids",
                            k + 1,
                            (k + 1) * b
                        ));
                    }
                }
                None => {
                    prefixes.insert(key, ids);
                }
            }
        }
    }
}

impl PromptsReport {
    fn add(&mut self, part: PromptsReport) {
        self.records += part.records;
        self.synthetic_records += part.synthetic_records;
        self.tokens += part.tokens;
        self.body_bytes += part.body_bytes;
        self.build_s += part.build_s;
        self.block_cache_hits += part.block_cache_hits;
        self.block_cache_misses += part.block_cache_misses;
        self.hash_length_mismatches += part.hash_length_mismatches;
        if let (Some(total), Some(v)) = (self.verify.as_mut(), part.verify) {
            total.checked += v.checked;
            total.exact += v.exact;
            total.shorter_than_frame += v.shorter_than_frame;
            total.max_abs_diff = total.max_abs_diff.max(v.max_abs_diff);
            total.prefix_pairs_checked += v.prefix_pairs_checked;
            total.prefix_pairs_differing += v.prefix_pairs_differing;
            for e in v.examples {
                total.fail(e);
            }
        }
    }
}

impl std::fmt::Display for PromptsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let row = |f: &mut std::fmt::Formatter<'_>, k: &str, v: String| writeln!(f, "{k:<40}{v}");
        row(f, "Records:", self.records.to_string())?;
        row(f, "Synthetic records:", self.synthetic_records.to_string())?;
        row(f, "Content tokens built:", self.tokens.to_string())?;
        row(
            f,
            "Server overhead per prompt (tokens):",
            self.overhead_tokens.to_string(),
        )?;
        row(f, "Threads:", self.threads.to_string())?;
        row(
            f,
            "Build time, all threads (s):",
            format!("{:.3}", self.build_s),
        )?;
        row(
            f,
            "Wall time incl. trace parsing (s):",
            format!("{:.3}", self.wall_s),
        )?;
        row(
            f,
            "Build throughput (M tokens/s/thread):",
            format!("{:.1}", self.tokens_per_s_per_thread / 1e6),
        )?;
        let lookups = (self.block_cache_hits + self.block_cache_misses).max(1);
        row(
            f,
            "Block cache hits:",
            format!(
                "{} of {} ({:.1} %)",
                self.block_cache_hits,
                lookups,
                100.0 * self.block_cache_hits as f64 / lookups as f64
            ),
        )?;
        row(
            f,
            "Hash ids disagreeing with length:",
            self.hash_length_mismatches.to_string(),
        )?;
        row(f, "Peak RSS (MiB):", format!("{:.1}", self.peak_rss_mb))?;
        if let Some(v) = &self.verify {
            row(f, "Verified prompts:", v.checked.to_string())?;
            row(f, "Exact length, ids intact:", v.exact.to_string())?;
            if v.shorter_than_frame > 0 {
                row(
                    f,
                    "Shorter than the template (cannot be exact):",
                    v.shorter_than_frame.to_string(),
                )?;
            }
            row(f, "Max abs length difference:", v.max_abs_diff.to_string())?;
            row(
                f,
                "Shared prefixes compared / differing:",
                format!("{} / {}", v.prefix_pairs_checked, v.prefix_pairs_differing),
            )?;
            for e in &v.examples {
                writeln!(f, "  {e}")?;
            }
        }
        Ok(())
    }
}

/// The process's peak resident set (`VmHWM`), 0 where /proc is not there.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
