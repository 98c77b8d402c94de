//! Reading real and generated traces of both formats.

use llmreplay::trace::{detect_format, inspect, Format, TraceFile, TraceReader};

use crate::common;
use common::mooncake;

#[test]
fn real_mooncake_traces_read_completely() {
    for (name, lines) in [
        ("conversation_trace.jsonl", 12_031),
        ("synthetic_trace.jsonl", 3_993),
    ] {
        let path = mooncake(name);
        assert_eq!(
            detect_format(&TraceFile::plain(&path), Format::Auto, false).unwrap(),
            Format::Mooncake
        );
        let stats = inspect::scan(
            &TraceFile::plain(&path),
            Format::Mooncake,
            512,
            Default::default(),
        )
        .unwrap();
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
    assert_eq!(
        detect_format(&TraceFile::plain(&path), Format::Auto, false).unwrap(),
        Format::Bailian
    );
    let records: Vec<_> = TraceReader::open(&TraceFile::plain(&path), Format::Bailian)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records[1].timestamp_ms, Some(1500.0));
    assert_eq!(records[1].ids.parent_chat_id, Some(0));
    let stats = inspect::scan(
        &TraceFile::plain(&path),
        Format::Bailian,
        16,
        Default::default(),
    )
    .unwrap();
    assert_eq!(stats.span_ms, 1500.0);
    assert_eq!(stats.prefix_hit_tokens, 32, "two 16-token blocks reused");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The scan keeps every timestamp in reading order: the effective schedule (and so the
/// connections opened before the start) is computed from them.
#[test]
fn the_scan_keeps_every_timestamp_in_reading_order() {
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
    let stats = inspect::scan(
        &TraceFile::plain(&path),
        Format::Mooncake,
        512,
        Default::default(),
    )
    .unwrap();
    assert_eq!(
        stats.timestamps_ms,
        [5000.0, 5500.0, 5999.0, 6000.0, 9000.0]
    );
    assert_eq!(stats.first_timestamp_ms, 5000.0);
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
        let err = inspect::scan(&TraceFile::plain(path), format, 16, Default::default())
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
        detect_format(&TraceFile::plain(&bailian), Format::Auto, false).unwrap(),
        Format::Bailian
    );
    assert_eq!(
        detect_format(&TraceFile::plain(&mooncake), Format::Auto, false).unwrap(),
        Format::Mooncake
    );
}

fn sample(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/formats")
        .join(name)
}

/// The Azure and BurstGPT samples written for the tests: detected from their headers, read
/// in ms with their lengths, no hash ids (unique blocks), BurstGPT's Session ID kept.
#[test]
fn azure_and_burstgpt_csv_traces_read_with_their_timing() {
    let azure = sample("azure_sample.csv");
    assert_eq!(
        detect_format(&TraceFile::plain(&azure), Format::Auto, false).unwrap(),
        Format::Azure
    );
    let records: Vec<_> = TraceReader::open(&TraceFile::plain(&azure), Format::Azure)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 6);
    let t0 = records[0].timestamp_ms.unwrap();
    let gap = records[1].timestamp_ms.unwrap() - t0;
    assert!((gap - 4314.579).abs() < 1e-3, "{gap}");
    assert_eq!(
        (records[2].input_length(), records[2].output_length),
        (Some(879), Some(55))
    );
    assert!(records.iter().all(|r| r.hash_ids().is_empty()));
    assert_eq!(records[0].line, 2, "line 1 is the header");

    let burst = sample("burstgpt_sample.csv");
    assert_eq!(
        detect_format(&TraceFile::plain(&burst), Format::Auto, false).unwrap(),
        Format::Burstgpt
    );
    let records: Vec<_> = TraceReader::open(&TraceFile::plain(&burst), Format::Burstgpt)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 5);
    assert_eq!(records[2].timestamp_ms, Some(118_000.0));
    assert_eq!(records[3].timestamp_ms, Some(118_500.0));
    assert_eq!(records[2].ids.session_id.as_deref(), Some("101"));
    assert_eq!(records[3].ids.session_id, None);
    assert_eq!(records[3].output_length, Some(0));
    let stats = inspect::scan(
        &TraceFile::plain(&burst),
        Format::Burstgpt,
        512,
        Default::default(),
    )
    .unwrap();
    assert_eq!(stats.records, 5);
    assert_eq!(stats.prefix_hit_tokens, 0, "no hash ids: nothing shared");
}

#[test]
fn bad_csv_lines_name_file_line_and_column() {
    let dir = std::env::temp_dir().join(format!("llmreplay-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (format, name, text, says) in [
        (
            Format::Azure,
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\nsoon,10,5\n",
            ":3: column `TIMESTAMP`",
        ),
        (
            Format::Azure,
            "b.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,ten,5\n",
            ":2: column `ContextTokens`",
        ),
        (
            Format::Burstgpt,
            "c.csv",
            "Timestamp,Model,Request tokens,Response tokens\n1,m,5,-3\n",
            ":2: column `Response tokens`",
        ),
        (
            Format::Burstgpt,
            "d.csv",
            "Timestamp,Model,Request tokens\n1,m,5\n",
            ":1: missing column `Response tokens`",
        ),
        (
            Format::Azure,
            "e.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,5\n",
            ":2: column `ContextTokens`: must be at least 1",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = TraceReader::open(&TraceFile::plain(&path), format)
            .and_then(|r| r.collect::<Result<Vec<_>, _>>())
            .expect_err(name)
            .to_string();
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }
}

/// A CSV trace goes through the same pipeline: exact lengths from unique blocks, BurstGPT's
/// sessions replayed turn after turn.
#[test]
fn a_burstgpt_trace_replays_with_exact_lengths() {
    let dir = std::env::temp_dir().join(format!("llmreplay-csv-replay-{}", std::process::id()));
    let out = dir.join("run");
    let status = common::bin()
        .args([
            "replay",
            "--mock",
            "--quiet",
            "--force",
            "--time-scale",
            "100",
        ])
        .arg("--trace")
        .arg(sample("burstgpt_sample.csv"))
        .arg("--tokenizer")
        .arg(common::tokenizer("qwen3"))
        .arg("--output")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let rows = common::read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), 5);
    for r in &rows {
        assert_eq!(r["prompt_tokens"], r["input_tokens"], "{r}");
    }
    let second = rows.iter().find(|r| r["index"] == 2).unwrap();
    assert_eq!(
        (
            second["session_id"].as_str(),
            second["parent_index"].as_u64()
        ),
        (Some("101"), Some(0))
    );
}
