//! The shape of the house: no import circle between the modules of `src/`, layers that point
//! one way, no file over 800 lines. A module is a file (`a/mod.rs` and `a.rs` are `a`); it
//! imports another where it names a path into it, in a `use` or inline (`crate::a::b`,
//! `super::b`, `self::b`). A test module (`#[cfg(test)] mod ...` to the end of its file) is
//! left out: tests may reach anywhere.
//! A circle is a set of modules each reaching all the others through imports; each is
//! printed with the lines that close it. And the layers point one way (see
//! [`the_layers_point_one_way`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common;

/// Module path (`["report", "html"]`) of a file under `src`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paths a `use` tree names, braces expanded: `crate::a::{b, c::{d, e}}` gives
/// `crate::a::b`, `crate::a::c::d`, `crate::a::c::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn split_top(body: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&body[start..]);
        parts
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        match tree.find('{') {
            Some(open) if tree.ends_with('}') => {
                let mut head = prefix.to_vec();
                head.extend(segments(&tree[..open]));
                for part in split_top(&tree[open + 1..tree.len() - 1]) {
                    walk(&head, part, out);
                }
            }
            _ => {
                let mut path = prefix.to_vec();
                path.extend(segments(tree.split(" as ").next().unwrap()));
                out.push(path);
            }
        }
    }
    fn segments(s: &str) -> Vec<String> {
        s.split("::")
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    }
    let mut out = Vec::new();
    walk(
        &[],
        &tree.split_whitespace().collect::<Vec<_>>().join(" "),
        &mut out,
    );
    out
}

/// Imports between the modules of `src`: (from, to) -> where (file:line).
fn imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    // The longest module that a path's prefix names.
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains(m))
    };
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let me = module_of(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Everything from a test module on is left out.
        let end = (0..lines.len())
            .find(|&i| {
                lines[i].trim() == "#[cfg(test)]"
                    && lines.get(i + 1).is_some_and(|l| {
                        let l = l.trim_start();
                        l.starts_with("mod ") || l.starts_with("pub mod ")
                    })
            })
            .unwrap_or(lines.len());
        let mut paths: Vec<(usize, Vec<String>)> = Vec::new();
        let mut i = 0;
        while i < end {
            let code = lines[i].split("//").next().unwrap().trim();
            let use_at = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|p| code.strip_prefix(p));
            if let Some(rest) = use_at {
                // A use statement, to its semicolon.
                let mut stmt = rest.to_string();
                let first = i;
                while !stmt.trim_end().ends_with(';') && i + 1 < end {
                    i += 1;
                    stmt.push(' ');
                    stmt.push_str(lines[i].split("//").next().unwrap().trim());
                }
                let stmt = stmt.trim_end().trim_end_matches(';');
                paths.extend(expand(stmt).into_iter().map(|p| (first + 1, p)));
            } else {
                // Inline paths: crate::a::b, super::b (not inside a longer name).
                for anchor in ["crate::", "super::"] {
                    let mut from = 0;
                    while let Some(at) = code[from..].find(anchor).map(|k| k + from) {
                        from = at + anchor.len();
                        let before = code[..at].chars().last();
                        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                            continue;
                        }
                        let path: String = code[at..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                            .collect();
                        paths.push((i + 1, expand(&path).remove(0)));
                    }
                }
            }
            i += 1;
        }
        for (line, path) in paths {
            let full: Vec<String> = match path.first().map(String::as_str) {
                Some("crate") => path[1..].to_vec(),
                Some("self") => me.iter().chain(&path[1..]).cloned().collect(),
                Some("super") => {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    let base = &me[..me.len().saturating_sub(ups)];
                    base.iter().chain(&path[ups..]).cloned().collect()
                }
                _ => continue,
            };
            let Some(to) = resolve(&full) else { continue };
            if to != me && !to.is_empty() && !me.is_empty() {
                let at = format!(
                    "{}:{line}",
                    file.strip_prefix(src.parent().unwrap()).unwrap().display()
                );
                edges
                    .entry((me.join("::"), to.join("::")))
                    .or_default()
                    .insert(at);
            }
        }
    }
    edges
}

/// The circles: strongly connected sets of two or more modules (Tarjan's algorithm), each
/// with the imports inside it.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let edges = imports(src);
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    struct Tarjan<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.next[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.push(w);
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort_unstable();
                    self.found.push(set);
                }
            }
        }
    }
    let mut t = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in next.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
        .iter()
        .map(|set| {
            let mut lines = vec![format!("circle: {}", set.join(" "))];
            for ((from, to), at) in &edges {
                if set.contains(&from.as_str()) && set.contains(&to.as_str()) {
                    let at: Vec<&str> = at.iter().map(String::as_str).collect();
                    lines.push(format!("  {from} -> {to} ({})", at.join(", ")));
                }
            }
            lines
        })
        .collect()
}

#[test]
fn no_import_circle_between_the_modules_of_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&src);
    assert!(
        found.is_empty(),
        "{} import circles:\n{}",
        found.len(),
        found.concat().join("\n")
    );
    // The check saw the crate: the layers' own imports are there.
    let edges = imports(&src);
    assert!(edges.contains_key(&("plan".to_string(), "cli".to_string())));
    assert!(edges.contains_key(&("report::html".to_string(), "report::chart".to_string())));
}

