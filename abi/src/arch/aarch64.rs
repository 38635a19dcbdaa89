//! aarch64's register file (AAPCS64, Linux): the order a trampoline saves
//! the registers in, and what each one is for. The same order as the
//! kernel's `user_pt_regs` (x0–x30, sp, pc, pstate), so a ptrace register
//! set and a saved block are the same words.

use super::Register;

const fn reg(name: &'static str, aliases: &'static [&'static str], caller_saved: bool) -> Register {
    Register { name, aliases, caller_saved }
}

/// The words of [`SavedRegs`], in order. Everything else here is an index
/// into this table. x0–x18 are caller-saved (x16/x17 are the linker's
/// scratch registers, x18 the platform register, which Linux leaves to
/// programs as a temporary); x19–x28, the frame pointer and the stack
/// pointer are kept by a call; x30 is the link register.
pub const REGISTERS: [Register; 34] = [
    reg("x0", &["w0"], true),
    reg("x1", &["w1"], true),
    reg("x2", &["w2"], true),
    reg("x3", &["w3"], true),
    reg("x4", &["w4"], true),
    reg("x5", &["w5"], true),
    reg("x6", &["w6"], true),
    reg("x7", &["w7"], true),
    reg("x8", &["w8"], true),
    reg("x9", &["w9"], true),
    reg("x10", &["w10"], true),
    reg("x11", &["w11"], true),
    reg("x12", &["w12"], true),
    reg("x13", &["w13"], true),
    reg("x14", &["w14"], true),
    reg("x15", &["w15"], true),
    reg("x16", &["w16", "ip0"], true),
    reg("x17", &["w17", "ip1"], true),
    reg("x18", &["w18"], true),
    reg("x19", &["w19"], false),
    reg("x20", &["w20"], false),
    reg("x21", &["w21"], false),
    reg("x22", &["w22"], false),
    reg("x23", &["w23"], false),
    reg("x24", &["w24"], false),
    reg("x25", &["w25"], false),
    reg("x26", &["w26"], false),
    reg("x27", &["w27"], false),
    reg("x28", &["w28"], false),
    reg("x29", &["w29", "fp"], false),
    reg("x30", &["w30", "lr"], true),
    reg("sp", &["wsp"], false),
    reg("pc", &[], false),
    reg("pstate", &["nzcv", "cpsr"], false),
];

/// Number of words in the register file.
pub const NREGS: usize = REGISTERS.len();

/// The registers of a probed thread at the probe, saved by its trampoline
/// (word `i` is `REGISTERS[i]`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SavedRegs {
    pub words: [u64; NREGS],
}

impl Default for SavedRegs {
    fn default() -> Self {
        SavedRegs { words: [0; NREGS] }
    }
}
const _: () = assert!(core::mem::size_of::<SavedRegs>() == 8 * NREGS);

/// Indices the trampolines and the rest of the port name.
pub const X0: usize = 0;
pub const X1: usize = 1;
pub const X16: usize = 16;
pub const X17: usize = 17;
pub const FP: usize = 29;
pub const LR: usize = 30;
pub const SP: usize = 31;
pub const PC: usize = 32;
pub const PSTATE: usize = 33;

/// Where a function's integer arguments arrive (`$arg1`…`$arg8`); the
/// ninth and later are on the stack at the entry's stack pointer.
pub const ARG_REGS: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
/// Go's register ABI (ABIInternal): integer arguments in X0-X15, one word
/// each, and the goroutine's `g` in X28.
pub const GO_ARG_REGS: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
pub const GO_G_REG: usize = 28;
/// Where an integer result is returned (`$return`); a 16-byte result's
/// high half is in [`RETURN_REG2`].
pub const RETURN_REG: usize = X0;
pub const RETURN_REG2: usize = X1;

/// The bits of a return address that are the address: below a
/// pointer-authentication code's bits (48-bit user addresses).
pub const PC_MASK: u64 = (1 << 48) - 1;

/// Bytes from the stack pointer at a function's entry to its first
/// argument passed on the stack (at the entry's stack pointer).
pub const STACK_ARGS_AT: u64 = 0;

/// Bit `i` stands for word `i` of [`SavedRegs`].
pub type RegMask = u64;

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
        for (i, n) in [(X0, "x0"), (X16, "x16"), (FP, "x29"), (LR, "x30"), (SP, "sp"), (PC, "pc"), (PSTATE, "pstate")] {
            assert_eq!(REGISTERS[i].name, n);
        }
        for (i, r) in REGISTERS.iter().enumerate().take(31) {
            assert_eq!(r.name, format!("x{i}"));
            assert_eq!(register_index(&format!("w{i}")), Some(i as u32));
        }
        assert_eq!(register_index("lr"), Some(LR as u32));
        assert_eq!(register_index("fp"), Some(FP as u32));
        assert_eq!(register_index("rax"), None);
        // AAPCS64: x0-x18 and the link register.
        assert_eq!(CALLER_SAVED, ((1 << 19) - 1) | (1 << LR));
    }
}
