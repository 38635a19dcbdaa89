//! aarch64: the parts of the architecture layer written so far, pure
//! functions compiled and tested on every host (issue 18 builds the rest
//! beside them: trampolines, registers, syscall injection, the clock).
//!
//! * `patch`: where a function's `B` goes (after its BTI/PAC landing
//!   pad), the one instruction it displaces relocated to run at the
//!   trampoline, branches and veneers.

pub mod patch;
