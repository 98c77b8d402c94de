//! The shape of the code, read from its text: no function over 120 lines but those on a list
//! that only shrinks, a sender loop of a few owners, and no catch-all arm in a match on a
//! registry's enum (a new format or pace must be placed, not slip into another's arm).

use std::path::Path;

use crate::house::rust_files;

/// Rust source with comments, strings and char literals blanked (newlines kept), so that a
/// brace count sees only code.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Everything from `from` to `to` (exclusive) as its newlines only.
    let blank = |out: &mut String, from: usize, to: usize| {
        out.push_str("\"\"");
        out.extend(b[from..to].iter().filter(|&&c| c == b'\n').map(|_| '\n'));
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + text[i..].find("*/").map_or(rest.len(), |e| e + 2)
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            body + text[body..]
                .find(&close)
                .map_or(b.len() - body, |e| e + close.len())
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' && (rest.get(1) == Some(&b'\\') || rest.get(2) == Some(&b'\'')) {
            // A char literal ('{', '\n', '\u{7b}'); a lifetime ('a) has no closing quote.
            let mut j = i + 2;
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            j + 1
        } else {
            out.push(b[i] as char);
            i += 1;
            continue;
        };
        blank(&mut out, i, end.min(b.len()));
        i = end.min(b.len());
    }
    out
}

/// The line of the `}` that closes the block opening at or after line `start`; None for a
/// declaration with no body.
fn block_end(lines: &[&str], start: usize) -> Option<usize> {
    let (mut depth, mut seen) = (0i64, false);
    for (i, l) in lines.iter().enumerate().skip(start) {
        depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
        seen |= l.contains('{');
        if seen && depth <= 0 {
            return Some(i);
        }
        if !seen && l.trim_end().ends_with(';') {
            return None;
        }
    }
    None
}

/// The name of the function a line declares, if it does.
fn declares_fn(line: &str) -> Option<&str> {
    let mut l = line.trim_start();
    if let Some(rest) = l.strip_prefix("pub") {
        l = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => rest,
        }
        .trim_start();
    }
    for word in ["const ", "async ", "unsafe "] {
        l = l.strip_prefix(word).unwrap_or(l).trim_start();
    }
    let name = l.strip_prefix("fn ")?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// Every function of the `.rs` files under `src` longer than `limit` lines, as
/// (`file:name`, lines), test modules left out.
fn long_functions(src: &Path, limit: usize) -> Vec<(String, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut long = Vec::new();
    for f in files {
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        let lines: Vec<&str> = text.split('\n').collect();
        let file = f.strip_prefix(src).unwrap().display().to_string();
        let mut i = 0;
        while i < lines.len() {
            let next_is_mod = lines.get(i + 1).is_some_and(|n| {
                let n = n.trim_start();
                n.starts_with("mod ") || n.starts_with("pub mod ")
            });
            if lines[i].trim_start().starts_with("#[cfg(test)]") && next_is_mod {
                i = block_end(&lines, i + 1).map_or(i + 1, |e| e + 1);
                continue;
            }
            if let Some(name) = declares_fn(lines[i]) {
                if let Some(end) = block_end(&lines, i) {
                    if end - i + 1 > limit {
                        long.push((format!("{file}:{name}"), end - i + 1));
                    }
                }
            }
            i += 1;
        }
    }
    long.sort();
    long
}

/// Functions of `src/` are at most [`FUNCTION_LIMIT`] lines, but for those on a list that
/// may only shrink: each listed with the most lines it may have. A new long function fails,
/// a listed one that grew fails, and one that got short enough must leave the list.
const FUNCTION_LIMIT: usize = 120;
const LONG_FUNCTIONS: [(&str, usize); 3] = [
    // Conversions: flags to a plan, a plan to run.json and to the sentence said before a run,
    // one field after another.
    ("plan.rs:from_args", 245),
    ("commands/replay/run_json.rs:run_json", 212),
    ("commands/replay/describe.rs:describe", 152),
];

