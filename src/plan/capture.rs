//! `capture`'s options, checked: the upstream found, the tokenizer loaded, the key read.

use std::path::PathBuf;

use crate::capture::links::SESSION_HEADERS;
use crate::capture::parts::{Parts, Rotation};
use crate::capture::{random_secret, BlockHasher, CaptureConfig, Openings, Server};
use crate::cli::CaptureArgs;
use crate::error::{Error, Result};
use crate::http::endpoint::Endpoint;
use crate::prompt::analysis;
use crate::transport::{ClientTls, TlsOptions};

/// Block sizes a hash id may cover.
const BLOCK_SIZES: std::ops::RangeInclusive<usize> = 1..=65_536;

/// A checked `capture` command.
pub struct CapturePlan {
    pub listen: std::net::SocketAddr,
    /// The upstreams as printed (no credentials).
    pub upstream_urls: Vec<String>,
    pub output: PathBuf,
    /// `--rotate-records`, `--rotate-seconds`.
    pub rotation: Rotation,
    /// The hash ids' key came from `--key-file` (else a random one).
    pub keyed: bool,
    pub config: CaptureConfig,
}

impl CapturePlan {
    pub fn from_args(a: &CaptureArgs) -> Result<CapturePlan> {
        if !BLOCK_SIZES.contains(&a.block_size) {
            return Err(Error::Usage(format!(
                "--block-size {}: give 1 to {} tokens",
                a.block_size,
                BLOCK_SIZES.end()
            )));
        }
        if !(a.sample > 0.0 && a.sample <= 1.0) {
            return Err(Error::Usage(format!(
                "--sample {}: give the share of conversations to write, above 0 and at most 1 \
                 (0.1 writes one in ten)",
                a.sample
            )));
        }
        let rotation = rotation(a)?;
        let first = Parts::path(&a.output, &rotation, 0);
        if first.exists() && !a.force {
            return Err(Error::Usage(format!(
                "--output {}: {} exists; give --force to overwrite it",
                a.output.display(),
                first.display()
            )));
        }
        let secret = match &a.key_file {
            Some(path) => read_key(path)?,
            None => random_secret().map_err(Error::Run)?.to_vec(),
        };
        let upstreams = upstreams(a)?;
        // The analysis prompt synthesis makes (and caches) measures the template's opening.
        let file = crate::prompt::tokenizer_file(&a.tokenizer)?;
        let cache = analysis::cache_dir(|k| std::env::var(k).ok());
        let (analysis, counter) =
            analysis::load_or_make(&file, a.tokenizer_config.as_deref(), None, cache.as_deref())?;
        let openings = Openings::of(&analysis);
        Ok(CapturePlan {
            listen: a.listen,
            upstream_urls: upstreams.iter().map(|u| u.url.clone()).collect(),
            output: a.output.clone(),
            rotation,
            keyed: a.key_file.is_some(),
            config: CaptureConfig {
                upstreams,
                tls: match (&a.tls_cert, &a.tls_key) {
                    (Some(cert), Some(key)) => {
                        Some(crate::transport::tls::server_config(cert, key)?)
                    }
                    _ => None,
                },
                counter,
                openings,
                hasher: BlockHasher::new(&secret, a.block_size),
                max_requests: a.max_requests,
                session_headers: a
                    .session_header
                    .iter()
                    .cloned()
                    .chain(SESSION_HEADERS.iter().map(|h| h.to_string()))
                    .collect(),
                sample: a.sample,
            },
        })
    }
}

/// `--upstream URL`, each: a server's root, resolved, its TLS set up for `https://`.
fn upstreams(a: &CaptureArgs) -> Result<Vec<Server>> {
    let mut client_tls = None;
    a.upstream
        .iter()
        .map(|url| {
            let upstream = Endpoint::parse(url)?;
            if !upstream.base_path.is_empty() {
                return Err(Error::Usage(format!(
                    "--upstream {}: give the server's root (http://HOST:PORT): each request \
                     keeps the path the client sent",
                    upstream.url
                )));
            }
            let tls = match upstream.tls {
                true => {
                    if client_tls.is_none() {
                        let options = TlsOptions {
                            ca_cert: a.ca_cert.clone(),
                            insecure: a.insecure,
                        };
                        client_tls = Some(ClientTls::new(&options)?);
                    }
                    let client = client_tls.as_ref().expect("made above");
                    Some(client.target(&upstream.host)?)
                }
                false => None,
            };
            Ok(Server {
                addr: upstream.resolve()?,
                tls,
                url: upstream.url.clone(),
            })
        })
        .collect()
}

/// `--rotate-records N` (at least 1), `--rotate-seconds S` (above 0).
fn rotation(a: &CaptureArgs) -> Result<Rotation> {
    if a.rotate_records == Some(0) {
        return Err(Error::Usage(
            "--rotate-records 0: give the lines a part holds, at least 1".into(),
        ));
    }
    if let Some(s) = a.rotate_seconds.filter(|s| !(*s > 0.0 && s.is_finite())) {
        return Err(Error::Usage(format!(
            "--rotate-seconds {s}: give the seconds a part spans, above 0"
        )));
    }
    Ok(Rotation {
        records: a.rotate_records,
        seconds: a.rotate_seconds,
    })
}

/// `--key-file`: its bytes, at least 16 of them.
fn read_key(path: &std::path::Path) -> Result<Vec<u8>> {
    let key = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if key.len() < 16 {
        return Err(Error::Usage(format!(
            "--key-file {}: {} bytes; a key needs at least 16 (e.g. `head -c 32 /dev/urandom > \
             FILE`)",
            path.display(),
            key.len()
        )));
    }
    Ok(key)
}
