//! Reading real and generated traces of both formats.

use llmreplay::trace::{detect_format, inspect, Format, TraceReader};

mod common;
use common::mooncake;

#[test]
fn real_mooncake_traces_read_completely() {
    for (name, lines) in [
        ("conversation_trace.jsonl", 12_031),
        ("synthetic_trace.jsonl", 3_993),
    ] {
        let path = mooncake(name);
        assert_eq!(
            detect_format(&path, Format::Auto).unwrap(),
            Format::Mooncake
        );
        let stats = inspect::scan(&path, Format::Mooncake, 512, Default::default()).unwrap();
        assert_eq!(stats.records, lines);
        // tests/data/mooncake/SOURCE.md: len(hash_ids) == ceil(input_length/512) for every record of both files.
        assert_eq!(stats.hash_length_mismatches, 0);
        assert!(stats.prefix_hit_tokens > 0 && stats.prefix_hit_tokens < stats.input_tokens);
    }
}

#[test]
fn bailian_records_in_seconds_and_gzip() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("llmreplay-bailian-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    writeln!(gz, r#"{{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40, "output_length": 7, "type": "text", "turn": 1, "hash_ids": [0, 1, 2]}}"#).unwrap();
    writeln!(gz, r#"{{"chat_id": 1, "parent_chat_id": 0, "timestamp": 1.5, "input_length": 50, "output_length": 3, "type": "text", "turn": 2, "hash_ids": [0, 1, 3, 4]}}"#).unwrap();
    gz.finish().unwrap();
    assert_eq!(detect_format(&path, Format::Auto).unwrap(), Format::Bailian);
    let records: Vec<_> = TraceReader::open(&path, Format::Bailian)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records[1].timestamp_ms, Some(1500.0));
    assert_eq!(records[1].ids.parent_chat_id, Some(0));
    let stats = inspect::scan(&path, Format::Bailian, 16, Default::default()).unwrap();
    assert_eq!(stats.span_ms, 1500.0);
    assert_eq!(stats.prefix_hit_tokens, 32, "two 16-token blocks reused");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// How a trace opens (what a replay opens connections for before its start): records within
/// a window of trace time after the first one, the first one being trace time 0.
#[test]
fn opening_counts_records_within_the_window_after_the_first() {
    let dir = std::env::temp_dir().join(format!("llmreplay-opening-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.jsonl");
    let lines: Vec<String> = [5000, 5500, 5999, 6000, 9000]
        .iter()
        .map(|t| {
            format!(
                r#"{{"timestamp": {t}, "input_length": 10, "output_length": 2, "hash_ids": [1]}}"#
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let stats = inspect::scan(&path, Format::Mooncake, 512, Default::default()).unwrap();
    assert_eq!(stats.opening_count(1000.0), 3);
    assert_eq!(stats.opening_count(4000.5), 5);
    assert_eq!(stats.opening_count(0.0), 0);
}

/// A format forced on the other kind of trace is refused at its first record, naming the
/// field, instead of replaying 1000x too fast or too slow.
#[test]
fn a_forced_format_that_does_not_fit_is_refused_with_the_field() {
    let dir = std::env::temp_dir().join(format!("llmreplay-forced-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bailian = dir.join("bailian.jsonl");
    std::fs::write(
        &bailian,
        r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 16, "output_length": 2, "type": "text", "turn": 1, "hash_ids": [1]}"#,
    )
    .unwrap();
    let mooncake = mooncake("conversation_trace.jsonl");
    for (path, format, field, advice) in [
        (&mooncake, Format::Bailian, "chat_id", "--format mooncake"),
        (&bailian, Format::Mooncake, "chat_id", "--format bailian"),
    ] {
        let err = inspect::scan(path, format, 16, Default::default())
            .err()
            .unwrap_or_else(|| panic!("{format:?} on {} accepted", path.display()));
        let text = err.to_string();
        assert!(
            text.contains(&format!("{}:1:", path.display())),
            "names file and line: {text}"
        );
        assert!(text.contains(field) && text.contains(advice), "{text}");
        assert_eq!(err.exit_code(), 1);
    }
    // auto picks each correctly.
    assert_eq!(
        detect_format(&bailian, Format::Auto).unwrap(),
        Format::Bailian
    );
    assert_eq!(
        detect_format(&mooncake, Format::Auto).unwrap(),
        Format::Mooncake
    );
}
