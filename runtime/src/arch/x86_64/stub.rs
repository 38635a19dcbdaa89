//! The remote-operation stub (x86_64): code in a page of the target that
//! runs an injected system call, or receives a called function's return,
//! and then puts *every* register back by itself and jumps to where the
//! thread was. The tracer watches it with `PTRACE_SYSCALL` (syscall stops,
//! no trap flag, no `int3`): if the tracer dies at any instant, the thread
//! finishes the operation and goes on as it was (`os::ptrace`).
//!
//! Layout of the page:
//!
//! ```text
//! CALL_RETURN:  mov rdi, rax          ; a called function returns here
//!               mov eax, SYS_getpid   ; (its result kept in rdi)
//! SYSCALL_AT:   syscall               ; an injected system call starts here
//! RESTORE:      push [rip+flags]; popfq
//!               mov rax, [rip+rax] ... mov r15, [rip+r15]   (all but rsp)
//!               mov rsp, [rip+rsp]
//!               jmp [rip+rip]
//! BLOCK:        rax rbx rcx rdx rsi rdi rbp rsp r8..r15 rip rflags
//! ```
//!
//! The block holds the state the thread resumes in if the tracer is gone
//! ([`resume_block`]): its saved registers, with a system call it was
//! interrupted in set up to restart, as the kernel would have done.

use super::Regs;

/// Offsets in the stub's page.
pub const CALL_RETURN: u64 = 0;
pub const SYSCALL_AT: u64 = 8;
/// Where the thread stops after the system call (entry and exit stops).
pub const AFTER_SYSCALL: u64 = SYSCALL_AT + 2;
pub const BLOCK: u64 = 256;
/// The marker system call a called function's return makes.
pub const RETURN_MARKER: i64 = libc::SYS_getpid;
/// Bytes of the page the stub uses.
pub const SIZE: u64 = BLOCK + 8 * 18;

/// Register numbers in ModRM/REX encoding, in the block's order (rsp, the
/// eighth, is restored apart).
const GPRS: [u8; 16] = [0, 3, 1, 2, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15];
const SLOT_RSP: u64 = 7;
const SLOT_RIP: u64 = 16;
const SLOT_FLAGS: u64 = 17;

/// The stub's code (for a page anywhere: everything is RIP-relative).
pub fn code() -> Vec<u8> {
    let mut c = vec![0x48, 0x89, 0xc7]; // mov rdi, rax
    c.extend([0xb8]);
    c.extend((RETURN_MARKER as u32).to_le_bytes()); // mov eax, SYS_getpid
    assert_eq!(c.len() as u64, SYSCALL_AT);
    c.extend([0x0f, 0x05]); // syscall
                            // `op [rip + disp32]` reaching the block slot `slot`.
    let rip_rel = |c: &mut Vec<u8>, prefix: &[u8], slot: u64| {
        c.extend_from_slice(prefix);
        let next = c.len() as u64 + 4;
        let disp = (BLOCK + 8 * slot) as i64 - next as i64;
        c.extend((disp as i32).to_le_bytes());
    };
    rip_rel(&mut c, &[0xff, 0x35], SLOT_FLAGS); // push qword [rip+flags]
    c.push(0x9d); // popfq
    for (slot, &reg) in GPRS.iter().enumerate() {
        if slot as u64 == SLOT_RSP {
            continue;
        }
        let rex = 0x48 | if reg >= 8 { 0x04 } else { 0 };
        let modrm = ((reg & 7) << 3) | 0b101;
        rip_rel(&mut c, &[rex, 0x8b, modrm], slot as u64); // mov reg, [rip+slot]
    }
    rip_rel(&mut c, &[0x48, 0x8b, 0x25], SLOT_RSP); // mov rsp, [rip+rsp]
    rip_rel(&mut c, &[0xff, 0x25], SLOT_RIP); // jmp qword [rip+rip]
    assert!((c.len() as u64) <= BLOCK);
    c
}

/// The register set the resume block needs besides the general registers:
/// none here (the stub restores only those; the tracer's operations leave
/// the others alone).
pub const FP_REGSET: Option<i32> = None;

