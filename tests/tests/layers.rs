//! Imports run one way: in no crate of the workspace does a module reach, through its `use`
//! lines or the paths in its code, a module that reaches it back.
//!
//! The check reads the sources, as a reader would: each file under a crate's `src/` is a
//! module (`a/b.rs` and `a/b/mod.rs` are `a::b`); a path that starts `crate::`, `super::` or
//! `self::` names the deepest module it walks through, and that is an edge. A module's
//! edges to its own ancestors and descendants are not counted: a parent declares its
//! children and a child may use what its parent declares, which is how a folder is read.
//! Test modules (`tests.rs`, and what follows `#[cfg(test)]` in a file) are left out, and
//! so are a crate's own binaries under `src/bin/`, each a crate of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path inside its crate, one segment a name (`[]` is the crate's root).
type ModPath = Vec<String>;

/// The crates of the workspace: every folder under the root with a `Cargo.toml` and a
/// `src/`, outside `target/`.
fn crates(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            found.push(dir.clone());
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() && !name.starts_with('.') && name != "target" && name != "src" {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every module file of the crate at `src`, by its module path.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("tests.rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut segments: ModPath = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                segments.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                segments.pop();
            }
            out.insert(segments, path);
        }
    }
    out
}

/// The file's text without its test module and comments.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `tree` is shaped like a use tree: every brace closes one opened before it, all
/// do, and each opens a group where one may be.
fn balanced(tree: &str) -> bool {
    let mut depth = 0i32;
    for c in tree.chars() {
        depth += match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        };
        if depth < 0 {
            return false;
        }
    }
    // A group opens a path's last segment: at the start or after `::`.
    depth == 0
        && tree
            .match_indices('{')
            .all(|(i, _)| i == 0 || tree[..i].ends_with("::") || tree[..i].ends_with(['{', ',']))
}

/// Expands a use tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// The paths the code names that start at the crate, the parent or the module itself.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    // `use` trees, braces and all.
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        // A use tree, with its renames dropped; anything else (the word in a string) is
        // not one.
        let tree: String = rest[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .split(" as ")
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    part
                } else {
                    part.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                }
            })
            .collect::<String>()
            .replace(' ', "");
        if tree
            .chars()
            .all(|c| c.is_alphanumeric() || "_:{},*".contains(c))
            && balanced(&tree)
        {
            out.extend(expand(&tree));
        }
        rest = &rest[end..];
    }
    // Paths in the code itself (`crate::a::f()`).
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if code[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path);
        }
    }
    out
}

/// The module a path names from module `here`: the deepest module of `known` it walks
/// through, or `None` for a path outside the crate.
fn target(here: &ModPath, path: &str, known: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut segments = path.split("::").filter(|s| !s.is_empty());
    let mut at: ModPath = match segments.next()? {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => here[..here.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    for s in segments {
        if s == "super" {
            at.pop();
            continue;
        }
        let mut next = at.clone();
        next.push(s.to_string());
        if !known.contains_key(&next) {
            break;
        }
        at = next;
    }
    Some(at)
}

/// The circles among `edges`: every strongly connected set of more than one module.
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    // Kosaraju: order by finish time, then walk the reversed graph.
    let nodes: Vec<&ModPath> = edges.keys().collect();
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for &n in &nodes {
        if seen.contains(n) {
            continue;
        }
        let mut stack = vec![(n, false)];
        while let Some((m, done)) = stack.pop() {
            if done {
                order.push(m);
                continue;
            }
            if !seen.insert(m) {
                continue;
            }
            stack.push((m, true));
            for next in &edges[m] {
                if !seen.contains(next) {
                    stack.push((next, false));
                }
            }
        }
    }
    let mut reverse: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reverse.entry(to).or_default().push(from);
        }
    }
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for &n in order.iter().rev() {
        if placed.contains(n) {
            continue;
        }
        let mut set = Vec::new();
        let mut stack = vec![n];
        placed.insert(n);
        while let Some(m) = stack.pop() {
            set.push(m.clone());
            for &prev in reverse.get(m).into_iter().flatten() {
                if placed.insert(prev) {
                    stack.push(prev);
                }
            }
        }
        if set.len() > 1 {
            set.sort();
            out.push(set);
        }
    }
    out
}

/// The edges of one crate: module to the modules it names, neither an ancestor of the
/// other.
fn crate_edges(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let known = modules(src);
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (here, file) in &known {
        let named = edges.entry(here.clone()).or_default();
        for path in paths(&code(file)) {
            let Some(to) = target(here, &path, &known) else {
                continue;
            };
            if !to.starts_with(here) && !here.starts_with(&to) {
                named.insert(to);
            }
        }
    }
    edges
}

fn show(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let crates = crates(root);
    assert!(crates.len() >= 8, "found only {crates:?}");
    let mut found = Vec::new();
    for dir in &crates {
        for circle in circles(&crate_edges(&dir.join("src"))) {
            let names: Vec<String> = circle.iter().map(show).collect();
            found.push(format!(
                "{}: {}",
                dir.strip_prefix(root).unwrap().display(),
                names.join(", ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other, crate by crate:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_circle_and_a_layered_crate() {
    let dir = std::env::temp_dir().join(format!("layers-check-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    fs::write(src.join("a/mod.rs"), "mod inner;\npub use inner::X;\n").unwrap();
    fs::write(
        src.join("a/inner.rs"),
        "use super::super::{b::B, c};\npub struct X;\n",
    )
    .unwrap();
    fs::write(src.join("b.rs"), "pub struct B;\n").unwrap();
    fs::write(
        src.join("c.rs"),
        "pub fn f() { crate::b::B; }\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
    )
    .unwrap();
    assert!(circles(&crate_edges(&src)).is_empty());
    // `b` now names `a`'s child, which names `c`, which names `b`: a circle.
    fs::write(src.join("b.rs"), "use crate::a::inner::X;\npub struct B;\n").unwrap();
    let found = circles(&crate_edges(&src));
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let names: Vec<String> = found[0].iter().map(show).collect();
    assert_eq!(names, ["a::inner", "b", "c"]);
}
