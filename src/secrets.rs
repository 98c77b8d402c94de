//! Secrets the tool knows (the API key, `-H` values, a URL's credentials) are replaced by
//! `***` in every text it stores or prints, even when a server echoes them back (a 401 body
//! that repeats the request head).
//!
//! They are registered once, when the plan is read, and looked for in error messages as
//! records are made and when an error is printed: never on a hot path.

use std::borrow::Cow;
use std::sync::RwLock;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Shorter values are not looked for: `***` in place of every "a" would hide the message.
const MIN_LEN: usize = 4;

/// Keeps `value` out of every output from now on.
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_LEN {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    if !secrets.iter().any(|s| s == value) {
        secrets.push(value.to_string());
        // Longest first, so that a secret holding another is hidden whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret replaced by `***`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    let mut out = Cow::Borrowed(text);
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), "***"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_are_hidden_longest_first() {
        register("tok-12345");
        register("tok-12345-extended");
        register("ab"); // too short to look for
        assert_eq!(
            redact("Authorization: Bearer tok-12345-extended, then tok-12345; ab"),
            "Authorization: Bearer ***, then ***; ab"
        );
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }
}
