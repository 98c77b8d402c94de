//! llama.cpp's server: each answer's `timings` object (the last stream event, or the whole
//! body's top level): `prompt_ms`, the prompt's evaluation (its uncached tokens, `prompt_n`,
//! after `cache_n` cached), and `predicted_ms`, the answer's generation. It does not time the
//! queue.

use memchr::memmem::Finder;

use super::{duration, ServerPhases};

/// The key of the object in an answer.
pub const KEY: &[u8] = b"\"timings\":";

/// Pre-built finders of the keys inside `timings`.
pub struct Reader {
    prompt_ms: Finder<'static>,
    predicted_ms: Finder<'static>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            prompt_ms: Finder::new(b"\"prompt_ms\":"),
            predicted_ms: Finder::new(b"\"predicted_ms\":"),
        }
    }
}

impl Reader {
    /// The phases in the `timings` object that `object` starts with (its bytes up to the
    /// event's end); None when it holds no prompt time.
    pub fn read(&self, object: &[u8]) -> Option<ServerPhases> {
        let end = memchr::memchr(b'}', object).map_or(object.len(), |at| at + 1);
        let object = &object[..end];
        Some(ServerPhases {
            prefill_ms: Some(ms_after(object, &self.prompt_ms)?),
            decode_ms: ms_after(object, &self.predicted_ms),
            ..ServerPhases::default()
        })
    }
}

/// The phases of a whole body's `timings`.
pub fn from_value(v: &serde_json::Value) -> Option<ServerPhases> {
    let t = v.get("timings")?;
    let ms = |k: &str| {
        t.get(k)
            .and_then(serde_json::Value::as_f64)
            .and_then(duration)
    };
    Some(ServerPhases {
        prefill_ms: Some(ms("prompt_ms")?),
        decode_ms: ms("predicted_ms"),
        ..ServerPhases::default()
    })
}

/// The non-negative number after `key`.
fn ms_after(object: &[u8], key: &Finder) -> Option<f64> {
    let at = key.find(object)? + key.needle().len();
    let rest = object[at..].trim_ascii_start();
    let len = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        .count();
    duration(std::str::from_utf8(&rest[..len]).ok()?.parse().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_stream_events_timings_and_a_bodys() {
        // llama-server's last chat stream event (b6xxx), as it sent it.
        let event = br#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":31,"total_tokens":34,"prompt_tokens_details":{"cached_tokens":24}},"timings":{"cache_n":24,"prompt_n":7,"prompt_ms":47.005,"prompt_per_token_ms":6.715000000000001,"prompt_per_second":148.92032762472078,"predicted_n":3,"predicted_ms":35.093,"predicted_per_token_ms":17.5465,"predicted_per_second":56.99142279086997}}"#;
        let at = memchr::memmem::find(event, KEY).unwrap() + KEY.len();
        let phases = Reader::default().read(&event[at..]).unwrap();
        assert_eq!(
            (phases.prefill_ms, phases.decode_ms),
            (Some(47.005), Some(35.093))
        );
        assert_eq!(phases.ttft_ms(), Some(47.005));
        let body: serde_json::Value = serde_json::from_slice(&event[..]).unwrap();
        assert_eq!(from_value(&body), Some(phases));
        // No prompt time, or a nonsense one: nothing.
        assert_eq!(Reader::default().read(br#"{"predicted_ms":3}"#), None);
        assert_eq!(Reader::default().read(br#"{"prompt_ms":-1}"#), None);
        assert_eq!(
            from_value(&serde_json::json!({"timings": {"prompt_ms": "x"}})),
            None
        );
    }
}
