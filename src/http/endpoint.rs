//! Endpoint base URLs (`http://host:port[/prefix]`, `https://...`).

use std::net::{SocketAddr, ToSocketAddrs};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as the user gave it, without a trailing slash.
    pub url: String,
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix before the API path, without a trailing slash ("" or "/proxy").
    pub base_path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = url.trim().trim_end_matches('/');
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(format!(
                "endpoint {url:?}: expected http://host:port or https://host:port"
            ));
        };
        let (authority, path) = rest
            .find('/')
            .map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let close = v6
                .find(']')
                .ok_or_else(|| format!("endpoint {url:?}: unclosed '[' in host"))?;
            let port = v6[close + 1..].strip_prefix(':');
            (&v6[..close], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("endpoint {url:?}: no host"));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => p
                .parse()
                .map_err(|_| format!("endpoint {url:?}: invalid port {p:?}"))?,
        };
        Ok(Endpoint {
            url: url.to_string(),
            tls,
            host: host.to_string(),
            port,
            base_path: path.to_string(),
        })
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
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("endpoint {}: cannot resolve {}: {e}", self.url, self.host))?
            .next()
            .ok_or_else(|| format!("endpoint {}: {} has no address", self.url, self.host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
