//! `--scenario NAME`: a checked-in file (`assets/scenarios/NAME.json`, compiled in) that fixes
//! every replay option affecting the numbers (format, carry-forward, sessions, warmup and
//! measure-from, fresh prompts, SLOs), so that runs of one scenario compare. The options are
//! added to the command line before it is parsed; a user option the scenario fixes is
//! refused, whatever its value (the run would no longer be the scenario's), and run.json
//! states the scenario followed ([`Scenario::stamp`]).

use std::ffi::OsString;

use serde::Deserialize;

/// The scenarios shipped, by name: one per public agentic trace whose format is read.
const SCENARIOS: [(&str, &str); 3] = [
    (
        "tracelab-agentic",
        include_str!("../../assets/scenarios/tracelab-agentic.json"),
    ),
    (
        "weka-agentx",
        include_str!("../../assets/scenarios/weka-agentx.json"),
    ),
    (
        "mooncake-toolagent",
        include_str!("../../assets/scenarios/mooncake-toolagent.json"),
    ),
];

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub about: String,
    /// What trace it is for.
    pub trace: String,
    /// Each fixed option with its values (none for a flag).
    pub options: Vec<Vec<String>>,
}

impl Scenario {
    /// The scenario named `name`, or why not (naming those there are).
    pub fn named(name: &str) -> Result<Scenario, String> {
        let (_, text) = SCENARIOS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            format!(
                "--scenario {name}: no such scenario; there are: {}",
                SCENARIOS.map(|(n, _)| n).join(", ")
            )
        })?;
        serde_json::from_str(text).map_err(|e| format!("scenario {name}: {e}"))
    }

    /// The options as command-line words.
    pub fn words(&self) -> impl Iterator<Item = &String> {
        self.options.iter().flatten()
    }

    /// What run.json keeps: its name, the file's digest, and every option it fixed.
    pub fn stamp(&self) -> serde_json::Value {
        let text = SCENARIOS
            .iter()
            .find(|(n, _)| *n == self.name)
            .map_or("", |(_, t)| t);
        serde_json::json!({
            "name": self.name,
            "followed": true,
            "digest": format!("fnv1a64:{:016x}", crate::digest::fnv1a(text.as_bytes())),
            "options": self.options,
        })
    }
}

/// The command line with the scenario's options added (for `replay` and `sweep` given
/// `--scenario NAME`), or why it cannot hold. Other command lines pass unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !matches!(words.get(1).map(String::as_str), Some("replay" | "sweep")) {
        return Ok(args);
    }
    let name = words
        .iter()
        .enumerate()
        .find_map(|(i, w)| match w.strip_prefix("--scenario") {
            Some("") => words.get(i + 1).cloned(),
            Some(rest) => rest.strip_prefix('=').map(String::from),
            None => None,
        });
    let Some(name) = name else {
        return Ok(args);
    };
    let scenario = Scenario::named(&name)?;
    for option in &scenario.options {
        let Some(flag) = option.first() else {
            continue;
        };
        let given = words[2..]
            .iter()
            .any(|w| w == flag || w.starts_with(&format!("{flag}=")));
        if given {
            return Err(format!(
                "{flag}: the scenario {name} fixes it ({}); leave it out, or run without \
                 --scenario",
                option.join(" ")
            ));
        }
    }
    let mut out = args;
    out.extend(scenario.words().map(OsString::from));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn every_shipped_scenario_parses_and_fixes_options_replay_knows() {
        for (name, _) in SCENARIOS {
            let s = Scenario::named(name).unwrap();
            assert_eq!(s.name, name);
            let mut args = line(&["llmreplay", "replay", "--mock", "--trace", "t.csv"]);
            args.extend(s.words().map(OsString::from));
            let parsed = <crate::cli::Cli as clap::Parser>::try_parse_from(args);
            assert!(parsed.is_ok(), "{name}: {parsed:?}");
        }
    }

    #[test]
    fn a_fixed_option_given_again_is_refused() {
        let e = expand(line(&[
            "llmreplay",
            "replay",
            "--scenario",
            "tracelab-agentic",
            "--measure-from",
            "start",
        ]))
        .unwrap_err();
        assert!(
            e.contains(
                "--measure-from: the scenario tracelab-agentic fixes it (--measure-from mid)"
            ),
            "{e}"
        );
        let e = expand(line(&["llmreplay", "replay", "--scenario=x"])).unwrap_err();
        assert!(
            e.contains("there are: tracelab-agentic, weka-agentx, mooncake-toolagent"),
            "{e}"
        );
        let ok = expand(line(&[
            "llmreplay",
            "replay",
            "--scenario",
            "tracelab-agentic",
        ]))
        .unwrap();
        assert!(ok.len() > 4);
        let other = line(&["llmreplay", "report", "--scenario", "x"]);
        assert_eq!(expand(other.clone()).unwrap(), other);
    }
}
