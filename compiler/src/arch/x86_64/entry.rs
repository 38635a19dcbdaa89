//! How a function is entered, read from its first instructions (x86_64):
//! whether the word at the top of the stack when it starts is a return
//! address it only returns through.
//!
//! A return probe takes that word over (the function returns through a
//! trampoline), which is only right when the function was entered by a
//! call and treats the word as its way back. The ELF entry point (`_start`)
//! is entered with `argc` there; `vfork` pops its return address into a
//! register; `setjmp` saves it as the place to come back to. Such
//! functions are found here so that pass 2 can refuse their return probes
//! (their entry probes are harmless).

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind, Register};

/// Instructions read from a function's start before giving up: the frame
/// is built (or the word used) within the first few.
const WINDOW: usize = 24;

/// Why a function cannot take a return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReturnAddress {
    /// The ELF entry point: entered by the kernel with no return address.
    ElfEntry,
    /// Its instruction at this offset pops the return address.
    Pops(u64),
    /// Its instruction at this offset reads or writes the return address's
    /// slot as data.
    Uses(u64),
    /// Code of V8's embedded builtins (node, Chromium): V8 walks their
    /// frames by return address.
    V8Builtin,
}

impl std::fmt::Display for NoReturnAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoReturnAddress::ElfEntry => {
                f.write_str("it is the program's ELF entry point, entered by the kernel without a return address")
            }
            NoReturnAddress::Pops(at) => {
                write!(f, "its instruction at +{at:#x} pops its return address (it does not return by `ret`)")
            }
            NoReturnAddress::Uses(at) => {
                write!(f, "its instruction at +{at:#x} uses its return address as data")
            }
            NoReturnAddress::V8Builtin => f.write_str(
                "it is one of V8's embedded builtins, whose frames V8 walks by their return addresses \
                 (which a return probe takes over)",
            ),
        }
    }
}

/// Whether `code`, the first bytes of a function at link address `addr`,
/// uses the word its caller's `call` pushed other than by returning
/// through it. Reads instructions in order until the first branch, call or
/// return, or until the stack pointer is set in a way it cannot follow;
/// `None` when nothing seen uses the word.
pub fn return_address_use(code: &[u8], addr: u64) -> Option<NoReturnAddress> {
    match analyze(code, addr) {
        Seen::Uses(why) => Some(why),
        _ => None,
    }
}

/// Where a function that starts with a tail jump goes, its stack as the
/// caller left it (`_setjmp`: `xor esi, esi; jmp __sigsetjmp`): the code
/// there reads the same return address.
pub fn tail_jump(code: &[u8], addr: u64) -> Option<u64> {
    match analyze(code, addr) {
        Seen::TailJump(to) => Some(to),
        _ => None,
    }
}

enum Seen {
    Uses(NoReturnAddress),
    TailJump(u64),
    Nothing,
}

