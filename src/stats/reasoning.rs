//! What reasoning models and tool calls did in a run: how many answers reasoned, how many ended
//! inside their thinking (a TTFT, no TTFO), and how their output split between reasoning and
//! answer tokens.

use serde_json::{json, Value};

use crate::record::RequestRecord;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reasoning {
    /// Successful answers that reasoned.
    pub answers: u64,
    /// Of them, those that ended before any answer token.
    pub ended_in_thinking: u64,
    pub reasoning_tokens: u64,
    /// Their output tokens less their reasoning tokens.
    pub answer_tokens: u64,
    /// Tool calls made by successful answers, and the answers that made any.
    pub tool_calls: u64,
    pub tool_call_answers: u64,
}

impl Reasoning {
    /// Adds a successful record.
    pub fn add(&mut self, r: &RequestRecord) {
        if let Some(n) = r.reasoning_tokens {
            self.answers += 1;
            self.ended_in_thinking += u64::from(r.ended_in_thinking());
            self.reasoning_tokens += n;
            self.answer_tokens += r.answer_tokens().unwrap_or(0);
        }
        if let Some(n) = r.tool_calls {
            self.tool_calls += n;
            self.tool_call_answers += 1;
        }
    }

    pub fn any(&self) -> bool {
        self.answers > 0 || self.tool_calls > 0
    }

    pub fn to_json(&self) -> Value {
        json!({
            "answers_reasoned": self.answers,
            "ended_in_thinking": self.ended_in_thinking,
            "reasoning_tokens": self.reasoning_tokens,
            "answer_tokens": self.answer_tokens,
            "tool_calls": self.tool_calls,
            "answers_with_tool_calls": self.tool_call_answers,
        })
    }

    /// The summary.txt lines, when there is anything to say.
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.answers > 0 {
            out.push((
                "Answers that reasoned:".to_string(),
                format!(
                    "{} ({} ended in their thinking: TTFT, no TTFO)",
                    self.answers, self.ended_in_thinking
                ),
            ));
            out.push((
                "Reasoning / answer tokens:".to_string(),
                format!("{} / {}", self.reasoning_tokens, self.answer_tokens),
            ));
        }
        if self.tool_calls > 0 {
            out.push((
                "Tool calls:".to_string(),
                format!("{} in {} answers", self.tool_calls, self.tool_call_answers),
            ));
        }
        out
    }
}