/// The state a thread stopped with `saved` resumes in after the stub runs
/// without the tracer: the registers, with a system call that was
/// interrupted (`-ERESTARTSYS` and friends, `orig_rax` its number) made to
/// run again, as the kernel does when it resumes such a thread.
pub fn resume_block(saved: &Regs, _fp: &[u8], _sigmask: u64) -> Vec<u8> {
    let mut r = *saved;
    if (saved.orig_rax as i64) >= 0 {
        match saved.rax as i64 {
            -514..=-512 => {
                r.rax = saved.orig_rax;
                r.rip = saved.rip.wrapping_sub(2);
            }
            -516 => {
                r.rax = libc::SYS_restart_syscall as u64;
                r.rip = saved.rip.wrapping_sub(2);
            }
            _ => {}
        }
    }
    let words = [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15,
        r.rip, r.eflags,
    ];
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Registers to run the stub at `stub` from `saved`: the stack pointer
/// below the thread's red zone (the restore's `popfq` uses it).
fn at_stub(saved: &Regs, pc: u64) -> Regs {
    let mut r = *saved;
    r.rsp = (saved.rsp.wrapping_sub(256)) & !15;
    r.rip = pc;
    super::forget_syscall(&mut r);
    r
}

/// Registers for system call `nr` with `args` run by the stub at `stub`.
pub fn syscall_regs(saved: &Regs, stub: u64, nr: i64, args: [u64; 6]) -> Regs {
    let mut r = at_stub(saved, stub + SYSCALL_AT);
    r.rax = nr as u64;
    (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
    r
}

/// The entry marker (a program run to its entry point with no `int3`
/// and no stop at each system call of the dynamic loader): the entry
/// jumps here; the registers it uses are kept below the stack pointer
/// (the red zone, free at a program's entry and which the kernel's signal
/// frames skip); `ENTRY_MARKER_SIGNAL` is unblocked and sent to the thread
/// itself (`tgkill`), which a tracer sees as a signal-delivery stop at
/// `ENTRY_MARKER_AFTER` (and takes back with the thread's old mask); then
/// the old mask and the registers come back, and the relocated first
/// instructions of the entry follow (then a jump back past them). A tracer
/// that dies leaves the program to start normally: the signal's default
/// is to be ignored (at worst a handler a preloaded library installed
/// sees one `SIGURG`), and no flags change (`mov`, `lea` only).
pub fn entry_marker_head() -> Vec<u8> {
    let mut c = Vec::new();
    c.extend([0x48, 0x89, 0x44, 0x24, 0xf8]); // mov [rsp-8], rax
    c.extend([0x48, 0x89, 0x4c, 0x24, 0xf0]); // mov [rsp-16], rcx
    c.extend([0x4c, 0x89, 0x5c, 0x24, 0xe8]); // mov [rsp-24], r11
    c.extend([0x48, 0x89, 0x7c, 0x24, 0xe0]); // mov [rsp-32], rdi
    c.extend([0x48, 0x89, 0x74, 0x24, 0xd8]); // mov [rsp-40], rsi
    c.extend([0x48, 0x89, 0x54, 0x24, 0xd0]); // mov [rsp-48], rdx
    c.extend([0x4c, 0x89, 0x54, 0x24, 0xc8]); // mov [rsp-56], r10
    c.extend([0x48, 0xc7, 0x44, 0x24, 0xc0]); // mov qword [rsp-64], 1 << (sig - 1)
    c.extend((1u32 << (ENTRY_MARKER_SIGNAL - 1)).to_le_bytes());
    let mov_eax = |c: &mut Vec<u8>, v: i64| {
        c.push(0xb8);
        c.extend((v as u32).to_le_bytes());
    };
    mov_eax(&mut c, libc::SYS_rt_sigprocmask);
    c.extend([0xbf, 0x01, 0x00, 0x00, 0x00]); // mov edi, SIG_UNBLOCK
    c.extend([0x48, 0x8d, 0x74, 0x24, 0xc0]); // lea rsi, [rsp-64]
    c.extend([0x48, 0x8d, 0x54, 0x24, 0xb8]); // lea rdx, [rsp-72] (the old mask)
    c.extend([0x41, 0xba, 0x08, 0x00, 0x00, 0x00]); // mov r10d, 8
    c.extend([0x0f, 0x05]); // syscall
    mov_eax(&mut c, libc::SYS_gettid);
    c.extend([0x0f, 0x05]); // syscall
    c.extend([0x89, 0xc6]); // mov esi, eax
    mov_eax(&mut c, libc::SYS_getpid);
    c.extend([0x0f, 0x05]); // syscall
    c.extend([0x89, 0xc7]); // mov edi, eax
    c.push(0xba); // mov edx, sig
    c.extend((ENTRY_MARKER_SIGNAL as u32).to_le_bytes());
    mov_eax(&mut c, libc::SYS_tgkill);
    c.extend([0x0f, 0x05]); // syscall
    assert_eq!(c.len() as u64, ENTRY_MARKER_AFTER);
    mov_eax(&mut c, libc::SYS_rt_sigprocmask);
    c.extend([0xbf, 0x02, 0x00, 0x00, 0x00]); // mov edi, SIG_SETMASK
    c.extend([0x48, 0x8d, 0x74, 0x24, 0xb8]); // lea rsi, [rsp-72]
    c.extend([0xba, 0x00, 0x00, 0x00, 0x00]); // mov edx, 0
    c.extend([0x41, 0xba, 0x08, 0x00, 0x00, 0x00]); // mov r10d, 8
    c.extend([0x0f, 0x05]); // syscall
    c.extend([0x48, 0x8b, 0x44, 0x24, 0xf8]); // mov rax, [rsp-8]
    c.extend([0x48, 0x8b, 0x4c, 0x24, 0xf0]); // mov rcx, [rsp-16]
    c.extend([0x4c, 0x8b, 0x5c, 0x24, 0xe8]); // mov r11, [rsp-24]
    c.extend([0x48, 0x8b, 0x7c, 0x24, 0xe0]); // mov rdi, [rsp-32]
    c.extend([0x48, 0x8b, 0x74, 0x24, 0xd8]); // mov rsi, [rsp-40]
    c.extend([0x48, 0x8b, 0x54, 0x24, 0xd0]); // mov rdx, [rsp-48]
    c.extend([0x4c, 0x8b, 0x54, 0x24, 0xc8]); // mov r10, [rsp-56]
    c
}

/// The signal the entry marker sends itself: ignored by default.
pub const ENTRY_MARKER_SIGNAL: i32 = libc::SIGURG;

/// Where the thread stops in the entry marker (after its `tgkill`).
pub const ENTRY_MARKER_AFTER: u64 = 0x66;

/// Where the marker keeps what it saved, from the stack pointer at its
/// stop, and how many bytes: the old signal mask, the new one, r10, rdx,
/// rsi, rdi, r11, rcx, rax.
pub const ENTRY_KEPT: (i64, usize) = (-72, 72);

/// At the entry marker's stop: the registers as they were at the entry
/// (from `kept`, the `ENTRY_KEPT` bytes), at `pc`, and the thread's
/// signal mask before the marker.
pub fn entry_regs(now: &Regs, kept: &[u8], pc: u64) -> (Regs, u64) {
    let word = |i: usize| kept.get(8 * i..8 * i + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_le_bytes);
    let mut r = *now;
    (r.r10, r.rdx, r.rsi, r.rdi, r.r11, r.rcx, r.rax) = (word(2), word(3), word(4), word(5), word(6), word(7), word(8));
    r.rip = pc;
    // Stopped for a signal after the `tgkill`: not a system call the
    // kernel may restart once the registers are the entry's.
    super::forget_syscall(&mut r);
    (r, word(0))
}

/// A called function's result, read at the marker's system-call stop.
pub fn call_result(r: &Regs) -> u64 {
    r.rdi
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, NasmFormatter};

    /// The entry marker decodes whole, stops after its `tgkill`, and
    /// changes no flag (a program started through it after the tracer died
    /// sees the flags the kernel gave it).
    #[test]
    fn the_entry_marker_sends_its_signal_and_keeps_the_flags() {
        use iced_x86::Code;
        let head = entry_marker_head();
        let mut d = Decoder::with_ip(64, &head, 0, DecoderOptions::NONE);
        let mut ends = Vec::new();
        let mut syscalls = 0;
        while d.can_decode() {
            let i = d.decode();
            assert!(!i.is_invalid(), "at {:#x}", i.ip());
            // (The kernel gives a system call's flags back.)
            if i.code() == Code::Syscall {
                syscalls += 1;
            } else {
                assert_eq!(i.rflags_modified(), 0, "{i} changes flags");
            }
            ends.push(i.next_ip());
        }
        assert_eq!(ends.last(), Some(&(head.len() as u64)));
        assert!(ends.contains(&ENTRY_MARKER_AFTER));
        assert_eq!(&head[ENTRY_MARKER_AFTER as usize - 2..ENTRY_MARKER_AFTER as usize], &[0x0f, 0x05]);
        assert_eq!(syscalls, 5);
        // What it keeps lies in the red zone the kernel's signal frames skip.
        assert!(ENTRY_KEPT.0 >= -128 && ENTRY_KEPT.0 + ENTRY_KEPT.1 as i64 == 0);
        // SAFETY: user_regs_struct is plain integers.
        let now: Regs = unsafe { std::mem::zeroed() };
        let kept: Vec<u8> = (0..9u64).flat_map(|i| (100 + i).to_le_bytes()).collect();
        let (r, mask) = entry_regs(&now, &kept, 0x1234);
        assert_eq!((mask, r.r10, r.rdx, r.rsi, r.rdi, r.r11, r.rcx, r.rax), (100, 102, 103, 104, 105, 106, 107, 108));
        assert_eq!((r.rip, r.orig_rax as i64), (0x1234, -1));
    }

    /// The stub decodes to what its documentation says, and every
    /// RIP-relative operand lands on its block slot.
    #[test]
    fn the_stub_restores_every_register_from_its_block() {
        let base = 0x7f00_0000_0000u64;
        let code = code();
        let mut d = Decoder::with_ip(64, &code, base, DecoderOptions::NONE);
        let mut f = NasmFormatter::new();
        let mut lines = Vec::new();
        for i in d.iter() {
            let mut s = String::new();
            f.format(&i, &mut s);
            if i.is_ip_rel_memory_operand() {
                let slot = (i.ip_rel_memory_address() - base - BLOCK) / 8;
                s = format!("{} <slot {slot}>", s.split('[').next().unwrap_or_default().trim_end());
            }
            lines.push(s);
        }
        let expected = [
            "mov rdi,rax",
            "mov eax,27h",
            "syscall",
            "push qword <slot 17>",
            "popf",
            "mov rax, <slot 0>",
            "mov rbx, <slot 1>",
            "mov rcx, <slot 2>",
            "mov rdx, <slot 3>",
            "mov rsi, <slot 4>",
            "mov rdi, <slot 5>",
            "mov rbp, <slot 6>",
            "mov r8, <slot 8>",
            "mov r9, <slot 9>",
            "mov r10, <slot 10>",
            "mov r11, <slot 11>",
            "mov r12, <slot 12>",
            "mov r13, <slot 13>",
            "mov r14, <slot 14>",
            "mov r15, <slot 15>",
            "mov rsp, <slot 7>",
            "jmp qword <slot 16>",
        ];
        let got: Vec<String> = lines.iter().map(|l| l.replace(",<", ", <")).collect();
        assert_eq!(got, expected.map(String::from).to_vec());
    }

    #[test]
    fn an_interrupted_system_call_is_restarted() {
        // SAFETY: user_regs_struct is plain integers.
        let mut r: Regs = unsafe { std::mem::zeroed() };
        r.rip = 0x1000;
        r.orig_rax = libc::SYS_read as u64;
        r.rax = (-512i64) as u64;
        let b = resume_block(&r, &[], 0);
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!((word(0), word(16)), (libc::SYS_read as u64, 0xffe));
        r.rax = (-516i64) as u64;
        let b = resume_block(&r, &[], 0);
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!((word(0), word(16)), (libc::SYS_restart_syscall as u64, 0xffe));
        r.orig_rax = u64::MAX;
        r.rax = 5;
        let b = resume_block(&r, &[], 0);
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!((word(0), word(16)), (5, 0x1000));
    }
}
