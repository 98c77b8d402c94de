//! `--request-id-header`, `--no-traceparent`, `--session-header`, checked.

use crate::cli::identity::IdentityArgs;
use crate::error::{Error, Result};
use crate::pipeline::identity::{Identity, SESSION_PRESETS};

/// What each request says of itself; the run's id joins it when the run starts
/// ([`IdentityPlan::for_run`]).
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityPlan {
    pub request_id_header: Option<String>,
    pub traceparent: bool,
    pub session_header: Option<String>,
}

impl IdentityPlan {
    pub fn from_args(a: &IdentityArgs) -> Result<IdentityPlan> {
        let request_id_header = match a.request_id_header.as_str() {
            "none" => None,
            name => Some(header_name("--request-id-header", name)?),
        };
        let session_header = a
            .session_header
            .as_deref()
            .map(
                |name| match SESSION_PRESETS.iter().find(|(p, _)| *p == name) {
                    Some((_, header)) => Ok(header.to_string()),
                    None => header_name("--session-header", name),
                },
            )
            .transpose()?;
        if let (Some(id), Some(session)) = (&request_id_header, &session_header) {
            if id.eq_ignore_ascii_case(session) {
                return Err(Error::Usage(format!(
                    "--request-id-header and --session-header both name {id}: give each its own"
                )));
            }
        }
        Ok(IdentityPlan {
            request_id_header,
            traceparent: !a.no_traceparent,
            session_header,
        })
    }

    /// The identity of the run `run` (its id, or the trace's digest where a shard has none).
    pub fn for_run(&self, run: &str) -> Identity {
        Identity::new(
            run,
            self.request_id_header.clone(),
            self.traceparent,
            self.session_header.clone(),
        )
    }
}

/// A header name (RFC 9110's token) that is none of the tool's own.
fn header_name(flag: &str, name: &str) -> Result<String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(Error::Usage(format!(
            "{flag} {name:?}: a header name is letters, digits and !#$%&'*+-.^_`|~"
        )));
    }
    const OWN: [&str; 6] = [
        "content-length",
        "transfer-encoding",
        "host",
        "connection",
        "traceparent",
        "x-llmreplay-index",
    ];
    if OWN.iter().any(|own| name.eq_ignore_ascii_case(own)) {
        return Err(Error::Usage(format!(
            "{flag} {name}: llmreplay sends that header itself; pick another name"
        )));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(request: &str, traceparent: bool, session: Option<&str>) -> Result<IdentityPlan> {
        IdentityPlan::from_args(&IdentityArgs {
            request_id_header: request.into(),
            no_traceparent: !traceparent,
            session_header: session.map(str::to_string),
        })
    }

    #[test]
    fn presets_names_and_refusals() {
        let p = plan("X-Request-Id", true, Some("dynamo")).unwrap();
        assert_eq!(p.session_header.as_deref(), Some("X-Dynamo-Session-ID"));
        assert_eq!(p.request_id_header.as_deref(), Some("X-Request-Id"));
        let p = plan("none", false, Some("x-my-session")).unwrap();
        assert_eq!(
            (
                p.request_id_header,
                p.traceparent,
                p.session_header.as_deref()
            ),
            (None, false, Some("x-my-session"))
        );
        for (bad, why) in [
            (plan("X Id", true, None), "letters, digits"),
            (
                plan("x-request-id", true, Some("content-length")),
                "sends that header",
            ),
            (plan("traceparent", true, None), "sends that header"),
            (plan("x-a", true, Some("X-A")), "both name"),
            (plan("x-a", true, Some("")), "letters, digits"),
        ] {
            let e = bad.unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
