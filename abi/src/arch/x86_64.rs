//! x86_64's register file (System V ABI): the order a trampoline saves the
//! registers in, and what each one is for.

use super::Register;

const fn reg(name: &'static str, aliases: &'static [&'static str], caller_saved: bool) -> Register {
    Register { name, aliases, caller_saved }
}

/// The words of [`SavedRegs`], in order. Everything else here is an index
/// into this table.
pub const REGISTERS: [Register; 18] = [
    reg("rax", &["eax", "ax"], true),
    reg("rbx", &["ebx", "bx"], false),
    reg("rcx", &["ecx", "cx"], true),
    reg("rdx", &["edx", "dx"], true),
    reg("rsi", &["esi", "si"], true),
    reg("rdi", &["edi", "di"], true),
    reg("rbp", &["ebp", "bp"], false),
    reg("rsp", &["esp", "sp"], false),
    reg("r8", &[], true),
    reg("r9", &[], true),
    reg("r10", &[], true),
    reg("r11", &[], true),
    reg("r12", &[], false),
    reg("r13", &[], false),
    reg("r14", &[], false),
    reg("r15", &[], false),
    reg("rip", &["eip", "ip"], false),
    reg("rflags", &["eflags", "flags"], false),
];

/// Number of words in the register file.
pub const NREGS: usize = REGISTERS.len();

/// The registers of a probed thread at the probe, saved by its trampoline
/// (word `i` is `REGISTERS[i]`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SavedRegs {
    pub words: [u64; NREGS],
}
const _: () = assert!(core::mem::size_of::<SavedRegs>() == 8 * NREGS);

/// Indices of the general-purpose registers, as the trampolines' code and
/// the clobber analysis name them.
pub const RAX: usize = 0;
pub const RBX: usize = 1;
pub const RCX: usize = 2;
pub const RDX: usize = 3;
pub const RSI: usize = 4;
pub const RDI: usize = 5;
pub const RBP: usize = 6;
pub const RSP: usize = 7;
pub const R8: usize = 8;
pub const R9: usize = 9;
pub const R10: usize = 10;
pub const R11: usize = 11;
pub const RIP: usize = 16;
pub const RFLAGS: usize = 17;

/// The stack pointer, frame pointer and program counter.
pub const SP: usize = RSP;
pub const FP: usize = RBP;
pub const PC: usize = RIP;
/// Where a function's integer arguments arrive (`$arg1`…`$arg6`); the
/// seventh and later are on the stack, above the return address.
pub const ARG_REGS: [usize; 6] = [RDI, RSI, RDX, RCX, R8, R9];
/// Go's register ABI (ABIInternal, Go 1.17 and later): integer arguments
/// in RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11, one word each (a string
/// takes two, a slice three), and the goroutine's `g` in R14.
pub const GO_ARG_REGS: [usize; 9] = [RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11];
pub const GO_G_REG: usize = 14;
/// Where an integer result is returned (`$return`).
pub const RETURN_REG: usize = RAX;
/// A 16-byte integer result's high half.
pub const RETURN_REG2: usize = RDX;

/// The bits of a return address that are the address: all of them.
pub const PC_MASK: u64 = u64::MAX;

/// Bytes from the stack pointer at a function's entry to its first
/// argument passed on the stack (above the return address).
pub const STACK_ARGS_AT: u64 = 8;

/// Bit `i` stands for word `i` of [`SavedRegs`].
pub type RegMask = u32;

/// The registers a call may change (caller-saved), as a mask.
pub const CALLER_SAVED: RegMask = super::caller_saved(&REGISTERS) as RegMask;

/// `register("NAME")`: the index of NAME's word in [`SavedRegs`].
pub fn register_index(name: &str) -> Option<u32> {
    super::index_in(&REGISTERS, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_name_their_registers() {
        for (i, n) in [(RAX, "rax"), (RCX, "rcx"), (RDX, "rdx"), (RSI, "rsi"), (RDI, "rdi"), (RBP, "rbp")] {
            assert_eq!(REGISTERS[i].name, n);
        }
        for (i, n) in [(RSP, "rsp"), (R8, "r8"), (R9, "r9"), (R10, "r10"), (R11, "r11"), (RIP, "rip")] {
            assert_eq!(REGISTERS[i].name, n);
        }
        assert_eq!(REGISTERS[RBX].name, "rbx");
        assert_eq!(REGISTERS[RFLAGS].name, "rflags");
        assert_eq!(register_index("%eax"), Some(0));
        assert_eq!(register_index("flags"), Some(RFLAGS as u32));
        assert_eq!(register_index("xmm0"), None);
        // System V: rax rcx rdx rsi rdi r8-r11.
        assert_eq!(CALLER_SAVED, 1 << 0 | 1 << 2 | 1 << 3 | 1 << 4 | 1 << 5 | 0xf << 8);
    }
}
