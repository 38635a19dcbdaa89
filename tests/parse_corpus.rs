//! Pass 1 corpora, as SystemTap's parseok/parseko:
//!
//! * `tests/parseok/NAME.tp` must parse without errors; `NAME.out` holds its
//!   canonical print, and printing must be stable (print, parse, print).
//! * `tests/parseko/NAME.tp` must fail; `NAME.err` holds every diagnostic as
//!   `file:line:col: error[CODE]: message (label)`, which asserts *which*
//!   error and *where*. An optional `NAME.rendered` holds the full
//!   codespan-reporting rendering (golden files for the presentation).
//!
//! A first line `# args: A B ...` gives script arguments. Run with `BLESS=1`
//! to rewrite the expected files; review the diff before committing it.

mod common;

use common::{args_of, check_file, name_of, repo, tp_files};
use telco_compiler::preprocess::PpConfig;
use telco_compiler::print::print_script;
use telco_compiler::{parse, Diagnostics, ParseConfig, SourceMap};

/// Each corpus holds at least this many cases; a smaller one lost files.
const MIN_CASES: usize = 66;

fn config_for(text: &str) -> ParseConfig {
    let args = args_of(text);
    // Fixed facts so expectations do not depend on the machine.
    ParseConfig {
        pp: PpConfig {
            arch: "x86_64".into(),
            kernel_vr: "6.1.0-18-amd64".into(),
            script_args: args,
            ..Default::default()
        },
    }
}

struct Parsed {
    sources: SourceMap,
    script: telco_compiler::ast::Script,
    diags: Diagnostics,
}

fn parse_named(name: &str, text: &str) -> Parsed {
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    let (script, ds) = parse(&sources, id, &config_for(text));
    let mut diags = Diagnostics::new();
    diags.extend(ds);
    Parsed { sources, script, diags }
}

/// Print, parse the print, print again: the two prints must be equal.
fn round_trip(name: &str, script: &telco_compiler::ast::Script) -> Result<String, String> {
    let first = print_script(script);
    let again = parse_named(name, &first);
    if again.diags.has_errors() {
        return Err(format!(
            "{name}: the canonical print does not parse:\n{}\n--- print\n{first}",
            again.diags.summary(&again.sources)
        ));
    }
    let second = print_script(&again.script);
    if first != second {
        return Err(format!("{name}: printing is not stable\n--- first\n{first}\n--- second\n{second}"));
    }
    Ok(first)
}

#[test]
fn parseok() {
    let mut failures = Vec::new();
    let files = tp_files(&repo().join("tests/parseok"));
    for f in &files {
        let name = name_of(f);
        let text = std::fs::read_to_string(f).expect("read");
        let p = parse_named(&name, &text);
        if p.diags.has_errors() {
            failures.push(format!("{name}: unexpected errors:\n{}", p.diags.summary(&p.sources)));
            continue;
        }
        match round_trip(&name, &p.script) {
            Ok(print) => failures.extend(check_file(&f.with_extension("out"), &print)),
            Err(e) => failures.push(e),
        }
    }
    assert!(files.len() >= MIN_CASES, "the parse-ok corpus shrank to {} files", files.len());
    assert!(
        failures.is_empty(),
        "{} of {} parse-ok cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn parseko() {
    let mut failures = Vec::new();
    let files = tp_files(&repo().join("tests/parseko"));
    for f in &files {
        let name = name_of(f);
        let text = std::fs::read_to_string(f).expect("read");
        let p = parse_named(&name, &text);
        if !p.diags.has_errors() {
            failures.push(format!("{name}: parsed without errors, but it is a parse-ko case"));
            continue;
        }
        failures.extend(check_file(&f.with_extension("err"), &p.diags.summary(&p.sources)));
        let rendered = f.with_extension("rendered");
        if rendered.exists() {
            failures.extend(check_file(&rendered, &p.diags.render(&p.sources, false)));
        }
    }
    assert!(files.len() >= MIN_CASES, "the parse-ko corpus shrank to {} files", files.len());
    assert!(
        failures.is_empty(),
        "{} of {} parse-ko cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

/// Every script shipped in the repository parses and prints stably.
#[test]
fn every_shipped_script_round_trips() {
    let mut failures = Vec::new();
    let mut count = 0;
    for dir in ["tapsets", "scripts", "tests/parseok", "tests/runtime"] {
        let d = repo().join(dir);
        if !d.is_dir() {
            continue;
        }
        let mut stack = vec![d];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "tp") {
                    count += 1;
                    let name = p.strip_prefix(repo()).unwrap_or(&p).display().to_string();
                    let text = std::fs::read_to_string(&p).expect("read");
                    let parsed = parse_named(&name, &text);
                    if parsed.diags.has_errors() {
                        failures.push(format!("{name}:\n{}", parsed.diags.summary(&parsed.sources)));
                    } else if let Err(e) = round_trip(&name, &parsed.script) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(count > 0, "no .tp files found");
    assert!(failures.is_empty(), "{} of {count} scripts failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