fn function_bar(src: &Path) -> Vec<String> {
    let long = long_functions(src, FUNCTION_LIMIT);
    let mut wrong = Vec::new();
    for (name, lines) in &long {
        match LONG_FUNCTIONS.iter().find(|(n, _)| n == name) {
            None => wrong.push(format!(
                "src/{name}: {lines} lines (at most {FUNCTION_LIMIT}): split it by meaning"
            )),
            Some((_, most)) if lines > most => wrong.push(format!(
                "src/{name}: {lines} lines, longer than the {most} it is allowed: it may only \
                 shrink"
            )),
            Some(_) => {}
        }
    }
    for (name, _) in LONG_FUNCTIONS {
        if !long.iter().any(|(n, _)| n == name) {
            wrong.push(format!(
                "src/{name} is no longer over {FUNCTION_LIMIT} lines (or gone): take it off \
                 LONG_FUNCTIONS"
            ));
        }
    }
    wrong
}

#[test]
fn no_function_over_120_lines_but_those_on_a_list_that_only_shrinks() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong = function_bar(&src);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A long function planted in a small tree is found, however its braces hide in strings,
/// chars and comments; a test module's is not counted.
#[test]
fn a_planted_long_function_is_found() {
    let dir = crate::common::temp_dir("house-functions");
    let body = |n: usize| "    let _x = 1;\n".repeat(n);
    let text = format!(
        "pub(crate) fn long() {{\n    let s = \"}}}}\"; let c = '}}'; // }}\n    /* }} */\n{}}}\n\
         fn short() {{\n{}}}\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
        body(125),
        body(10),
        body(200)
    );
    std::fs::write(dir.join("lib.rs"), text).unwrap();
    assert_eq!(
        long_functions(&dir, FUNCTION_LIMIT),
        [("lib.rs:long".to_string(), 129)]
    );
    assert!(function_bar(&dir)[0].contains("src/lib.rs:long: 129 lines (at most 120)"));
}

/// The sender's loop is a few owners, each changing only its own state: `SenderLoop` has at
/// most this many fields, and each is used from the `impl SenderLoop` blocks of at most two
/// files (a field reached from everywhere is state nobody owns).
const SENDER_LOOP_FIELDS: usize = 12;

/// The fields of `struct NAME { ... }` in `code` (comments and strings blanked).
fn struct_fields(code: &str, name: &str) -> Vec<String> {
    let lines: Vec<&str> = code.split('\n').collect();
    let Some(start) = lines.iter().position(|l| {
        l.trim_start()
            .trim_start_matches("pub ")
            .starts_with(&format!("struct {name} "))
    }) else {
        return Vec::new();
    };
    let end = block_end(&lines, start).unwrap_or(start);
    lines[start + 1..end]
        .iter()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub(super) ")
                .or(l.strip_prefix("pub "))
                .unwrap_or(l);
            let (field, _) = l.split_once(':')?;
            (!field.is_empty() && field.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .then(|| field.to_string())
        })
        .collect()
}

