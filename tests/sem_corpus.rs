//! Pass 2 corpora, as SystemTap's semok/semko:
//!
//! * `tests/semok/NAME.tp` must elaborate without errors; `NAME.out` holds
//!   the resolved program (`--last-pass 2`), with machine-specific details
//!   (addresses, sizes, library directories) replaced by placeholders.
//! * `tests/semko/NAME.tp` must fail in pass 2 (not pass 1); `NAME.err`
//!   holds every diagnostic as `file:line:col: severity[CODE]: message
//!   (label)`.
//!
//! The built-in tapsets are available, there is no target process, and a
//! first line `# args: A B ...` gives script arguments. `BLESS=1` rewrites
//! the expected files; review the diff before committing it.

mod common;

use common::{args_of, check_file, name_of, repo, tp_files};
use telco_compiler::elaborate::{self, NoProcesses, TargetSpec};
use telco_compiler::preprocess::PpConfig;
use telco_compiler::{parse, Diagnostics, ParseConfig, SourceMap};

/// Each corpus holds at least this many cases; a smaller one lost files.
const MIN_CASES: usize = 80;

struct Outcome {
    pass1_errors: bool,
    program: Option<String>,
    summary: String,
}

fn elaborate_named(name: &str, text: &str) -> Outcome {
    let args = args_of(text);
    let pcfg = ParseConfig {
        pp: PpConfig {
            arch: "x86_64".into(),
            kernel_vr: "6.1.0-18-amd64".into(),
            script_args: args.clone(),
            ..Default::default()
        },
    };
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    let (script, ds) = parse(&sources, id, &pcfg);
    let mut diags = Diagnostics::new();
    diags.extend(ds);
    if diags.has_errors() {
        return Outcome { pass1_errors: true, program: None, summary: diags.summary(&sources) };
    }
    let cfg = elaborate::Config {
        parse: &pcfg,
        tapsets: elaborate::tapsets::builtin(),
        target: TargetSpec::default(),
        query: &NoProcesses,
        args: &args,
        guru: false,
        skip_badvars: false,
        unoptimized: false,
        set_globals: &[],
    };
    let mut ds = Vec::new();
    let program = elaborate::elaborate(&mut sources, id, &script, &cfg, &mut ds);
    diags.extend(ds);
    Outcome {
        pass1_errors: false,
        program: program.map(|p| normalize(&elaborate::show::print_program(&p))),
        summary: normalize_paths(&diags.summary(&sources)),
    }
}

/// Absolute paths of shared libraries (`/usr/lib/x86_64-linux-gnu/libc.so.6`)
/// differ between machines: keep the file name only (`.../libc.so.6`).
fn normalize_paths(s: &str) -> String {
    s.split(' ')
        .map(|w| {
            if w.starts_with('/') && w.contains(".so") {
                format!(".../{}", w.rsplit('/').next().unwrap_or(w))
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Replace what differs between machines: addresses, sizes and file
/// offsets of functions, and the directories libraries live in.
fn normalize(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let mut l = line.to_string();
        if let Some(i) = l.find("  /* addr ") {
            l.truncate(i);
            l.push_str("  /* addr, size, offset */");
        }
        // process("/usr/lib/x86_64-linux-gnu/libc.so.6") -> process(".../libc.so.6")
        while let Some(i) = l.find("process(\"/") {
            let start = i + "process(\"".len();
            let Some(len) = l[start..].find('"') else { break };
            let path = l[start..start + len].to_string();
            let file = path.rsplit('/').next().unwrap_or("").to_string();
            l.replace_range(start..start + len, &format!(".../{file}"));
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

#[test]
fn semok() {
    let files = tp_files(&repo().join("tests/semok"));
    let mut failures = Vec::new();
    for f in &files {
        let name = name_of(f);
        let o = elaborate_named(&name, &std::fs::read_to_string(f).expect("read"));
        match o.program {
            Some(p) if !o.summary.contains(": error[") => {
                // Warnings and notes are part of the expectation.
                let mut actual = p;
                if !o.summary.is_empty() {
                    actual = format!("{}\n# diagnostics\n{}", actual, o.summary);
                }
                failures.extend(check_file(&f.with_extension("out"), &actual));
            }
            _ => failures.push(format!("{name}: unexpected errors:\n{}", o.summary)),
        }
    }
    assert!(files.len() >= MIN_CASES, "the sem-ok corpus shrank to {} files", files.len());
    assert!(
        failures.is_empty(),
        "{} of {} sem-ok cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn semko() {
    let files = tp_files(&repo().join("tests/semko"));
    let mut failures = Vec::new();
    for f in &files {
        let name = name_of(f);
        let o = elaborate_named(&name, &std::fs::read_to_string(f).expect("read"));
        if o.pass1_errors {
            failures.push(format!("{name}: fails in pass 1, not pass 2:\n{}", o.summary));
        } else if o.program.is_some() {
            failures.push(format!("{name}: elaborated without errors, but it is a sem-ko case"));
        } else {
            failures.extend(check_file(&f.with_extension("err"), &o.summary));
        }
    }
    assert!(files.len() >= MIN_CASES, "the sem-ko corpus shrank to {} files", files.len());
    assert!(
        failures.is_empty(),
        "{} of {} sem-ko cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}
