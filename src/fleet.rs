//! The endpoints of a run and which one each record goes to.
//!
//! `--endpoint URL[,api=...][,model=...][,weight=N]` names one instance; a URL that ends in an
//! API path (`/v1/chat/completions`, `/v1/completions`), as trace-replayer's users type it,
//! selects that dialect and is cut back to its base for discovery. [`Router`] then picks an
//! endpoint per record in the pipeline, before the body is built, so each body is written in
//! its endpoint's dialect with its model.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::api::Api;
use crate::http::endpoint::Endpoint;
use crate::trace::TraceRecord;

/// One `--endpoint`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    /// The base URL (an API path the user gave is cut off).
    pub endpoint: Endpoint,
    pub api: Api,
    /// `model=`: overrides `--model` and discovery for this endpoint.
    pub model: Option<String>,
    /// Share of the records under `round-robin` and `session` (relative to the others).
    pub weight: u32,
}

/// What is wrong with an `--endpoint URL[,key=value...]`: each names the text given.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Url(#[from] crate::http::endpoint::EndpointError),
    #[error("--endpoint {text:?}: expected key=value after the URL, got {part:?}")]
    NotKeyValue { text: String, part: String },
    #[error("--endpoint {text:?}: {message}")]
    Api { text: String, message: String },
    #[error("--endpoint {0:?}: weight must be a whole number above 0")]
    Weight(String),
    #[error("--endpoint {text:?}: unknown key {key:?} (api, model, weight)")]
    UnknownKey { text: String, key: String },
    #[error("--endpoint {url}: the path {path} is the {by_path} API, but {said} was asked for; drop the path or the api")]
    PathAndApi {
        url: String,
        path: &'static str,
        by_path: &'static str,
        said: &'static str,
    },
}

/// A bad `--endpoint` is the user's to fix (exit status 1).
impl From<SpecError> for crate::error::Error {
    fn from(e: SpecError) -> Self {
        crate::error::Error::Usage(e.to_string())
    }
}

impl EndpointSpec {
    /// Parses `URL[,key=value...]`; `api` is `--api` when the user gave it (a URL path that
    /// contradicts it is an error), and `default_api` applies when neither says.
    pub fn parse(
        text: &str,
        api: Option<Api>,
        default_api: Api,
    ) -> Result<EndpointSpec, SpecError> {
        let mut parts = text.split(',');
        let url = parts.next().unwrap_or_default();
        let mut endpoint = Endpoint::parse(url)?;
        let from_path = crate::api::REGISTRY.iter().find_map(|&api| {
            api.url_paths()
                .iter()
                .find(|path| endpoint.base_path.ends_with(*path))
                .map(|&path| (path, api))
        });
        let mut spec_api = None;
        let mut model = None;
        let mut weight = 1;
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(|| SpecError::NotKeyValue {
                text: text.to_string(),
                part: part.to_string(),
            })?;
            match key.trim() {
                "api" => {
                    spec_api =
                        Some(
                            value
                                .trim()
                                .parse::<Api>()
                                .map_err(|message| SpecError::Api {
                                    text: text.to_string(),
                                    message,
                                })?,
                        )
                }
                "model" if !value.trim().is_empty() => model = Some(value.trim().to_string()),
                "weight" => {
                    weight = value
                        .trim()
                        .parse()
                        .ok()
                        .filter(|w| *w > 0)
                        .ok_or_else(|| SpecError::Weight(text.to_string()))?
                }
                other => {
                    return Err(SpecError::UnknownKey {
                        text: text.to_string(),
                        key: other.to_string(),
                    })
                }
            }
        }
        let stated = spec_api.or(api);
        let api = match (from_path, stated) {
            (Some((path, by_path)), Some(said)) if by_path != said => {
                return Err(SpecError::PathAndApi {
                    url: url.to_string(),
                    path,
                    by_path: by_path.name(),
                    said: said.name(),
                })
            }
            (Some((_, by_path)), _) => by_path,
            (None, Some(said)) => said,
            (None, None) => default_api,
        };
        if let Some((path, _)) = from_path {
            let base = endpoint.base_path.len() - path.len();
            endpoint.base_path.truncate(base);
            endpoint.url.truncate(endpoint.url.len() - path.len());
        }
        Ok(EndpointSpec {
            endpoint,
            api,
            model,
            weight,
        })
    }
}

crate::choices! {
    /// `--route`.
    #[derive(Default)]
    pub enum Route {
        /// Records in turn, by record number (each endpoint `weight` times per round).
        #[default]
        RoundRobin = "round-robin",
        /// All turns of a conversation (Bailian `parent_chat_id` chains, `session_id`) and all
        /// records that share their first hash id on one endpoint, as a KV-aware router places
        /// them; groups are spread by weight.
        Session = "session",
        /// The endpoint with the fewest requests in flight (relative to its weight), decided by
        /// the sender when the request is due, among the endpoints its body suits (same dialect
        /// and model); the pipeline picks among different bodies when it builds.
        LeastInflight = "least-inflight",
    }
}

impl Route {}