fn analyze(code: &[u8], addr: u64) -> Seen {
    use Seen::Nothing;
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    // Bytes pushed since the entry: the return address is at [rsp + depth].
    let mut depth: i64 = 0;
    for _ in 0..WINDOW {
        if !d.can_decode() {
            return Nothing;
        }
        let ins = d.decode();
        if ins.is_invalid() {
            return Nothing;
        }
        let at = ins.ip() - addr;
        // A memory operand on the return address's slot.
        let lea = ins.mnemonic() == Mnemonic::Lea;
        for i in 0..ins.op_count() {
            if ins.op_kind(i) == OpKind::Memory
                && !lea
                && ins.memory_base() == Register::RSP
                && ins.memory_index() == Register::None
            {
                let disp = ins.memory_displacement64() as i64;
                if disp >= depth && disp < depth + 8 {
                    return Seen::Uses(NoReturnAddress::Uses(at));
                }
            }
        }
        match ins.mnemonic() {
            Mnemonic::Push | Mnemonic::Pushfq => depth += 8,
            Mnemonic::Pop | Mnemonic::Popfq => {
                if ins.op_count() == 1 && ins.op0_kind() == OpKind::Register && ins.op0_register() == Register::RSP {
                    return Nothing;
                }
                if depth == 0 {
                    return Seen::Uses(NoReturnAddress::Pops(at));
                }
                depth -= 8;
            }
            Mnemonic::Sub | Mnemonic::Add
                if ins.op0_kind() == OpKind::Register && ins.op0_register() == Register::RSP =>
            {
                let imm = match ins.op1_kind() {
                    OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate8 | OpKind::Immediate32 => {
                        ins.immediate(1) as i64
                    }
                    _ => return Nothing,
                };
                depth += if ins.mnemonic() == Mnemonic::Sub { imm } else { -imm };
                if depth < 0 {
                    return Nothing;
                }
            }
            Mnemonic::Lea if ins.op0_register() == Register::RSP => {
                if ins.memory_base() != Register::RSP || ins.memory_index() != Register::None {
                    return Nothing;
                }
                depth -= ins.memory_displacement64() as i64;
                if depth < 0 {
                    return Nothing;
                }
            }
            _ => {
                // Anything else that sets rsp (mov, and, xchg, leave...):
                // the stack is no longer followed.
                let writes_rsp = (0..ins.op_count())
                    .any(|i| ins.op_kind(i) == OpKind::Register && ins.op_register(i) == Register::RSP && i == 0)
                    || ins.mnemonic() == Mnemonic::Leave;
                if writes_rsp {
                    return Nothing;
                }
            }
        }
        if ins.flow_control() == FlowControl::UnconditionalBranch
            && depth == 0
            && matches!(ins.op0_kind(), OpKind::NearBranch64 | OpKind::NearBranch32 | OpKind::NearBranch16)
        {
            return Seen::TailJump(ins.near_branch_target());
        }
        if ins.flow_control() != FlowControl::Next {
            return Nothing;
        }
    }
    Nothing
}

/// The length of Go's stack-bound check at the entry of a Go function
/// (`code`, its first bytes), compiled for Go's register ABI with `g` in
/// R14 (cmd/internal/obj/x86/obj6.go, `stacksplit`), in its three shapes:
///
/// * a small frame: `cmp rsp, [r14+0x10]; jbe morestack`;
/// * a large one: `lea r12, [rsp-N]; cmp r12, [r14+0x10]; jbe morestack`;
/// * a huge one: `mov r12, rsp; sub r12, N; jb morestack;
///   cmp r12, [r14+0x10]; jbe morestack`.
///
/// Its trampoline runs these first and runs the probe only when the check
/// passes, so a call whose stack grows (`morestack` starts the function
/// again) fires once; and the check proves that R14 is `g` there. Err:
/// why the function has no such check (Go's assembly, a leaf too small to
/// check its stack, one reached through Go's ABI0).
pub fn go_stack_check(code: &[u8]) -> Result<u8, String> {
    let mut dec = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let reg = |i: &iced_x86::Instruction, m: Mnemonic, r: Register| {
        i.mnemonic() == m && i.op0_kind() == OpKind::Register && i.op0_register() == r
    };
    let guard = |i: &iced_x86::Instruction, r: Register| {
        reg(i, Mnemonic::Cmp, r)
            && i.op1_kind() == OpKind::Memory
            && i.memory_base() == Register::R14
            && i.memory_index() == Register::None
            && i.memory_displacement64() == 0x10
    };
    let none = "its entry is not Go's stack-bound check on R14 (`cmp rsp, [r14+0x10]; jbe`): an assembly \
                function, or a leaf too small for Go to check its stack";
    let first = dec.decode();
    let checked = if guard(&first, Register::RSP) {
        true
    } else if reg(&first, Mnemonic::Lea, Register::R12) && first.memory_base() == Register::RSP {
        guard(&dec.decode(), Register::R12)
    } else if reg(&first, Mnemonic::Mov, Register::R12)
        && first.op1_kind() == OpKind::Register
        && first.op1_register() == Register::RSP
    {
        let (sub, jb) = (dec.decode(), dec.decode());
        reg(&sub, Mnemonic::Sub, Register::R12)
            && matches!(sub.op1_kind(), OpKind::Immediate32to64 | OpKind::Immediate8to64)
            && jb.mnemonic() == Mnemonic::Jb
            && guard(&dec.decode(), Register::R12)
    } else {
        false
    };
    let jbe = dec.decode();
    if !checked || jbe.mnemonic() != Mnemonic::Jbe || jbe.flow_control() != FlowControl::ConditionalBranch {
        return Err(none.into());
    }
    u8::try_from(jbe.next_ip()).map_err(|_| none.into())
}

