//! The examples of the user documentation (docs/*.md, ```stap blocks)
//! parse: a reference that stays true.

mod common;

#[test]
fn documented_examples_parse() {
    let mut checked = 0;
    for doc in ["docs/probe-points.md"] {
        let text = std::fs::read_to_string(common::repo().join(doc)).expect("read doc");
        let mut block: Option<String> = None;
        for line in text.lines() {
            match (&mut block, line.trim_end()) {
                (None, "```stap") => block = Some(String::new()),
                (Some(b), "```") => {
                    let (out, err, code) = common::telco_run(&["--last-pass", "1", "-e", b]);
                    assert_eq!(code, Some(0), "{doc}: this example does not parse:\n{b}\n{err}");
                    assert!(!out.is_empty(), "{doc}: {b}");
                    checked += 1;
                    block = None;
                }
                (Some(b), l) => {
                    b.push_str(l);
                    b.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert!(checked >= 5, "only {checked} examples found");
}
