//! Short functions on aarch64: none. x86_64 hops (`telco_abi::artifact::
//! Hop`) exist because its 5-byte jump can be longer than a whole function
//! (`ret` is one byte); here every instruction, `ret` included, is one
//! 4-byte word and the `B` to the trampoline is one word, so any function
//! with an instruction after its landing pad takes the `B` on that
//! instruction, and nothing can arrive inside it. A function that is only a
//! landing pad has nothing to probe and the runtime's plan refuses it
//! (`ShortFunction`); no hop could help it.

use super::super::{FunctionRange, ModuleCode};

/// Never a hop on aarch64: `Ok(None)` for every function (see the module
/// documentation).
pub fn short_hop(_m: &impl ModuleCode, _f: FunctionRange) -> Result<Option<telco_abi::artifact::Hop>, String> {
    Ok(None)
}
