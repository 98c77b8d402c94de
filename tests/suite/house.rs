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

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
