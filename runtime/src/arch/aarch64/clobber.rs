//! Which registers a call into the compiled blob can change: on x86_64
//! read off the machine code so lean trampolines save less
//! (`x86_64/clobber.rs`). aarch64's trampolines are all full
//! (`trampoline::LEAN` is false), so every answer here is "unknown", which
//! the caller takes as "save everything".

use telco_abi::artifact::Symbol;

pub use telco_abi::arch::aarch64::{RegMask, CALLER_SAVED};

/// The clobber analysis of a linked blob (none yet on aarch64).
pub struct Clobbers<'a> {
    _code: &'a [u8],
}

impl<'a> Clobbers<'a> {
    pub fn new(code: &'a [u8], _symbols: &'a [Symbol]) -> Self {
        Clobbers { _code: code }
    }

    /// The registers a call of the function at `start` may change: None
    /// (unknown) here.
    pub fn of(&mut self, _start: u32) -> Option<RegMask> {
        None
    }
}
