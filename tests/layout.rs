//! The house's layout, kept true: docs/design.md's layout section names every room `ls src/` shows,
//! no module imports one that imports it back (the arrows point one way), between folders and
//! between the files of one folder alike, nothing below `cmd/` reads the command line, and analysis
//! never reaches a view.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A module's path in the crate: `src/server/guard.rs` is `server::guard`, `src/server/mod.rs` is
/// `server`, `src/lib.rs` the root. None for `main.rs`, the binary (it names the library as
/// `witness::`).
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "main.rs" if parts.is_empty() => None,
        "lib.rs" if parts.is_empty() => Some(parts),
        "mod.rs" => Some(parts),
        _ => {
            parts.push(last.trim_end_matches(".rs").to_string());
            Some(parts)
        }
    }
}

/// The paths a file's code names after `prefix` (`crate::`, `super::`, `self::`): each as its
/// segments, a `{a, b::c}` group giving one path per member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    fn ident(s: &str) -> (&str, &str) {
        let n = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        (&s[..n], &s[n..])
    }
    /// One path at the start of `s` (segments before it in `base`), and what follows it.
    fn path(base: Vec<String>, s: &str, out: &mut Vec<Vec<String>>) {
        let mut segs = base;
        let mut rest = s.trim_start();
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                // Members at depth 0, up to the matching brace.
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            path(segs.clone(), &group[start..i], out);
                            return;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            path(segs.clone(), &group[start..i], out);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            let (name, after) = ident(rest);
            if name.is_empty() {
                break;
            }
            segs.push(name.to_string());
            match after.strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        // Not the tail of a longer name (`my_crate::`).
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        path(Vec::new(), &code[i + prefix.len()..], &mut out);
    }
    out
}

/// Module → the sibling modules it imports, at every level: `server::guard` naming
/// `crate::server::tree::Tree` (or `super::tree::Tree`) is an arrow `server::guard → server::tree`;
/// `analyze::verdict` naming `crate::journal::Event` is an arrow `analyze → journal`, one level up.
/// A module naming its own parent or child is no arrow (a folder's `mod.rs` declares its rooms).
/// Only code counts: comments, and tests after `#[cfg(test)]`, are left out.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(me) = module_of(&src, f) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut named: Vec<Vec<String>> = paths_after(&code, "crate::");
        for (prefix, base) in [
            ("super::", me[..me.len().saturating_sub(1)].to_vec()),
            ("self::", me.clone()),
        ] {
            for p in paths_after(&code, prefix) {
                // `super::super::x`: one more level up per `super`.
                let ups = p.iter().take_while(|s| *s == "super").count();
                let mut full = base[..base.len().saturating_sub(ups)].to_vec();
                full.extend(p[ups..].iter().cloned());
                named.push(full);
            }
        }
        for p in named {
            // The module it names: the longest prefix that is one.
            let Some(target) = (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == me.len() || common == target.len() {
                continue;
            }
            deps.entry(me[..=common].join("::"))
                .or_default()
                .insert(target[..=common].join("::"));
        }
    }
    deps
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let deps = imports();
    // Any cycle, not only pairs: a depth-first walk from each module.
    fn walk(
        at: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == at) {
            cycles.push(format!("{} -> {at}", path[i..].join(" -> ")));
            return;
        }
        path.push(at.to_string());
        for next in deps.get(at).into_iter().flatten() {
            walk(next, deps, path, cycles);
        }
        path.pop();
    }
    let mut cycles = Vec::new();
    for m in deps.keys() {
        walk(m, &deps, &mut Vec::new(), &mut cycles);
    }
    cycles.sort();
    cycles.dedup();
    assert!(cycles.is_empty(), "imports that point back: {cycles:#?}");
    assert!(
        deps.get("error").is_none_or(|d| d.is_empty()),
        "error.rs (the exit-code table) must import nothing of the crate: {:?}",
        deps.get("error")
    );
    // The walk sees inside folders too, and the arrows it reads are real ones.
    for (from, to) in [
        ("server::guard", "server::tree"),
        ("analyze", "journal"),
        ("soak::run", "soak::plan"),
    ] {
        assert!(
            deps.get(from).is_some_and(|d| d.contains(to)),
            "no arrow {from} -> {to} read: {deps:#?}"
        );
    }
}

#[test]
fn the_design_s_layout_names_every_room_ls_src_shows() {
    let design = std::fs::read_to_string(repo().join("docs/design.md")).unwrap();
    let layout = &design[design.find("## Layout").expect("a layout section")..];
    let mut missing = Vec::new();
    let src = repo().join("src");
    let mut names: Vec<String> = Vec::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let top = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            names.push(format!("{top}/"));
            for f in std::fs::read_dir(&p).unwrap() {
                let f = f.unwrap().path();
                let n = f.file_name().unwrap().to_string_lossy().to_string();
                if n != "mod.rs" {
                    names.push(if f.is_dir() { format!("{n}/") } else { n });
                }
            }
        } else {
            names.push(top);
        }
    }
    for n in names {
        if !layout.contains(&n) {
            missing.push(n);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/design.md's layout does not name {missing:?}"
    );
}

/// The layers' two rules, tests included (a test is code that imports too): only `cmd/` (and the
/// crate's root, which dispatches) reads `cli.rs`, so the engine takes validated values, never
/// flags; and `analyze/` never names `report/`, so a view renders what analysis returned and
/// analysis knows of no view.
#[test]
fn nothing_below_cmd_imports_cli_and_analysis_imports_no_view() {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        let code: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
            .collect();
        let above_cmd =
            rel.starts_with("cmd/") || ["cli.rs", "lib.rs", "main.rs"].contains(&rel.as_str());
        // `crate::cli` as a whole name (`super::client` is another module).
        let names = |l: &str, m: &str| {
            ["crate::", "super::", "super::super::"].iter().any(|p| {
                let needle = format!("{p}{m}");
                l.match_indices(&needle).any(|(i, _)| {
                    !l[i + needle.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            })
        };
        for (n, l) in &code {
            if !above_cmd && names(l, "cli") {
                bad.push(format!(
                    "src/{rel}:{}: below cmd/, imports the command line: {}",
                    n + 1,
                    l.trim()
                ));
            }
            if rel.starts_with("analyze/")
                && (l.contains("crate::report")
                    || l.contains("super::report")
                    || l.contains("super::super::report"))
            {
                bad.push(format!(
                    "src/{rel}:{}: analysis reaches a view: {}",
                    n + 1,
                    l.trim()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "layers crossed:\n{}", bad.join("\n"));
}
