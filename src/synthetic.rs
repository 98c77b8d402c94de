//! `--synthetic input=1024,output=256[,input-stddev=N][,prefix-share=F]`: load without a trace.
//!
//! The records are written as a Mooncake trace (in the run directory as
//! `synthetic_trace.jsonl`, so the same load can be replayed later) and then replayed like any
//! other through the same pipeline: no second sending path. Their times come from the load
//! mode (`--rate` or `--concurrency`); the first `prefix-share` of every prompt is one shared
//! run of blocks (a system prompt every request repeats), the rest unique.

use std::io::Write;
use std::path::Path;

use crate::rng::SplitMix64;

/// Lengths and sharing of the generated requests.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SyntheticSpec {
    pub input: u64,
    pub output: u64,
    pub input_stddev: f64,
    pub prefix_share: f64,
}

/// Hash ids of unique blocks start here, far above the shared prefix's.
const UNIQUE_BASE: u64 = 1 << 40;

impl SyntheticSpec {
    pub fn parse(spec: &str) -> Result<SyntheticSpec, String> {
        let mut s = SyntheticSpec {
            input: 0,
            output: 0,
            input_stddev: 0.0,
            prefix_share: 0.0,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or(format!("--synthetic {spec:?}: {part:?} is not KEY=VALUE"))?;
            let bad = || format!("--synthetic: {key}={value:?} is not a valid number");
            match key {
                "input" => s.input = value.parse().map_err(|_| bad())?,
                "output" => s.output = value.parse().map_err(|_| bad())?,
                "input-stddev" => s.input_stddev = value.parse().map_err(|_| bad())?,
                "prefix-share" => s.prefix_share = value.parse().map_err(|_| bad())?,
                _ => {
                    return Err(format!(
                        "--synthetic: unknown key {key:?} (input, output, input-stddev, \
                         prefix-share)"
                    ))
                }
            }
        }
        if s.input == 0 {
            return Err("--synthetic needs input=N (tokens, at least 1)".into());
        }
        if !(s.input_stddev >= 0.0 && s.input_stddev.is_finite()) {
            return Err("--synthetic: input-stddev must be 0 or more".into());
        }
        if !(0.0..=1.0).contains(&s.prefix_share) {
            return Err("--synthetic: prefix-share is a fraction from 0 to 1".into());
        }
        Ok(s)
    }

    /// Writes `n` records (seeded lengths) as a Mooncake trace with `block_size`-token blocks.
    pub fn write_trace(
        &self,
        n: u64,
        seed: u64,
        block_size: u32,
        path: &Path,
    ) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        let b = u64::from(block_size.max(1));
        let mut rng = SplitMix64(seed ^ 0x0005_1e7e_0c1d_a7a5);
        let mut unique = UNIQUE_BASE;
        for i in 0..n {
            let len = if self.input_stddev > 0.0 {
                let z = rng.normal();
                (self.input as f64 + z * self.input_stddev).round().max(1.0) as u64
            } else {
                self.input
            };
            let blocks = len.div_ceil(b);
            let shared = ((self.prefix_share * self.input as f64) as u64 / b).min(len / b);
            let ids: Vec<u64> = (0..blocks)
                .map(|k| {
                    if k < shared {
                        k
                    } else {
                        unique += 1;
                        unique
                    }
                })
                .collect();
            serde_json::to_writer(
                &mut out,
                &serde_json::json!({"timestamp": i, "input_length": len,
                                    "output_length": self.output, "hash_ids": ids}),
            )?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_refuse() {
        let s = SyntheticSpec::parse("input=1024,output=256,prefix-share=0.5").unwrap();
        assert_eq!((s.input, s.output, s.prefix_share), (1024, 256, 0.5));
        for bad in [
            "output=5",
            "input=x",
            "input=5,colour=red",
            "input=5,prefix-share=2",
        ] {
            assert!(SyntheticSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn records_share_the_prefix_and_spread_by_the_stddev() {
        let dir = std::env::temp_dir().join(format!("llmreplay-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.jsonl");
        let spec =
            SyntheticSpec::parse("input=1024,output=8,input-stddev=100,prefix-share=0.5").unwrap();
        spec.write_trace(2000, 1, 16, &path).unwrap();
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let lens: Vec<f64> = rows
            .iter()
            .map(|r| r["input_length"].as_f64().unwrap())
            .collect();
        let mean = lens.iter().sum::<f64>() / lens.len() as f64;
        let sd = (lens.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / lens.len() as f64).sqrt();
        assert!(
            (mean - 1024.0).abs() < 10.0 && (sd - 100.0).abs() < 8.0,
            "{mean} {sd}"
        );
        for r in &rows {
            let ids: Vec<u64> = serde_json::from_value(r["hash_ids"].clone()).unwrap();
            let len = r["input_length"].as_u64().unwrap();
            assert_eq!(ids.len() as u64, len.div_ceil(16));
            let shared = (512 / 16).min(len / 16) as usize;
            assert_eq!(ids[..shared], (0..shared as u64).collect::<Vec<_>>()[..]);
            assert!(ids[shared..].iter().all(|&h| h > UNIQUE_BASE));
        }
    }
}
