//! What a run that got no answer can still find out about its endpoints, after the fact.

use std::time::Duration;

use super::setup::Fleet;
use crate::http::probe;

/// How long the after-the-fact TLS question may wait for each endpoint.
const TLS_QUESTION_TIMEOUT: Duration = Duration::from_secs(3);

impl Fleet {
    /// For a run in which nothing succeeded: the `http://` endpoints whose port answers a TLS
    /// ClientHello. Such a server closes a plain-HTTP request's connection without a byte of
    /// answer (OpenSSL and rustls both do), which the records can only call a reset; the
    /// advice names the `https://` URL to give instead. None when no endpoint is such.
    pub fn plain_http_to_tls(&self) -> Option<String> {
        let urls: Vec<String> = self
            .specs
            .iter()
            .zip(&self.addrs)
            .filter(|(s, _)| !s.endpoint.tls)
            .filter(|(s, addr)| probe::answers_tls(**addr, &s.endpoint.host, TLS_QUESTION_TIMEOUT))
            .map(|(s, _)| s.endpoint.url.clone())
            .collect();
        let first = urls.first()?;
        let verb = match urls.len() {
            1 => "serves",
            _ => "serve",
        };
        Some(format!(
            "{} {verb} TLS, and a TLS server closes a plain-HTTP request's connection without a \
             word: give https:// ({})",
            urls.join(", "),
            first.replacen("http://", "https://", 1)
        ))
    }
}
