//! The examples of the user documentation stay true: every ```stap block
//! parses (`--last-pass 1`), every ```stap run block runs as
//! `telco-stap -e SCRIPT` (begin, end and timer probes: no target), and
//! every ```stap run -c block as `telco-stap -e SCRIPT -c docs`
//! (tests/programs/docs.c, which prints nothing), exits with 0 and prints
//! exactly the ```output block that follows it. Every function the
//! language reference's tables list is called by an example that runs.

mod common;

const DOCS: &[&str] = &["docs/probe-points.md", "docs/language.md"];

/// One fenced example of a document.
struct Example {
    doc: &'static str,
    /// 1-based line of its opening fence.
    line: usize,
    script: String,
    /// For ```stap run: the stdout it must print.
    expected: Option<String>,
    /// ```stap run -c: it probes tests/programs/docs.c.
    target: bool,
    /// More options after ```stap run (`-g`).
    options: Vec<String>,
}

/// The text of a fenced block whose opening fence is already consumed:
/// its lines, each ended by a newline, up to the closing fence.
fn block<'a>(lines: &mut impl Iterator<Item = (usize, &'a str)>, doc: &str, open: usize) -> String {
    let mut text = String::new();
    for (_, l) in lines.by_ref() {
        if l.trim_end() == "```" {
            return text;
        }
        text.push_str(l);
        text.push('\n');
    }
    panic!("{doc}:{open}: the block opened here is never closed");
}

fn examples() -> Vec<Example> {
    let mut v = Vec::new();
    for &doc in DOCS {
        let text = std::fs::read_to_string(common::repo().join(doc)).expect("read doc");
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        while let Some((n, line)) = lines.next() {
            let fence = line.trim_end();
            let (run, words) = match fence.strip_prefix("```stap") {
                Some("") => (false, Vec::new()),
                Some(rest) if rest == " run" || rest.starts_with(" run ") => {
                    (true, rest[4..].split_whitespace().map(str::to_string).collect::<Vec<_>>())
                }
                _ => continue,
            };
            let target = words.iter().any(|w| w == "-c");
            let options: Vec<String> = words.into_iter().filter(|w| w != "-c").collect();
            let script = block(&mut lines, doc, n);
            let expected = run.then(|| loop {
                match lines.next() {
                    Some((_, l)) if l.trim().is_empty() => continue,
                    Some((m, l)) if l.trim_end() == "```output" => break block(&mut lines, doc, m),
                    _ => panic!("{doc}:{n}: a ```stap run block must be followed by an ```output block"),
                }
            });
            v.push(Example { doc, line: n, script, expected, target, options });
        }
    }
    v
}

#[test]
fn documented_examples_parse() {
    let mut checked = 0;
    for e in examples().iter().filter(|e| e.expected.is_none()) {
        let (out, err, code) = common::telco_run(&["--last-pass", "1", "-e", &e.script]);
        assert_eq!(code, Some(0), "{}:{}: this example does not parse:\n{}\n{err}", e.doc, e.line, e.script);
        assert!(!out.is_empty(), "{}:{}: {}", e.doc, e.line, e.script);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} examples found");
}

/// Every `0x` number as `0x…`.
fn mask_hex(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        out.push_str("0x…");
        rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out.push_str(rest);
    out
}

/// tests/programs/docs.c, built once (with its debugging information).
fn docs_program() -> String {
    static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let exe = common::scratch("docs").join("docs");
        common::gcc("docs.c", &exe, &["-O1", "-g", "-fno-inline"]);
        exe.display().to_string()
    })
    .clone()
}

#[test]
fn documented_examples_run() {
    let mut checked = 0;
    for e in examples() {
        let Some(expected) = &e.expected else { continue };
        let prog = if e.target { docs_program() } else { String::new() };
        let mut args: Vec<&str> = e.options.iter().map(String::as_str).collect();
        args.extend(["-e", e.script.as_str()]);
        if e.target {
            args.extend(["-c", prog.as_str()]);
        }
        let (out, err, code) = common::telco_run(&args);
        // The program's path is its name, and where the output block
        // writes `0x…`, addresses (which ASLR moves) are compared as that.
        let mut out = if e.target { out.replace(&prog, "docs") } else { out };
        if expected.contains("0x…") {
            out = mask_hex(&out);
        }
        assert_eq!(code, Some(0), "{}:{}: this example fails:\n{}\n{err}", e.doc, e.line, e.script);
        assert_eq!(
            &out, expected,
            "{}:{}: this example prints something else than its output block:\n{}\nstderr:\n{err}",
            e.doc, e.line, e.script
        );
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} runnable examples found");
}

/// Every function a table of the language reference lists (`| `name(`…)
/// is called by an example that runs.
#[test]
fn every_documented_function_has_an_example_that_runs() {
    let text = std::fs::read_to_string(common::repo().join("docs/language.md")).expect("read doc");
    let mut names = std::collections::BTreeSet::new();
    for row in text.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap_or("");
        // Probe points (`process("PATH").function(...)`) are not functions.
        for part in first.split('`').skip(1).step_by(2).filter(|p| !p.contains(").")) {
            let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let rest = &part[name.len()..];
            if !name.is_empty()
                && (rest.starts_with('(') || rest.starts_with(':'))
                && !name.starts_with(char::is_numeric)
            {
                names.insert(name);
            }
        }
    }
    let runs: String = examples().into_iter().filter(|e| e.expected.is_some()).map(|e| e.script).collect();
    let called = |n: &str| {
        runs.match_indices(n).any(|(i, _)| {
            let before = runs[..i].chars().next_back().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let after = runs[i + n.len()..].trim_start().starts_with('(');
            before && after
        })
    };
    let missing: Vec<&String> = names.iter().filter(|n| !called(n)).collect();
    assert!(names.len() > 60, "only {} functions found", names.len());
    assert!(missing.is_empty(), "{} function(s) without an example that runs: {missing:?}", missing.len());
}

/// Every document a tracked file names (`docs/language.md`, `INTERNALS.md`)
/// is in the repository: nothing cites a file a clone does not have.
#[test]
fn cited_documents_exist() {
    let root = common::repo();
    let out = std::process::Command::new("git").arg("-C").arg(&root).arg("ls-files").output().expect("git ls-files");
    let files = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut missing = Vec::new();
    let mut checked = 0;
    for file in files.lines() {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        // roff (the manual page) escapes its hyphens.
        let text = text.replace("\\-", "-");
        let dir = std::path::Path::new(file).parent().unwrap_or(std::path::Path::new(""));
        for (i, _) in text.match_indices(".md") {
            let start =
                text[..i].rfind(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c))).map_or(0, |p| p + 1);
            let end = i + 3;
            if text[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                continue;
            }
            let name = text[start..end].trim_start_matches("./");
            if name.len() <= 3 || name.starts_with('.') {
                continue;
            }
            checked += 1;
            // A path relative to the root or to the file, or a path's last
            // components (`"docs" / "PERFORMANCE.md"` in a script).
            let tail = format!("/{name}");
            if !root.join(name).exists()
                && !root.join(dir).join(name).exists()
                && !files.lines().any(|f| f.ends_with(&tail))
            {
                missing.push(format!("{file} cites {name}"));
            }
        }
    }
    assert!(checked > 20, "only {checked} citations found");
    assert!(missing.is_empty(), "documents cited but not in the repository:\n{}", missing.join("\n"));
}
