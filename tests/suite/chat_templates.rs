//! Chat templates of every family at hand: exact prompt lengths for chat and completions on
//! each bundled tokenizer and template (`common::TOKENIZERS`, `common::TEMPLATES`), and each
//! way the frame check refuses a template it cannot make exact, with its own test.
//!
//! The frame is what a server puts around the synthetic content. The templates here do what
//! broke earlier measurements: trim the content (Llama 3, Gemma), open with a default system
//! prompt that holds the probe's own tokens (SmolLM2), print today's date (Llama 3.2, GPT-OSS),
//! fold the system message into the first user turn (Gemma), talk in channels (GPT-OSS), and
//! rewrite earlier answers (DeepSeek-R1).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::json;

use llmreplay::prompt::{FrameError, PromptCounter, SafeVocab, Wrapping};

use crate::common;
use common::{mooncake, path, temp_dir, template_config, tokenizer, TEMPLATES, TOKENIZERS};

/// `llmreplay prompts --verify` of every record of the first 40 of the conversation trace.
fn verify(tokenizer: &Path, config: Option<&Path>, api: &str) -> (u64, u64, u64) {
    let trace = mooncake("conversation_trace.jsonl");
    let mut args = vec![
        "--trace",
        path(&trace),
        "--tokenizer",
        path(tokenizer),
        "--api",
        api,
        "--max-requests",
        "40",
        "--verify",
        "--verify-every",
        "1",
    ];
    if let Some(config) = config {
        args.extend(["--tokenizer-config", path(config)]);
    }
    let report = crate::prompt_synthesis::prompts(&args);
    let v = report.verify.expect("verified");
    assert_eq!(
        v.prefix_pairs_differing, 0,
        "{api} {tokenizer:?} {config:?}"
    );
    assert_eq!(
        v.exact, v.checked,
        "{api} {tokenizer:?} {config:?}: {:?}",
        v.examples
    );
    (v.checked, v.exact, report.overhead_tokens)
}

#[test]
fn every_family_is_exact_for_chat_and_completions() {
    let qwen3 = tokenizer("qwen3");
    let mut zoo: Vec<(String, PathBuf, Option<PathBuf>)> = TOKENIZERS
        .iter()
        .map(|f| (f.to_string(), tokenizer(f), None))
        .collect();
    zoo.extend(
        TEMPLATES
            .iter()
            .map(|t| (t.to_string(), qwen3.clone(), Some(template_config(t)))),
    );
    for (name, tok, config) in &zoo {
        let (checked, exact, overhead) = verify(tok, config.as_deref(), "openai-chat");
        assert_eq!((checked, exact), (40, 40), "{name} chat");
        assert!(overhead > 0, "{name}: a chat template adds tokens");
        let (checked, exact, _) = verify(tok, config.as_deref(), "openai-completions");
        assert_eq!((checked, exact), (40, 40), "{name} completions");
    }
}

