//! ELF files are input too (the target can replace or craft its own
//! executable and libraries): a real binary with SDT markers, DWARF lines
//! and `.eh_frame` (tests/programs/sdt.c built with -g), with bytes changed
//! in its headers or anywhere, given to pass 2 through every reader
//! (functions, return-probe checks, markers, source lines, statements,
//! stripped-file FDE functions). telco-stap answers or refuses with a
//! message and exit 1, within the time `timeout` allows: never a panic
//! (exit 101), a signal or a hang. A bounded property test. The DWARF
//! that target variables by name read (tests/programs/dwarfvars.c built
//! with -g) gets its own: bytes changed inside its debug sections, then
//! `-L` and a script reading variables, members, arrays, pretty-printing
//! and globals.

mod common;

use proptest::prelude::*;
use std::path::PathBuf;

fn original() -> &'static (PathBuf, Vec<u8>) {
    static O: std::sync::OnceLock<(PathBuf, Vec<u8>)> = std::sync::OnceLock::new();
    O.get_or_init(|| {
        let d = common::scratch("mutated-elf");
        let exe = d.join("sdt");
        common::gcc("sdt.c", &exe, &["-g"]);
        let bytes = std::fs::read(&exe).expect("read the program");
        (d, bytes)
    })
}

/// What pass 2 is asked about the file.
const QUERIES: [(&str, &str); 5] = [
    ("-L", "process(\"P\").function(\"*\")"),
    ("-l", "process(\"P\").function(\"*\").return"),
    ("-L", "process(\"P\").mark(\"*\")"),
    ("-l", "process(\"P\").statement(\"*@sdt.c:24\")"),
    ("-l", "process(\"P\").statement(\"step+4\")"),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_mutated_binary_gets_an_answer_or_a_message(
        // (in the first 4 KB: headers, or anywhere, offset, byte)
        edits in prop::collection::vec((any::<bool>(), any::<u32>(), any::<u8>()), 1..24),
        query in 0usize..QUERIES.len(),
        case in any::<u32>(),
    ) {
        let (dir, bytes) = original();
        let mut b = bytes.clone();
        for &(head, at, byte) in &edits {
            let n = if head { b.len().min(4096) } else { b.len() };
            b[at as usize % n] = byte;
        }
        let path = dir.join(format!("m{case}"));
        std::fs::write(&path, &b).expect("write the mutated program");
        let (flag, point) = QUERIES[query];
        let point = point.replace('P', &path.display().to_string());
        let o = common::telco_bounded(&[flag, &point], 60);
        let _ = std::fs::remove_file(&path);
        let err = String::from_utf8_lossy(&o.stderr);
        prop_assert!(matches!(o.status.code(), Some(0 | 1)), "{flag} {point}: {:?}\n{err}", o.status);
        if o.status.code() == Some(1) {
            prop_assert!(err.contains("error") || err.contains("ERROR"), "{flag} {point}: no message\n{err}");
        }
    }
}

/// The DWARF program and the file ranges of its `.debug_*` sections.
fn dwarf_original() -> &'static (PathBuf, Vec<u8>, Vec<(usize, usize)>) {
    static O: std::sync::OnceLock<(PathBuf, Vec<u8>, Vec<(usize, usize)>)> = std::sync::OnceLock::new();
    O.get_or_init(|| {
        let d = common::scratch("mutated-dwarf");
        let exe = d.join("dwarfvars");
        common::gcc("dwarfvars.c", &exe, &["-g"]);
        let bytes = std::fs::read(&exe).expect("read the program");
        let o = std::process::Command::new("readelf").args(["-W", "-S"]).arg(&exe).output().expect("readelf");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut ranges = Vec::new();
        for line in text.lines() {
            let Some(at) = line.find(".debug_") else { continue };
            let fields: Vec<&str> = line[at..].split_whitespace().collect();
            // name type address offset size ...
            let (Some(off), Some(size)) = (fields.get(3), fields.get(4)) else { continue };
            let (Ok(off), Ok(size)) = (usize::from_str_radix(off, 16), usize::from_str_radix(size, 16)) else {
                continue;
            };
            if size > 0 {
                ranges.push((off, size));
            }
        }
        assert!(ranges.len() >= 4, "debug sections of the program: {text}");
        (d, bytes, ranges)
    })
}

const DWARF_SCRIPT: &str = r#"probe process("P").function("describe") {
    println($s->corners[1]->x, $s->flags->b, $$parms$$, $s$, $global_counter, @var("global_origin")->y)
}
probe process("P").function("area").return { println($return, $p->x, $$return$) }"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_debug_information_gets_an_answer_or_a_message(
        // (section, offset in it, byte)
        edits in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u8>()), 1..16),
        list in any::<bool>(),
        case in any::<u32>(),
    ) {
        let (dir, bytes, ranges) = dwarf_original();
        let mut b = bytes.clone();
        for &(section, at, byte) in &edits {
            let (off, size) = ranges[section as usize % ranges.len()];
            b[off + at as usize % size] = byte;
        }
        let path = dir.join(format!("d{case}"));
        std::fs::write(&path, &b).expect("write the mutated program");
        let p = path.display().to_string();
        let args: Vec<String> = if list {
            vec!["-L".into(), format!("process(\"{p}\").function(\"*\")")]
        } else {
            vec!["--last-pass".into(), "2".into(), "-e".into(), DWARF_SCRIPT.replace('P', &p)]
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = common::telco_bounded(&args, 60);
        let _ = std::fs::remove_file(&path);
        let err = String::from_utf8_lossy(&o.stderr);
        prop_assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {:?}\n{err}", o.status);
        if o.status.code() == Some(1) {
            prop_assert!(err.contains("error") || err.contains("ERROR"), "{args:?}: no message\n{err}");
        }
    }
}