/// The layers point one way: cli (clap) -> plan (validated plain values) -> commands -> the
/// engine. Only plan reads cli's parsed arguments; no engine module names cli, plan or
/// commands (the engine takes plain values, so the library runs without the command line).
#[test]
fn the_layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer = |m: &str| m.split("::").next().unwrap().to_string();
    let mut wrong = Vec::new();
    for ((from, to), at) in imports(&src) {
        let (a, b) = (layer(&from), layer(&to));
        let allowed = match b.as_str() {
            _ if a == b => true,
            "cli" => a == "plan",
            "plan" => a == "cli" || a == "commands",
            "commands" => false,
            _ => true,
        };
        if !allowed {
            wrong.push(format!(
                "{from} -> {to} ({})",
                at.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// `sys` is the floor: it names no module above it (errors aside), and every `unsafe` block
/// of the crate is in it.
#[test]
fn sys_is_the_floor_and_holds_every_unsafe() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer = |m: &str| m.split("::").next().unwrap().to_string();
    let mut wrong = Vec::new();
    for ((from, to), at) in imports(&src) {
        if layer(&from) == "sys" && !matches!(layer(&to).as_str(), "sys" | "error") {
            wrong.push(format!(
                "{from} -> {to} ({})",
                at.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("sys") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            if code.contains("unsafe ") || code.contains("unsafe{") {
                wrong.push(format!(
                    "src/{}:{}: unsafe outside sys",
                    rel.display(),
                    n + 1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Only `cli` knows clap (and `plan`, which reads what it parsed): the engine's enums parse
/// with `FromStr` through `choices!`, not clap's `ValueEnum`.
#[test]
fn only_the_command_line_knows_clap() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("cli")
            || rel.starts_with("cli.rs")
            || rel.starts_with("plan")
            || rel.starts_with("plan.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            if code.contains("clap::") || code.contains("ValueEnum") {
                wrong.push(format!("src/{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "clap outside cli:\n{}", wrong.join("\n"));
}

/// No file of `src/` over 800 lines: a file that size holds more than one owner's work.
#[test]
fn no_file_over_800_lines() {
    const LIMIT: usize = 800;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut over = Vec::new();
    for f in files {
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        if lines > LIMIT {
            let name = f.strip_prefix(&src).unwrap().display();
            over.push(format!("src/{name}: {lines} lines (at most {LIMIT})"));
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}

/// A circle planted in a small tree is found, through each kind of path that makes one,
/// and the tree without it has none.
#[test]
fn a_planted_circle_is_found() {
    let dir = common::temp_dir("house");
    let src = dir.join("src");
    let write = |path: &str, text: &str| {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a/mod.rs", "pub mod inner;\nuse crate::b::{self, Thing};\n");
    write("a/inner.rs", "pub fn f() { super::super::c::g() }\n");
    write(
        "b.rs",
        "pub struct Thing;\n#[cfg(test)]\nmod tests {\n    use crate::a::inner;\n}\n",
    );
    write(
        "c.rs",
        "pub fn g() {}\n// crate::a::inner is only a comment\n",
    );
    assert!(circles(&src).is_empty(), "{:?}", circles(&src));
    // b reaches a through a multi-line use with nested braces: a <-> b.
    write(
        "b.rs",
        "pub struct Thing;\nuse crate::{\n    a::{inner::f, self},\n};\n",
    );
    let found = circles(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0][0], "circle: a b");
    assert!(found[0][1].contains("src/a/mod.rs:2"), "{found:?}");
    // c reaches a::inner inline; a::inner reaches c through super::super: a second circle.
    write("c.rs", "pub fn g() { let _ = crate::a::inner::f; }\n");
    let found = circles(&src);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|c| c[0] == "circle: a::inner c"),
        "{found:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Every default written once: a plan built in code (`ReplayPlan::new`, which calibrate
/// uses) is the plan the command line gives when no option is set, quiet.
#[test]
fn a_plan_built_in_code_has_the_command_lines_defaults() {
    use clap::Parser;
    let words = [
        "llmreplay",
        "replay",
        "--mock",
        "--quiet",
        "--trace",
        "t.jsonl",
    ];
    let llmreplay::cli::Command::Replay(args) = llmreplay::cli::Cli::parse_from(words).command
    else {
        panic!("replay")
    };
    let parsed = llmreplay::plan::ReplayPlan::from_args(&args).unwrap();
    let built = llmreplay::plan::ReplayPlan::new("t.jsonl".into(), parsed.targets.clone());
    assert_eq!(format!("{built:#?}"), format!("{parsed:#?}"));
}

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
const LONG_FUNCTIONS: [(&str, usize); 9] = [
    // Conversions from flags: one field after another.
    ("plan.rs:from_args", 257),
    ("commands/replay/run_json.rs:run_json", 232),
    ("commands/replay/describe.rs:describe", 152),
    // To split by meaning (issue: the engine a stranger can change).
    ("mock/request.rs:take_request", 269),
    ("commands/replay/mod.rs:start", 252),
    ("report/html.rs:report", 187),
    ("commands/replay/collect.rs:collect", 174),
    ("trace/parse.rs:parse_record", 139),
    ("trace/otel.rs:task", 125),
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