fn sender_bar(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let code: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let name = f.strip_prefix(dir).unwrap().display().to_string();
            (name, code_only(&std::fs::read_to_string(f).unwrap()))
        })
        .collect();
    let fields: Vec<String> = code
        .iter()
        .flat_map(|(_, c)| struct_fields(c, "SenderLoop"))
        .collect();
    let mut wrong = Vec::new();
    if fields.len() > SENDER_LOOP_FIELDS {
        wrong.push(format!(
            "SenderLoop has {} fields (at most {SENDER_LOOP_FIELDS}): give a group of them an owner",
            fields.len()
        ));
    }
    // The text of each file's `impl SenderLoop` blocks.
    let impls: Vec<(&str, String)> = code
        .iter()
        .map(|(name, c)| {
            let lines: Vec<&str> = c.split('\n').collect();
            let mut text = String::new();
            for (i, l) in lines.iter().enumerate() {
                if l.trim_start().starts_with("impl SenderLoop") {
                    let end = block_end(&lines, i).unwrap_or(i);
                    text += &lines[i..=end].join("\n");
                }
            }
            (name.as_str(), text)
        })
        .collect();
    for field in &fields {
        let used = format!("self.{field}");
        let users: Vec<&str> = impls
            .iter()
            .filter(|(_, text)| {
                text.match_indices(&used).any(|(at, _)| {
                    let next = text[at + used.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            })
            .map(|(name, _)| *name)
            .collect();
        if users.len() > 2 {
            wrong.push(format!(
                "SenderLoop.{field} is used from {} files ({}): at most 2",
                users.len(),
                users.join(", ")
            ));
        }
    }
    wrong
}

#[test]
fn the_sender_loop_is_a_few_owners() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sender");
    let wrong = sender_bar(&dir);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let fields = struct_fields(
        &code_only(&std::fs::read_to_string(dir.join("mod.rs")).unwrap()),
        "SenderLoop",
    );
    assert!(fields.len() >= 5, "the bar reads the struct: {fields:?}");
}

/// A loop of 13 fields, one of them used from three files, fails both bars.
#[test]
fn a_planted_sprawling_sender_loop_is_found() {
    let dir = crate::common::temp_dir("house-sender");
    let fields: String = (0..13).map(|i| format!("    f{i}: u8,\n")).collect();
    std::fs::write(
        dir.join("mod.rs"),
        format!("struct SenderLoop {{\n{fields}}}\n"),
    )
    .unwrap();
    for file in ["a.rs", "b.rs", "c.rs"] {
        let text =
            "impl SenderLoop {\n    fn f(&self) -> u8 {\n        self.f1 + self.f10\n    }\n}\n";
        let text = if file == "c.rs" {
            text.replace("self.f10", "self.f11")
        } else {
            text.to_string()
        };
        std::fs::write(dir.join(file), text).unwrap();
    }
    let wrong = sender_bar(&dir);
    assert_eq!(wrong.len(), 2, "{wrong:?}");
    assert!(wrong[0].contains("13 fields (at most 12)"), "{wrong:?}");
    assert!(
        wrong[1].starts_with("SenderLoop.f1 is used from 3 files"),
        "{wrong:?}"
    );
}

/// The registries' enums: a match on one of them names every value (or a `|` of them), so
/// that a new value is a compile error wherever it must be placed, not a silent `_ =>`.
const REGISTRIES: [&str; 2] = ["Format::", "Pace::"];

/// Every `_ =>` arm in a match whose other arms are values of a registry's enum, as
/// `file:line`.
fn catch_alls(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for f in files {
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        let lines: Vec<&str> = text.split('\n').collect();
        let file = f.strip_prefix(src).unwrap().display().to_string();
        for (i, l) in lines.iter().enumerate() {
            let opens_match = l.contains("match ") && l.trim_end().ends_with('{');
            let Some(end) = opens_match.then(|| block_end(&lines, i)).flatten() else {
                continue;
            };
            // The arms: the lines at the match's own depth.
            let mut depth = 0i64;
            let mut arms = Vec::new();
            for (k, line) in lines.iter().enumerate().take(end).skip(i) {
                if depth == 1 {
                    arms.push((k, line.trim_start()));
                }
                depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            }
            let on_registry = arms.iter().any(|(_, a)| {
                let a = a.trim_start_matches(['(', '|', ' ']);
                REGISTRIES.iter().any(|r| a.starts_with(r))
            });
            for (k, a) in arms {
                if on_registry && a.starts_with("_ =>") {
                    found.push(format!("{file}:{}", k + 1));
                }
            }
        }
    }
    found
}

#[test]
fn no_catch_all_arm_on_a_registry() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = catch_alls(&src);
    assert!(
        found.is_empty(),
        "a `_ =>` arm in a match on Format or Pace (name the values, so that a new one is \
         placed): {found:?}"
    );
}

/// A catch-all planted in a match on Format is found; one in a match on something else, or
/// in a nested match, is not.
#[test]
fn a_planted_catch_all_is_found() {
    let dir = crate::common::temp_dir("house-catch-all");
    let text = "fn f(x: Format, n: u8) -> u8 {\n    match x {\n        Format::Azure => 1,\n        \
                _ => match n {\n            0 => 2,\n            _ => 3,\n        },\n    }\n}\n\
                fn g(p: Pace) -> u8 {\n    match p {\n        Pace::Trace | Pace::Rate { .. } => 1,\n        \
                Pace::Closed { .. } => 2,\n    }\n}\n";
    std::fs::write(dir.join("lib.rs"), text).unwrap();
    assert_eq!(catch_alls(&dir), ["lib.rs:4"]);
}
