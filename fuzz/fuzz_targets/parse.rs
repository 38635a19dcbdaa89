//! Pass 1 must never panic or hang on any input, and whatever parses cleanly
//! must print to text that parses cleanly and prints the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use telco_compiler::parse_str;
use telco_compiler::print::print_script;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (_, script, diags) = parse_str("fuzz.tp", &text);
    let printed = print_script(&script);
    if diags.is_empty() {
        let (_, again, diags2) = parse_str("fuzz.tp", &printed);
        assert!(diags2.is_empty(), "canonical print does not parse:\n{printed}\n{diags2:?}");
        assert_eq!(printed, print_script(&again), "printing is not stable");
    }
});
