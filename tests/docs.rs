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