/// The returns of a Go function (its `code`, at link-time `addr`), each
/// as (where its epilogue starts, its length up to and with the `ret`):
/// Go's epilogue (cmd/internal/obj/x86/obj6.go) restores the frame
/// pointer and pops the frame before every `ret`:
/// `mov rbp, [rsp+X]; add rsp, Y; ret` (a `nop` may come before the
/// `ret`: the deferred calls' way out), at least 10 bytes, so a jump fits
/// over each, and a return probe runs there with the stack pointer back
/// where it was at the entry. Err: why its returns cannot be probed (a
/// return without that epilogue, a tail jump out of the function).
pub fn go_epilogues(code: &[u8], addr: u64) -> Result<Vec<(u64, u8)>, String> {
    let end = addr + code.len() as u64;
    let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut out = Vec::new();
    // The two instructions before the current one.
    let mut prev: [Option<iced_x86::Instruction>; 2] = [None, None];
    for ins in &mut dec {
        if ins.is_invalid() {
            break;
        }
        match ins.flow_control() {
            FlowControl::Return => {
                let frame = match prev {
                    [Some(mov), Some(add)]
                        if mov.mnemonic() == Mnemonic::Mov
                            && mov.op0_kind() == OpKind::Register
                            && mov.op0_register() == Register::RBP
                            && mov.op1_kind() == OpKind::Memory
                            && mov.memory_base() == Register::RSP
                            && mov.memory_index() == Register::None
                            && add.mnemonic() == Mnemonic::Add
                            && add.op0_kind() == OpKind::Register
                            && add.op0_register() == Register::RSP
                            && matches!(add.op1_kind(), OpKind::Immediate8to64 | OpKind::Immediate32to64)
                            && ins.len() == 1 =>
                    {
                        Some(mov)
                    }
                    _ => None,
                };
                let Some(mov) = frame else {
                    return Err(format!(
                        "its return at {:#x} is not after Go's epilogue (`mov rbp, [rsp+X]; add rsp, Y; ret`):                          a function without a frame",
                        ins.ip()
                    ));
                };
                out.push((mov.ip(), (ins.next_ip() - mov.ip()) as u8));
            }
            FlowControl::UnconditionalBranch => {
                let to = ins.near_branch_target();
                if to < addr || to >= end {
                    return Err(format!("it leaves by a tail jump at {:#x} (to {to:#x}), not a return", ins.ip()));
                }
            }
            _ => {}
        }
        // A `nop` may come between (after a deferred call's return path).
        if ins.mnemonic() != Mnemonic::Nop {
            prev = [prev[1], Some(ins)];
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_epilogues_before_each_return() {
        // mov rbp,[rsp+0x120]; add rsp,0x128; ret; mov rbp,[rsp+8]; add rsp,0x10; ret
        let code = [
            0x48, 0x8b, 0xac, 0x24, 0x20, 0x01, 0x00, 0x00, 0x48, 0x81, 0xc4, 0x28, 0x01, 0x00, 0x00, 0xc3, 0x48, 0x8b,
            0x6c, 0x24, 0x08, 0x48, 0x83, 0xc4, 0x10, 0xc3,
        ];
        assert_eq!(go_epilogues(&code, 0x1000), Ok(vec![(0x1000, 16), (0x1010, 10)]));
        // With a nop before the ret (the deferred calls' way out).
        let code = [0x48, 0x8b, 0x6c, 0x24, 0x30, 0x48, 0x83, 0xc4, 0x38, 0x90, 0xc3];
        assert_eq!(go_epilogues(&code, 0x1000), Ok(vec![(0x1000, 11)]));
        // A return without a frame to pop: refused.
        assert!(go_epilogues(&[0x90, 0xc3], 0x1000).unwrap_err().contains("not after Go's epilogue"));
        // A tail jump out: refused.
        assert!(go_epilogues(&[0xe9, 0x00, 0x10, 0x00, 0x00], 0x1000).unwrap_err().contains("tail jump"));
    }

    #[test]
    fn start_pops_argc() {
        // endbr64; xor ebp,ebp; mov r9,rdx; pop rsi
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e];
        assert_eq!(return_address_use(&code, 0x1000), Some(NoReturnAddress::Pops(9)));
    }

    #[test]
    fn setjmp_reads_its_return_address() {
        // push rbx; mov rax,[rsp+8]
        let code = [0x53, 0x48, 0x8b, 0x44, 0x24, 0x08];
        assert_eq!(return_address_use(&code, 0), Some(NoReturnAddress::Uses(1)));
        // mov rax,[rsp]
        assert_eq!(return_address_use(&[0x48, 0x8b, 0x04, 0x24], 0), Some(NoReturnAddress::Uses(0)));
    }

    #[test]
    fn a_tail_jump_is_followed_by_the_caller() {
        // xor esi,esi; jmp +0x10 (from 0x1000: to 0x1014)
        let code = [0x31, 0xf6, 0xeb, 0x10];
        assert!(return_address_use(&code, 0x1000).is_none());
        assert_eq!(tail_jump(&code, 0x1000), Some(0x1014));
        // push rbx; jmp: not a tail jump (the stack is not the caller's).
        assert_eq!(tail_jump(&[0x53, 0xeb, 0x10], 0x1000), None);
    }

    #[test]
    fn ordinary_prologues_are_fine() {
        // push rbp; mov rbp,rsp; sub rsp,0x20; mov rax,[rbp+0x10]; call ...
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0x48, 0x8b, 0x45, 0x10, 0xe8, 0, 0, 0, 0];
        assert_eq!(return_address_use(&code, 0), None);
        // sub rsp,8; mov rax,[rsp+0x10] (a stack argument); ret
        let code = [0x48, 0x83, 0xec, 0x08, 0x48, 0x8b, 0x44, 0x24, 0x10, 0xc3];
        assert_eq!(return_address_use(&code, 0), None);
        // push rbx; pop rbx; ret
        assert_eq!(return_address_use(&[0x53, 0x5b, 0xc3], 0), None);
        // lea rdx,[rsp+8] (the caller's stack pointer, not the slot); ret
        assert_eq!(return_address_use(&[0x48, 0x8d, 0x54, 0x24, 0x08, 0xc3], 0), None);
        // Nothing decodable.
        assert_eq!(return_address_use(&[], 0), None);
    }

    #[test]
    fn go_stack_checks_in_their_three_shapes() {
        // cmp rsp,[r14+0x10]; jbe rel8
        assert_eq!(go_stack_check(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x30, 0x55]), Ok(6));
        // lea r12,[rsp-0xa8]; cmp r12,[r14+0x10]; jbe rel32
        let large = [0x4c, 0x8d, 0xa4, 0x24, 0x58, 0xff, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xc5, 0, 0, 0];
        assert_eq!(go_stack_check(&large), Ok(18));
        // mov r12,rsp; sub r12,0x2dd0; jb rel32; cmp r12,[r14+0x10]; jbe rel32
        let huge = [
            0x49, 0x89, 0xe4, 0x49, 0x81, 0xec, 0xd0, 0x2d, 0, 0, 0x0f, 0x82, 0x25, 0x07, 0, 0, 0x4d, 0x3b, 0x66, 0x10,
            0x0f, 0x86, 0x1b, 0x07, 0, 0,
        ];
        assert_eq!(go_stack_check(&huge), Ok(26));
        // A leaf without the check (inc rax; ret), the check on another
        // register, a check cut short, Go's ABI0 assembly (g from TLS).
        for code in [
            &[0x48, 0xff, 0xc0, 0xc3][..],
            &[0x48, 0x3b, 0x61, 0x10, 0x76, 0x30],
            &[0x49, 0x3b, 0x66, 0x10],
            &[0x64, 0x4c, 0x8b, 0x34, 0x25, 0xf8, 0xff, 0xff, 0xff],
        ] {
            assert!(go_stack_check(code).unwrap_err().contains("stack-bound check"), "{code:x?}");
        }
    }
}
