//! Who a request is, on the wire: the header lines a producer writes in front of each body so
//! that a server's logs, a router and a tracing backend can follow it. `X-Request-Id` is the
//! run's id and the record's index; `traceparent` (W3C Trace Context) carries a trace id
//! drawn from the same two, so every shard of a run sends what one process would; the
//! session header names the record's conversation (or agentic task), for routers that keep a
//! session on one worker.

use std::io::Write;

use crate::digest::fnv1a;
use crate::rng::SplitMix64;

/// `--session-header` presets: the routers' own names.
pub const SESSION_PRESETS: [(&str, &str); 3] = [
    ("affinity", "X-Session-Affinity"),
    ("dynamo", "X-Dynamo-Session-ID"),
    ("session-id", "X-Session-Id"),
];

/// What is sent, as the plan checked it ([`crate::plan::IdentityPlan`]), with the run's id
/// (as run.json's `request_identity` states it).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Identity {
    /// Every request id is `RUN-INDEX`.
    run: String,
    /// The run id's digest: the key of every trace id.
    #[serde(skip)]
    key: u64,
    request_id_header: Option<String>,
    traceparent: bool,
    session_header: Option<String>,
}

/// Where trace ids are drawn from, apart from the prompts' streams.
const TRACE_STREAM: u64 = 0x7472_6163_6570_6172; // "traceparent"

impl Identity {
    pub fn new(
        run: &str,
        request_id_header: Option<String>,
        traceparent: bool,
        session_header: Option<String>,
    ) -> Identity {
        Identity {
            run: run.to_string(),
            key: fnv1a(run.as_bytes()),
            request_id_header,
            traceparent,
            session_header,
        }
    }

    /// The W3C trace id and parent span id of record `index` (never zero, which W3C
    /// reserves); None without `traceparent`.
    pub fn trace(&self, index: u64) -> Option<(u128, u64)> {
        if !self.traceparent {
            return None;
        }
        let mut rng = SplitMix64::new(self.key, TRACE_STREAM, index);
        let trace = (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())).max(1);
        Some((trace, rng.next_u64().max(1)))
    }

    /// The trace id of record `index` as written in its record and its `traceparent`.
    pub fn trace_id(&self, index: u64) -> Option<String> {
        self.trace(index).map(|(trace, _)| format!("{trace:032x}"))
    }

    /// Record `index`'s header lines, each ending in CRLF; `session` is its conversation's
    /// (or task's) id, where it has one.
    pub fn write_lines(&self, out: &mut Vec<u8>, index: u64, session: Option<&str>) {
        if let Some(name) = &self.request_id_header {
            let _ = write!(out, "{name}: {}-{index}\r\n", self.run);
        }
        if let Some((trace, span)) = self.trace(index) {
            let _ = write!(out, "traceparent: 00-{trace:032x}-{span:016x}-01\r\n");
        }
        if let (Some(name), Some(session)) = (&self.session_header, session) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            header_value(out, session);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `value` as a header value: visible ASCII as it is, any other byte (and `%`) as `%XX`,
/// so a trace's id can never end the line or the head.
fn header_value(out: &mut Vec<u8>, value: &str) {
    for &b in value.as_bytes() {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            0x21..=0x7e => out.push(b),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(id: &Identity, index: u64, session: Option<&str>) -> String {
        let mut out = Vec::new();
        id.write_lines(&mut out, index, session);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_record_has_its_own_ids_and_the_same_ones_in_every_process() {
        let a = Identity::new("run-1", Some("X-Request-Id".into()), true, None);
        let b = Identity::new("run-1", Some("X-Request-Id".into()), true, None);
        let other = Identity::new("run-2", Some("X-Request-Id".into()), true, None);
        let seven = lines(&a, 7, None);
        assert_eq!(seven, lines(&b, 7, None), "one run, one set of ids");
        assert!(seven.starts_with("X-Request-Id: run-1-7\r\ntraceparent: 00-"));
        let tp = seven
            .lines()
            .nth(1)
            .unwrap()
            .trim_start_matches("traceparent: ");
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(
            (parts[0], parts[1].len(), parts[2].len(), parts[3]),
            ("00", 32, 16, "01")
        );
        assert_eq!(Some(parts[1].to_string()), a.trace_id(7));
        assert_ne!(a.trace_id(7), a.trace_id(8), "every record its own trace");
        assert_ne!(a.trace_id(7), other.trace_id(7), "every run its own traces");
        // The low half is what ratio samplers read: it must not count up with the index.
        let low: Vec<u64> = (0..64).map(|i| a.trace(i).unwrap().0 as u64).collect();
        assert!(low.iter().filter(|&&l| l < u64::MAX / 2).count() > 16);
        assert!(low.iter().filter(|&&l| l >= u64::MAX / 2).count() > 16);
    }

    #[test]
    fn a_session_id_cannot_break_the_head() {
        let id = Identity::new("r", None, false, Some("X-Session-Affinity".into()));
        assert_eq!(
            lines(&id, 1, Some("chat 9\r\nHost: evil%")),
            "X-Session-Affinity: chat%209%0D%0AHost:%20evil%25\r\n"
        );
        assert_eq!(lines(&id, 1, None), "", "no session, no header");
        let none = Identity::new("r", None, false, None);
        assert_eq!(lines(&none, 1, Some("s")), "");
        assert_eq!(none.trace_id(1), None);
    }
}
