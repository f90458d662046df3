//! `witness compare BASE CURRENT`: two runs' journals analysed and compared
//! ([`crate::analyze::compare`]), shown in the view asked for, with a JUnit file and a GitHub step
//! summary for CI.

use std::path::{Path, PathBuf};

use crate::analyze::compare::{self, Side};
use crate::cli::{CompareArgs, CompareFormat};
use crate::error::usage;
use crate::report::compare as view;

pub fn run(args: CompareArgs) -> anyhow::Result<i32> {
    // Thresholds first: a typo costs nothing read.
    let deltas = args
        .asserts
        .iter()
        .map(|t| compare::parse_delta(t).map_err(|e| usage(format!("--assert {t:?}: {e}"))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (base, current) = pick(&args)?;
    if base.0 == current.0 {
        return Err(usage(format!(
            "BASE and CURRENT are the same journal ({}): name two runs, e.g. `witness compare --baseline main` or `witness compare last:2 last`",
            base.0.display()
        )));
    }
    let read = |path: &Path| -> anyhow::Result<crate::analyze::Analysis> {
        let file = crate::sources::journal::JournalFile::open(path)
            .map_err(|e| usage(format!("{e:#}")))?;
        let mut a = crate::analyze::analyze(&file);
        if let Some(pid) = crate::runs::live(path) {
            crate::analyze::still_running(&mut a, pid);
            crate::errln!(
                "witness: {} is a run still going (witness pid {pid}): compared as far as its journal goes",
                path.display()
            );
        }
        Ok(a)
    };
    let a = read(&base.0)?;
    let b = read(&current.0)?;
    let name_of = |p: &Path| crate::runs::read_header(p).and_then(|h| h.name);
    let c = compare::compare(
        &Side {
            label: base.1,
            name: name_of(&base.0),
            analysis: &a,
        },
        &Side {
            label: current.1,
            name: name_of(&current.0),
            analysis: &b,
        },
        args.noise.unwrap_or(compare::NOISE),
        &deltas,
    );
    let bytes = match args.format.unwrap_or(CompareFormat::Text) {
        CompareFormat::Text => view::text(&c).into_bytes(),
        CompareFormat::Json => view::json(&c)?,
        CompareFormat::Html => view::html(&c).into_bytes(),
    };
    match &args.output {
        Some(p) => crate::files::replace(p, &bytes)
            .map_err(|e| usage(format!("-o {}: could not write it: {e}", p.display())))?,
        None => {
            crate::out::write_bytes(crate::out::To::Stdout, &bytes);
        }
    }
    if let Some(p) = &args.junit {
        crate::files::replace(p, &view::junit(&c)?)
            .map_err(|e| usage(format!("--junit {}: could not write it: {e}", p.display())))?;
    }
    if let Some(p) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .and_then(|mut f| f.write_all(view::markdown(&c).as_bytes()));
        if let Err(e) = appended {
            crate::errln!(
                "witness: could not append the step summary to $GITHUB_STEP_SUMMARY ({}): {e}",
                Path::new(&p).display()
            );
        }
    }
    Ok(c.exit_code)
}

/// BASE and CURRENT: each a path and the words that name it.
fn pick(args: &CompareArgs) -> anyhow::Result<((PathBuf, String), (PathBuf, String))> {
    match (args.runs.as_slice(), &args.baseline) {
        ([b, c], None) => Ok((resolve(b, None)?, resolve(c, None)?)),
        ([_, _], Some(_)) => Err(usage(
            "--baseline names BASE, and two runs were given too: give BASE once (`witness compare BASE CURRENT`, or `witness compare --baseline NAME CURRENT`)",
        )),
        ([c], Some(name)) => {
            let current = resolve(c, None)?;
            let base = resolve(name, Some(&current.0))?;
            Ok((base, current))
        }
        ([_], None) => Err(usage(
            "one run was given: name BASE too (`witness compare BASE CURRENT`), or the run to compare with by its name (`--baseline NAME`, a name given with `--name`)",
        )),
        ([], Some(name)) => {
            let current = resolve("last", None)?;
            let base = resolve(name, Some(&current.0))?;
            Ok((base, current))
        }
        _ => Ok((resolve("last:2", None)?, resolve("last", None)?)),
    }
}

/// One run: a journal's path, `last` / `last:N`, or a run's name (its latest run other than
/// `not`).
fn resolve(spec: &str, not: Option<&Path>) -> anyhow::Result<(PathBuf, String)> {
    let p = Path::new(spec);
    if p.is_file() {
        return Ok((p.to_path_buf(), spec.to_string()));
    }
    if spec == "last" || spec.starts_with("last:") {
        let n: u32 = match spec.strip_prefix("last:") {
            None => 1,
            Some(k) => k.parse().ok().filter(|k| *k >= 1).ok_or_else(|| {
                usage(format!(
                    "{spec:?}: write last:N with N a whole number from 1 (last:1 is the latest run, last:2 the one before)"
                ))
            })?,
        };
        let path = super::report::latest(n)?;
        let label = path.display().to_string();
        return Ok((path, label));
    }
    if spec.contains('/') || spec.ends_with(".jsonl") {
        return Err(usage(format!(
            "{spec}: no such journal (a run is a journal's path, `last`, `last:N`, or a name given with --name)"
        )));
    }
    let dir = crate::files::state_dir();
    let runs = crate::runs::recent(&dir);
    let mut names: Vec<String> = Vec::new();
    for r in &runs {
        let Some(h) = crate::runs::read_header(r) else {
            continue;
        };
        let Some(name) = h.name else { continue };
        if name == spec && not.is_none_or(|n| !same_file(n, r)) {
            crate::errln!(
                "witness: {spec}: the latest run of that name: {}",
                r.display()
            );
            return Ok((
                r.clone(),
                format!("{} (the latest run named {spec})", r.display()),
            ));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Err(usage(if names.is_empty() {
        format!(
            "{spec}: no such journal, and no run is named {spec:?} in {} (no run there has a name: give one with `--name {spec}` on load, soak, replay or wrap)",
            dir.display()
        )
    } else {
        format!(
            "{spec}: no such journal, and no {}run is named {spec:?}; the names recorded are: {}",
            if not.is_some() { "other " } else { "" },
            names.join(", ")
        )
    }))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}
