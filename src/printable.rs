//! Text a server wrote, made safe to print: every control character (ESC and the other C0
//! and C1 codes, newlines included) and every bidirectional override is written as its Rust
//! escape (`\u{1b}`), so that a 500 body cannot retitle or clear the user's terminal, break
//! a line of summary.txt, or reorder what report.html shows.
//!
//! Applied where server text enters the outputs: each record's error message as it is made,
//! and each message a summary keeps (so a summary rendered from older records is safe too).
//! Escaping is idempotent: escaped text has nothing left to escape.

use std::borrow::Cow;

/// True for a character that must not reach a terminal or a page as it is.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character escaped; borrowed when there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, unsafe_char)
}

/// The same, but for newlines and tabs: for the tool's own messages of several lines, which
/// may quote what a server or a certificate said.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c != '\n' && c != '\t' && unsafe_char(c))
}

fn escaped(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match escape(c) {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_and_bidi_characters_once() {
        let raw = "boom\u{1b}]0;owned\u{7}\u{1b}[2J\r\nnext \u{202e}txt\u{9b}1m é";
        let shown = printable(raw);
        assert_eq!(
            shown,
            "boom\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\r\\nnext \\u{202e}txt\\u{9b}1m é"
        );
        assert!(!shown.chars().any(unsafe_char));
        assert_eq!(printable(&shown), shown, "idempotent");
        assert!(matches!(printable("plain é ✓"), Cow::Borrowed(_)));
        let lines = printable_lines("error: a\n\thint: \u{1b}[2Jb");
        assert_eq!(lines, "error: a\n\thint: \\u{1b}[2Jb");
    }
}