/// SmolLM2's default system prompt is part of every prompt's head: it holds the probe's
/// first token (" a"), which must not be taken for the content.
#[test]
fn a_default_system_prompt_holding_the_probe_is_head_not_content() {
    let family = Family::load(&tokenizer("smollm2"), None);
    let frame = family.counter.frame(Wrapping::Chat, &family.vocab).unwrap();
    let rendered = family
        .counter
        .render_chat(&json!([{"role": "user", "content": " a"}]), None)
        .unwrap();
    let head_text = rendered
        .split("<|im_start|>user\n")
        .next()
        .unwrap()
        .to_string()
        + "<|im_start|>user\n";
    assert!(head_text.contains(" a helpful"), "{head_text}");
    let head_ids = family.counter.content_ids(&head_text).unwrap();
    assert_eq!(frame.head, head_ids.len() as u64);
    let tail_ids = family
        .counter
        .content_ids("<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    assert_eq!(frame.tail, tail_ids.len() as u64);
}

/// Templates that trim the content drop the first token's space: its bare word is one token
/// too (the safe table's guarantee), so the count and the frame hold.
#[test]
fn a_template_that_trims_the_content_keeps_an_exact_frame() {
    let family = Family::qwen3(Some(&template_config("llama3-style")));
    let frame = family.counter.frame(Wrapping::Chat, &family.vocab).unwrap();
    let ids = family
        .counter
        .chat_ids(&json!([{"role": "user", "content": " hello world"}]), None)
        .unwrap();
    let own = family.counter.content_ids(" hello world").unwrap();
    assert_eq!(ids.len() as u64, own.len() as u64 + frame.total());
    let at = frame.head as usize;
    assert_eq!(
        family.counter.decode(&ids[at..at + 1]).unwrap(),
        "hello",
        "the content starts right after the head, trimmed"
    );
}

/// A template that writes the content twice adds more around a longer content.
#[test]
fn a_template_that_repeats_the_content_is_refused() {
    let family = Family::with_template(
        "repeats",
        "{{ messages[0]['content'] }}\n---\n{{ messages[0]['content'] }}",
    );
    match family.counter.frame(Wrapping::Chat, &family.vocab) {
        Err(FrameError::NotFixed { one, other }) => assert_ne!(one, other),
        other => panic!("{other:?}"),
    }
}

/// A template that ends with something of the content's own: the count is fixed, the text
/// after the content is not.
#[test]
fn a_template_whose_ending_depends_on_the_content_is_refused() {
    let family = Family::with_template(
        "echoes",
        "<<{{ messages[0]['content'] }}>>{{ messages[0]['content'].split(' ')[1] }}",
    );
    let err = family
        .counter
        .frame(Wrapping::Chat, &family.vocab)
        .unwrap_err();
    assert_eq!(err, FrameError::EndingDiffers);
    assert!(err.to_string().contains("different text"), "{err}");
}

/// A template that reorders the content's words keeps the count, not the tokens.
#[test]
fn a_template_that_rewrites_the_content_is_refused() {
    let family = Family::with_template(
        "reverses",
        "<<{{ messages[0]['content'].split(' ') | reverse | join(' ') }}>>",
    );
    let err = family
        .counter
        .frame(Wrapping::Chat, &family.vocab)
        .unwrap_err();
    assert!(matches!(err, FrameError::ContentChanged { .. }), "{err:?}");
    assert!(err.to_string().contains("rewrites the content"), "{err}");
}

/// Carry-forward needs earlier answers back whole: a template that leaves them out, or cuts
/// them, cannot keep a carried turn exact. DeepSeek-R1's, which only drops what precedes a
/// `</think>`, keeps an answer without one.
#[test]
fn a_template_that_drops_or_cuts_earlier_answers_cannot_carry() {
    for (name, assistant) in [("drops", ""), ("cuts", "{{ m['content'][:40] }}")] {
        let template = format!(
            "{{% for m in messages %}}{{% if m['role'] == 'assistant' %}}A:{assistant}\n\
             {{% else %}}U:{{{{ m['content'] }}}}\n{{% endif %}}{{% endfor %}}A:"
        );
        let family = Family::with_template(name, &template);
        assert!(
            family.counter.frame(Wrapping::Chat, &family.vocab).is_ok(),
            "{name}"
        );
        assert_eq!(
            family.counter.turn_overhead(&family.vocab),
            Err(FrameError::DropsHistory),
            "{name}"
        );
    }
    let r1 = Family::qwen3(Some(&template_config("deepseek-r1")));
    let overhead = r1.counter.turn_overhead(&r1.vocab).unwrap();
    assert!(overhead > 0);
}

/// A template that prints the date gets today's, as the server renders it: the analysis is
/// kept under the day's name, and counts the same as a fresh one.
#[test]
fn a_dated_template_is_analysed_per_day() {
    let cache = temp_dir("dated-cache");
    let config = template_config("llama3-style");
    let qwen3 = tokenizer("qwen3");
    let file = qwen3.join("tokenizer.json");
    let (first, _) =
        llmreplay::prompt::analysis::load_or_make(&file, Some(&config), None, Some(&cache))
            .unwrap();
    let (again, _) =
        llmreplay::prompt::analysis::load_or_make(&file, Some(&config), None, Some(&cache))
            .unwrap();
    assert!(matches!(
        again.source,
        llmreplay::prompt::analysis::Source::Cached(_)
    ));
    assert_eq!(first.frame(Wrapping::Chat), again.frame(Wrapping::Chat));
    let day = &first.digest[first.digest.len() - 9..];
    assert!(
        day.starts_with('@') && day[1..].bytes().all(|b| b.is_ascii_digit()),
        "{}",
        first.digest
    );
}

/// A tokenizer with its safe table, and a counter with a template.
struct Family {
    counter: PromptCounter,
    vocab: SafeVocab,
}

impl Family {
    fn load(dir: &Path, config: Option<&Path>) -> Family {
        let (tok, file) = llmreplay::prompt::load_tokenizer(dir).unwrap();
        let vocab = SafeVocab::from_tokenizer(&tok, &file).unwrap();
        Family {
            counter: PromptCounter::new(tok, &file, config).unwrap(),
            vocab,
        }
    }

    fn qwen3(config: Option<&Path>) -> Family {
        static VOCAB: OnceLock<Vec<(u32, String)>> = OnceLock::new();
        let (tok, file) = llmreplay::prompt::load_tokenizer(&tokenizer("qwen3")).unwrap();
        let pieces = VOCAB.get_or_init(|| {
            let v = SafeVocab::from_tokenizer(&tok, &file).unwrap();
            (0..v.len())
                .map(|i| (v.id(i), v.text(i).to_string()))
                .collect()
        });
        let pieces: Vec<(u32, &str)> = pieces.iter().map(|(i, t)| (*i, t.as_str())).collect();
        Family {
            counter: PromptCounter::new(tok, &file, config).unwrap(),
            vocab: SafeVocab::from_checked_pieces(&pieces).unwrap(),
        }
    }

    /// Qwen3's tokenizer with `template` as its chat template.
    fn with_template(name: &str, template: &str) -> Family {
        let dir = temp_dir(name);
        let config = dir.join("tokenizer_config.json");
        std::fs::write(&config, json!({ "chat_template": template }).to_string()).unwrap();
        Family::qwen3(Some(&config))
    }
}

/// `--thinking off` renders Qwen3's template with `enable_thinking` false (an empty think
/// block after the generation prompt: 4 more tokens) and sends it in `chat_template_kwargs`;
/// the mock counts each request as its kwargs say, so every length is exact either way, and
/// a count made with the other setting would not be.
#[test]
fn thinking_on_and_off_are_counted_as_the_server_renders_them() {
    let qwen3 = tokenizer("qwen3");
    let mock = common::MockProcess::start(&["--tokenizer", path(&qwen3), "--ttft-ms", "1"]);
    let dir = temp_dir("thinking");
    let trace = mooncake("conversation_trace.jsonl");
    let mut overheads = Vec::new();
    for thinking in ["on", "off"] {
        let out = dir.join(thinking);
        let status = common::replay_against(&mock, &trace, &out)
            .args(["--tokenizer", path(&qwen3), "--max-requests", "20"])
            .args(["--time-scale", "100", "--thinking", thinking])
            .status()
            .unwrap();
        assert!(status.success(), "{thinking}");
        let m = &common::read_json(&out.join("summary.json"))["input_length_match"];
        assert_eq!(
            (&m["checked"], &m["exact"]),
            (&json!(20), &json!(20)),
            "{m}"
        );
        let run = common::read_json(&out.join("run.json"));
        assert_eq!(run["thinking"], thinking);
        assert_eq!(
            run["extra_body"]["chat_template_kwargs"]["enable_thinking"],
            thinking == "on"
        );
        overheads.push(run["prompt_overhead_tokens"].as_u64().unwrap());
    }
    assert!(overheads[1] > overheads[0], "{overheads:?}");
}

/// `--thinking` where no chat template kwargs travel, or against `--extra-body`'s own.
#[test]
fn thinking_is_refused_where_it_cannot_be_sent() {
    let trace = mooncake("conversation_trace.jsonl");
    for (args, says) in [
        (
            vec!["--thinking", "on", "--api", "openai-completions"],
            "does not carry",
        ),
        (
            vec![
                "--thinking",
                "off",
                "--extra-body",
                r#"{"chat_template_kwargs":{"enable_thinking":true}}"#,
            ],
            "disagree",
        ),
    ] {
        let out = common::bin()
            .args(["replay", "--mock", "--trace", path(&trace)])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
