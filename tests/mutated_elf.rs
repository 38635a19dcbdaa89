//! ELF files are input too (the target can replace or craft its own
//! executable and libraries): a real binary with SDT markers, DWARF lines
//! and `.eh_frame` (tests/programs/sdt.c built with -g), with bytes changed
//! in its headers or anywhere, given to pass 2 through every reader
//! (functions, return-probe checks, markers, source lines, statements,
//! stripped-file FDE functions). telco-stap answers or refuses with a
//! message and exit 1, within the time `timeout` allows: never a panic
//! (exit 101), a signal or a hang. A bounded property test.

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
        let o = std::process::Command::new("timeout")
            .args(["-s", "KILL", "60"])
            .arg(env!("CARGO_BIN_EXE_telco-stap"))
            .args([flag, &point])
            .output()
            .expect("run telco-stap");
        let _ = std::fs::remove_file(&path);
        let err = String::from_utf8_lossy(&o.stderr);
        prop_assert!(matches!(o.status.code(), Some(0 | 1)), "{flag} {point}: {:?}\n{err}", o.status);
        if o.status.code() == Some(1) {
            prop_assert!(err.contains("error") || err.contains("ERROR"), "{flag} {point}: no message\n{err}");
        }
    }
}
