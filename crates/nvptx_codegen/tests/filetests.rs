//! File tests: every `tests/filetests/**/*.tir` says how to run `tiles-opt` on itself and what
//! the output must contain, in comment lines (Cranelift / FileCheck style):
//!
//! - `; RUN: <options>` — the `tiles-opt` options;
//! - `; CHECK: text` — the next output line, at or after the previous match, containing `text`;
//! - `; CHECK-NEXT: text` — the line right after the previous match contains `text`;
//! - `; CHECK-NOT: text` — no line between the previous match and the next one contains `text`;
//! - `; ERROR: text` — `tiles-opt` fails with a message containing `text`.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "tir") {
            out.push(p);
        }
    }
}

fn check(path: &Path, text: &str) -> Result<(), String> {
    let mut args: Vec<String> = Vec::new();
    let mut directives: Vec<(&str, &str)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix(';') else {
            continue;
        };
        let rest = rest.trim_start();
        for key in ["RUN:", "CHECK-NEXT:", "CHECK-NOT:", "CHECK:", "ERROR:"] {
            if let Some(v) = rest.strip_prefix(key) {
                if key == "RUN:" {
                    args.extend(
                        v.split_whitespace()
                            .filter(|a| *a != "tiles-opt" && *a != "%s")
                            .map(str::to_string),
                    );
                } else {
                    directives.push((key, v.trim()));
                }
            }
        }
    }
    let result = nvptx_codegen::tools::tiles_opt(&args, text);
    if let Some((_, want)) = directives.iter().find(|(k, _)| *k == "ERROR:") {
        return match result {
            Err(msg) if msg.contains(want) => Ok(()),
            Err(msg) => Err(format!(
                "{}: error `{msg}` does not contain `{want}`",
                path.display()
            )),
            Ok(_) => Err(format!(
                "{}: expected an error containing `{want}`",
                path.display()
            )),
        };
    }
    let out = result.map_err(|e| format!("{}: {e}", path.display()))?;
    // Printed IR (after any passes) parses back to itself and verifies: the text format is how
    // Rust services exchange it.
    if out.starts_with("kernel @") {
        let again = tile_ir::parse(&out)
            .map_err(|e| format!("{}: output does not parse: {e}\n{out}", path.display()))?;
        if let Err(e) = tile_ir::verify(&again) {
            return Err(format!(
                "{}: output does not verify: {e:?}\n{out}",
                path.display()
            ));
        }
        if again.to_string().trim_end() != out.trim_end() {
            return Err(format!(
                "{}: output does not print back the same\n{out}",
                path.display()
            ));
        }
    }
    let lines: Vec<&str> = out.lines().collect();
    let mut pos = 0usize; // the next line to search from
    let mut last: Option<usize> = None;
    let mut pending_not: Vec<&str> = Vec::new();
    for (key, want) in directives {
        match key {
            "CHECK-NOT:" => pending_not.push(want),
            "CHECK:" | "CHECK-NEXT:" => {
                let found = if key == "CHECK-NEXT:" {
                    let i = last.map_or(0, |l| l + 1);
                    lines.get(i).filter(|l| l.contains(want)).map(|_| i)
                } else {
                    (pos..lines.len()).find(|&i| lines[i].contains(want))
                };
                let Some(i) = found else {
                    return Err(format!(
                        "{}: `{key} {want}` not found after line {pos}:\n{out}",
                        path.display()
                    ));
                };
                for n in pending_not.drain(..) {
                    if let Some(bad) = lines[pos..i].iter().find(|l| l.contains(n)) {
                        return Err(format!(
                            "{}: `CHECK-NOT: {n}` matched `{bad}`\n{out}",
                            path.display()
                        ));
                    }
                }
                last = Some(i);
                pos = i + 1;
            }
            _ => {}
        }
    }
    for n in pending_not {
        if let Some(bad) = lines[pos..].iter().find(|l| l.contains(n)) {
            return Err(format!(
                "{}: `CHECK-NOT: {n}` matched `{bad}`\n{out}",
                path.display()
            ));
        }
    }
    Ok(())
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/filetests");
    let mut all = Vec::new();
    files(&root, &mut all);
    all.sort();
    assert!(!all.is_empty(), "no file tests under {}", root.display());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|p| {
            std::fs::read_to_string(p)
                .map_err(|e| e.to_string())
                .and_then(|t| check(p, &t))
                .err()
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
}

/// Inputs the fuzzers once crashed on (`fuzz/regressions/`): each must give a result or an
/// error, never a panic.
#[test]
fn fuzz_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let args = vec!["--emit=ptx".to_string()];
        let r = std::panic::catch_unwind(|| nvptx_codegen::tools::tiles_opt(&args, &text));
        assert!(r.is_ok(), "{} panicked", e.path().display());
        if let Ok(f) = tile_ir::parse(&text) {
            let printed = f.to_string();
            assert_eq!(
                tile_ir::parse(&printed).map(|g| g.to_string()).ok(),
                Some(printed)
            );
        }
    }
}
