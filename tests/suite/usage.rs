//! Exit statuses exactly as the README says: 1 for a usage error (clap's own included), 0 for
//! --help and --version; replay options given without the subcommand get a hint.

use crate::common;
use common::bin;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    for args in [
        &["replay", "--bogus"][..],
        &["replay"],                                                // missing --trace
        &["replay", "--trace", "t", "--api", "grpc"],               // bad value
        &[],                                                        // no subcommand
        &["replay", "--trace", "t", "--mock", "--num-sender", "0"], // the plan's check
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: the error is said");
    }
    let (code, out, _) = run(&["replay", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--route"));
    let (code, out, _) = run(&["--version"]);
    assert_eq!((code, out.starts_with("llmreplay ")), (0, true));
}

#[test]
fn replay_options_without_the_subcommand_suggest_it() {
    let (code, _, err) = run(&["--tokenizer", "tok", "--trace", "t.jsonl"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("llmreplay replay --tokenizer tok --trace t.jsonl"),
        "{err}"
    );
}
