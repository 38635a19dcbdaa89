//! How to unwind through telco-stap's own code in the target
//! (`crate::owncode`): x86_64 derives a row per instruction of each
//! trampoline (`x86_64/frames.rs`). Not derived on aarch64 yet: no rows,
//! so an unwinder that meets a trampoline's address stops there (a
//! `ubacktrace()` or a profile sample taken inside a handler ends at the
//! trampoline).

use crate::owncode::Row;

/// The unwind rows of the code at `at` (none yet here).
pub fn rows(_code: &[u8], _at: u64, _entry: i64, _intra: Option<std::ops::Range<u64>>) -> Vec<Row> {
    Vec::new()
}