/// Requests in flight per endpoint, kept by the senders as they send and record, read by
/// `least-inflight` routing.
#[derive(Debug)]
pub struct Load {
    in_flight: Vec<AtomicU64>,
    weights: Vec<u32>,
}

impl Load {
    pub fn new(weights: &[u32]) -> Load {
        Load {
            in_flight: weights.iter().map(|_| AtomicU64::new(0)).collect(),
            weights: weights.to_vec(),
        }
    }

    pub fn started(&self, endpoint: usize) {
        self.in_flight[endpoint].fetch_add(1, Ordering::Relaxed);
    }

    pub fn finished(&self, endpoint: usize) {
        self.in_flight[endpoint].fetch_sub(1, Ordering::Relaxed);
    }

    /// The least loaded of `among` (in flight per unit of weight; the first on a tie).
    pub fn least_loaded(&self, among: &[u32]) -> u32 {
        let load = |e: u32| {
            let e = e as usize;
            // Cross-multiplied: a/wa < b/wb without division.
            (
                self.in_flight[e].load(Ordering::Relaxed),
                u64::from(self.weights[e]),
            )
        };
        *among
            .iter()
            .reduce(|best, e| {
                let ((b, wb), (c, wc)) = (load(*best), load(*e));
                if c * wb < b * wc {
                    e
                } else {
                    best
                }
            })
            .expect("an endpoint")
    }
}

/// Conversations remembered for `session` routing; past this the table starts afresh, and a
/// turn whose parent was forgotten is placed by its first hash id (a Bailian child's first
/// blocks are its conversation's, so it still lands with its root).
const MAX_REMEMBERED_CHATS: usize = 4 << 20;

/// Picks each record's endpoint. Called in trace order, under the reader's lock.
pub struct Router {
    route: Route,
    /// `least-inflight`: the load, and one endpoint of each group that takes the same body.
    load: Option<(Arc<Load>, Vec<u32>)>,
    /// Endpoint indexes, each as often as its weight, interleaved (smooth weighted
    /// round-robin), so that a round spreads every endpoint's share evenly.
    slots: Vec<u32>,
    /// Bailian chat id -> the endpoint its conversation went to.
    chats: HashMap<i64, u32>,
}

impl Router {
    pub fn new(route: Route, weights: &[u32]) -> Router {
        Router {
            route,
            load: None,
            slots: interleave(weights),
            chats: HashMap::new(),
        }
    }

    /// `least-inflight` over `load`; `bodies` holds one endpoint per group of endpoints that
    /// take the same body (the sender then picks within the group).
    pub fn least_inflight(load: Arc<Load>, bodies: Vec<u32>, weights: &[u32]) -> Router {
        Router {
            load: Some((load, bodies)),
            ..Router::new(Route::LeastInflight, weights)
        }
    }

    /// The endpoint is picked again when the request is due (`least-inflight` over several):
    /// [`Router::pick`] names only the group.
    pub fn picks_when_due(&self) -> bool {
        self.load.is_some() && self.slots.len() > 1
    }

    pub fn pick(&mut self, record: &TraceRecord) -> u32 {
        if self.slots.len() == 1 {
            return 0;
        }
        match (self.route, &self.load) {
            (Route::LeastInflight, Some((load, bodies))) => load.least_loaded(bodies),
            (Route::RoundRobin | Route::LeastInflight, _) => self.slot(record.index),
            (Route::Session, _) => self.session(record),
        }
    }

    fn slot(&self, key: u64) -> u32 {
        self.slots[(key % self.slots.len() as u64) as usize]
    }

    fn session(&mut self, record: &TraceRecord) -> u32 {
        let ids = &record.ids;
        let parent = ids
            .parent_chat_id
            .filter(|p| *p >= 0)
            .and_then(|p| self.chats.get(&p).copied());
        let endpoint = match (parent, &ids.session_id, record.hash_ids().first()) {
            (Some(endpoint), _, _) => endpoint,
            (None, Some(session), _) => self.slot(hash_of(session)),
            (None, None, Some(first)) => self.slot(hash_of(first)),
            (None, None, None) => match ids.chat_id {
                Some(chat) => self.slot(hash_of(&chat)),
                None => self.slot(record.index),
            },
        };
        if let Some(chat) = ids.chat_id {
            if self.chats.len() >= MAX_REMEMBERED_CHATS {
                self.chats.clear();
            }
            self.chats.insert(chat, endpoint);
        }
        endpoint
    }
}

/// A hash that is the same in every process and on every host (FNV-1a), so a rerun places
/// every group where it went before.
fn hash_of(key: &impl Hash) -> u64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            // FNV's low bits are weak for small integer keys: mix before the modulo.
            let mut x = self.0;
            x ^= x >> 33;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            x ^ (x >> 33)
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    key.hash(&mut h);
    h.finish()
}

