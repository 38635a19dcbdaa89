//! The examples of the user documentation stay true: every ```stap block
//! parses (`--last-pass 1`), and every ```stap run block runs as
//! `telco-stap -e SCRIPT` (begin, end and timer probes: no target), exits
//! with 0 and prints exactly the ```output block that follows it.

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
            let run = match line.trim_end() {
                "```stap" => false,
                "```stap run" => true,
                _ => continue,
            };
            let script = block(&mut lines, doc, n);
            let expected = run.then(|| loop {
                match lines.next() {
                    Some((_, l)) if l.trim().is_empty() => continue,
                    Some((m, l)) if l.trim_end() == "```output" => break block(&mut lines, doc, m),
                    _ => panic!("{doc}:{n}: a ```stap run block must be followed by an ```output block"),
                }
            });
            v.push(Example { doc, line: n, script, expected });
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

#[test]
fn documented_examples_run() {
    let mut checked = 0;
    for e in examples() {
        let Some(expected) = &e.expected else { continue };
        let (out, err, code) = common::telco_run(&["-e", &e.script]);
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
