//! Endpoint base URLs (`http://host:port[/prefix]`, `https://...`).

use std::net::{SocketAddr, ToSocketAddrs};

/// `%XX` escapes of a URL's user info, decoded (invalid ones are kept as written).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(match i <= chunk.len() {
                true => A[(n >> (18 - 6 * i) & 63) as usize] as char,
                false => '=',
            });
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as the user gave it, without a trailing slash.
    pub url: String,
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix before the API path, without a trailing slash ("" or "/proxy").
    pub base_path: String,
    /// `user:pass@` of the URL, sent as Basic auth; never part of `url` or any message.
    pub credentials: Option<String>,
}

/// What is wrong with an endpoint URL, or with finding its host. The URL in each is the one
/// printed everywhere: without its credentials.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("endpoint {0:?}: expected http://host:port or https://host:port")]
    Scheme(String),
    #[error("endpoint {0:?}: unclosed '[' in host")]
    UnclosedBracket(String),
    #[error("endpoint {0:?}: no host")]
    NoHost(String),
    #[error("endpoint {url:?}: invalid port {port:?}")]
    Port { url: String, port: String },
    #[error("endpoint {url}: cannot resolve {host}: {source}")]
    Resolve {
        url: String,
        host: String,
        source: std::io::Error,
    },
    #[error("endpoint {url}: {host} has no address")]
    NoAddress { url: String, host: String },
}

/// A bad endpoint is the user's to fix (exit status 1).
impl From<EndpointError> for crate::error::Error {
    fn from(e: EndpointError) -> Self {
        crate::error::Error::Usage(e.to_string())
    }
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let url = url.trim().trim_end_matches('/');
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(EndpointError::Scheme(url.to_string()));
        };
        let (authority, path) = rest
            .find('/')
            .map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
        let (credentials, authority) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                let credentials = percent_decoded(userinfo);
                crate::secrets::register(userinfo);
                crate::secrets::register(&credentials);
                if let Some((_, password)) = credentials.split_once(':') {
                    crate::secrets::register(password);
                }
                crate::secrets::register(&base64(credentials.as_bytes()));
                (Some(credentials), host)
            }
            None => (None, authority),
        };
        let scheme = if tls { "https" } else { "http" };
        // The URL as printed and saved: without the credentials.
        let url = format!("{scheme}://{authority}{path}");
        let url = url.as_str();
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let close = v6
                .find(']')
                .ok_or_else(|| EndpointError::UnclosedBracket(url.to_string()))?;
            let port = v6[close + 1..].strip_prefix(':');
            (&v6[..close], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(EndpointError::NoHost(url.to_string()));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => p.parse().map_err(|_| EndpointError::Port {
                url: url.to_string(),
                port: p.to_string(),
            })?,
        };
        Ok(Endpoint {
            url: url.to_string(),
            tls,
            host: host.to_string(),
            port,
            base_path: path.to_string(),
            credentials,
        })
    }

    /// The `Authorization` line of the URL's credentials.
    pub fn basic_auth(&self) -> Option<String> {
        let c = self.credentials.as_ref()?;
        Some(format!("Authorization: Basic {}\r\n", base64(c.as_bytes())))
    }

    /// The request target for an API path such as `/v1/chat/completions`: a base URL that
    /// already ends in `/v1`, or in the whole API path, is not doubled.
    pub fn request_path(&self, api_path: &str) -> String {
        if self.base_path.ends_with(api_path) {
            return self.base_path.clone();
        }
        match (
            self.base_path.strip_suffix("/v1"),
            api_path.strip_prefix("/v1"),
        ) {
            (Some(_), Some(rest)) => format!("{}{rest}", self.base_path),
            _ => format!("{}{api_path}", self.base_path),
        }
    }

    /// The request line and fixed headers of every request of a run to `api_path` (the
    /// senders add the body's length and the body).
    pub fn request_head(&self, api_path: &str, stream: bool, headers: &str) -> Vec<u8> {
        let accept = match stream {
            true => "text/event-stream",
            false => "application/json",
        };
        format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: llmreplay/{}\r\nAccept: {accept}\r\nContent-Type: application/json\r\n{headers}",
            self.request_path(api_path),
            self.host_header(),
            env!("CARGO_PKG_VERSION"),
        )
        .into_bytes()
    }

    /// The `Host` header value.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host (at start-up; DNS is blocking).
    pub fn resolve(&self) -> Result<SocketAddr, EndpointError> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|source| EndpointError::Resolve {
                url: self.url.clone(),
                host: self.host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| EndpointError::NoAddress {
                url: self.url.clone(),
                host: self.host.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_become_basic_auth_and_leave_the_url() {
        let e = Endpoint::parse("http://al%40ice:s3cret@h:8000/v1").unwrap();
        assert_eq!(e.url, "http://h:8000/v1");
        assert_eq!((e.host.as_str(), e.port), ("h", 8000));
        // base64("al@ice:s3cret")
        assert_eq!(
            e.basic_auth().unwrap(),
            "Authorization: Basic YWxAaWNlOnMzY3JldA==\r\n"
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
        assert!(Endpoint::parse("http://h:1")
            .unwrap()
            .basic_auth()
            .is_none());
    }

    #[test]
    fn parses_and_builds_paths() {
        let e = Endpoint::parse("http://127.0.0.1:8000/").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.base_path.as_str()),
            (false, "127.0.0.1", 8000, "")
        );
        assert_eq!(e.request_path("/v1/completions"), "/v1/completions");
        assert_eq!(e.host_header(), "127.0.0.1:8000");
        let e = Endpoint::parse("https://api.example.com/v1").unwrap();
        assert_eq!((e.tls, e.port), (true, 443));
        assert_eq!(
            e.request_path("/v1/chat/completions"),
            "/v1/chat/completions"
        );
        assert_eq!(e.host_header(), "api.example.com");
        let e = Endpoint::parse("http://[::1]:9/proxy").unwrap();
        assert_eq!(e.host, "::1");
        assert_eq!(e.request_path("/generate"), "/proxy/generate");
        assert_eq!(e.host_header(), "[::1]:9");
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://x:port").is_err());
    }
}
