//! What the recorder needs of an architecture ([`Isa`]): the one trait
//! that `recorder` drives and that each architecture (`recorder::X64`,
//! `a64::A64`) implements. Its own module, below both, so that `a64` can
//! implement it without importing the recorder.

use crate::reader::RegisterSpec;
use crate::x64::X64Block;

/// What the recorder needs of an architecture: its register list and
/// values, and its blocks (`x64` and `crate::a64`).
pub trait Isa {
    /// A thread's registers as the recorder keeps them.
    type Regs: Copy + Default;
    /// The `itrace:start` register list.
    fn specs() -> Vec<RegisterSpec>;
    /// `itrace:start`'s data: every register's value in list order, with
    /// `link` for the link register where it is not a machine register.
    fn start_values(regs: &Self::Regs, link: u64) -> Vec<u8>;
    fn pc(regs: &Self::Regs) -> u64;
    /// Append register `index`'s value (its size) to `out`.
    fn put(regs: &Self::Regs, index: u32, out: &mut Vec<u8>);
    fn value_size(index: u32) -> usize;
    fn read_block(pc: u64, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> X64Block;
    /// A block for code that could not be decoded.
    fn opaque_block(pc: u64, regs_after: &Self::Regs, code: Vec<u8>) -> X64Block;
    /// The link register's value, where the machine has one (aarch64's
    /// x30); None where the recorder tracks return addresses itself.
    fn link_register(regs: &Self::Regs) -> Option<u64>;
    /// Whether a replayed record's values start with the link register's
    /// (a machine register the block tracer stores: aarch64's x30), or
    /// leave it to the recorder (x86_64's `ra`, which it tracks).
    const LINK_IN_RECORD: bool = false;
}