/// Smooth weighted round-robin (as nginx does): weights [3, 1] give [0, 0, 1, 0].
fn interleave(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    (0..total)
        .map(|_| {
            for (c, &w) in current.iter_mut().zip(weights) {
                *c += i64::from(w);
            }
            let best = (0..weights.len())
                .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
                .expect("at least one endpoint");
            current[best] -= total;
            best as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Input, TraceIds};

    fn record(index: u64, ids: TraceIds, hash_ids: Vec<u64>) -> TraceRecord {
        TraceRecord {
            index,
            line: index + 1,
            timestamp_ms: Some(index as f64),
            input: Input::Synthetic {
                input_length: 16 * hash_ids.len().max(1) as u64,
                hash_ids,
            },
            output_length: Some(1),
            ids,
            extra: None,
        }
    }

    #[test]
    fn endpoint_urls_with_api_paths_select_the_dialect() {
        let chat = EndpointSpec::parse("http://h:8000/v1/chat/completions", None, Api::OpenaiChat)
            .unwrap();
        assert_eq!(chat.api, Api::OpenaiChat);
        assert_eq!(chat.endpoint.url, "http://h:8000");
        assert_eq!(chat.endpoint.request_path("/v1/models"), "/v1/models");
        let comp = EndpointSpec::parse("http://h:8000/proxy/v1/completions", None, Api::OpenaiChat)
            .unwrap();
        assert_eq!(comp.api, Api::OpenaiCompletions);
        assert_eq!(comp.endpoint.request_path("/v1/models"), "/proxy/v1/models");
        // A path that contradicts --api, or the endpoint's own api=, is refused.
        let err = EndpointSpec::parse(
            "http://h:8000/v1/chat/completions",
            Some(Api::OpenaiCompletions),
            Api::OpenaiChat,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/v1/chat/completions") && err.contains("openai-completions"));
        assert!(EndpointSpec::parse(
            "http://h/v1/completions,api=openai-chat",
            None,
            Api::OpenaiChat
        )
        .is_err());
        let full = EndpointSpec::parse(
            "https://h,api=openai-completions,model=m1,weight=3",
            Some(Api::OpenaiChat),
            Api::OpenaiChat,
        )
        .unwrap();
        assert_eq!(
            (full.api, full.model.as_deref(), full.weight),
            (Api::OpenaiCompletions, Some("m1"), 3)
        );
        for bad in [
            "http://h,weight=0",
            "http://h,colour=red",
            "http://h,api=grpc",
            "http://h,x",
        ] {
            assert!(
                EndpointSpec::parse(bad, None, Api::OpenaiChat).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn least_inflight_picks_the_least_loaded_per_weight() {
        let load = Load::new(&[1, 1, 2]);
        assert_eq!(load.least_loaded(&[0, 1, 2]), 0, "a tie goes to the first");
        load.started(0);
        assert_eq!(load.least_loaded(&[0, 1, 2]), 1);
        load.started(1);
        load.started(2);
        assert_eq!(
            load.least_loaded(&[0, 1, 2]),
            2,
            "1 of weight 2 is the lightest"
        );
        load.started(2);
        load.finished(0);
        assert_eq!(load.least_loaded(&[0, 1, 2]), 0);
        assert_eq!(load.least_loaded(&[1, 2]), 1, "only among the given ones");
    }

    #[test]
    fn weighted_round_robin_interleaves_by_weight() {
        assert_eq!(interleave(&[1, 1, 1]), vec![0, 1, 2]);
        assert_eq!(interleave(&[3, 1]), vec![0, 0, 1, 0]);
        let mut router = Router::new(Route::RoundRobin, &[2, 1]);
        let picks: Vec<u32> = (0..6)
            .map(|i| router.pick(&record(i, TraceIds::default(), vec![])))
            .collect();
        assert_eq!(picks.iter().filter(|&&e| e == 0).count(), 4);
    }

    #[test]
    fn session_routing_keeps_conversations_and_first_blocks_together() {
        let mut router = Router::new(Route::Session, &[1, 1, 1, 1]);
        let chat = |index, chat: i64, parent: i64, hashes: Vec<u64>| {
            record(
                index,
                TraceIds {
                    chat_id: Some(chat),
                    parent_chat_id: Some(parent),
                    ..TraceIds::default()
                },
                hashes,
            )
        };
        let mut roots = Vec::new();
        for c in 0..40i64 {
            let root = router.pick(&chat(c as u64, c, -1, vec![1000 + c as u64]));
            // A child whose first block differs still follows its parent's chain.
            let child = router.pick(&chat(100 + c as u64, 100 + c, c, vec![5000 + c as u64]));
            let grandchild = router.pick(&chat(200 + c as u64, 200 + c, 100 + c, vec![]));
            assert_eq!((child, grandchild), (root, root), "conversation {c}");
            roots.push(root);
        }
        assert!(roots.iter().any(|&e| e != roots[0]), "conversations spread");
        // Records sharing a first hash id, and turns sharing a session id, meet.
        let a = router.pick(&record(1, TraceIds::default(), vec![7, 8]));
        let b = router.pick(&record(2, TraceIds::default(), vec![7, 9, 10]));
        assert_eq!(a, b);
        let s = |i| TraceIds {
            session_id: Some(format!("s{i}")),
            ..TraceIds::default()
        };
        let picks: Vec<u32> = (0..3)
            .map(|i| router.pick(&record(i, s(5), vec![i + 50])))
            .collect();
        assert!(picks.iter().all(|&p| p == picks[0]), "{picks:?}");
    }
}
